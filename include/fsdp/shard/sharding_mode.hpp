// What stays sharded: the ZeRO stage of a model. The strategy (Full, LayerWise, Hybrid) decides
// where each parameter's pieces live; the mode decides which of parameters, gradients and
// optimizer state are kept in pieces and which are kept whole on every rank.
#pragma once

#include <cstdint>
#include <string>

namespace fsdp {

enum class ShardingMode : std::uint8_t {
  // ZeRO-3 (PyTorch FULL_SHARD): parameters, gradients and optimizer state in pieces; a unit's
  // parameters are gathered for its forward and again for its backward, and freed after each.
  full_shard,
  // ZeRO-2 (PyTorch SHARD_GRAD_OP, DeepSpeed stage 2): whole parameters stay on every rank,
  // gathered once per step after the optimizer updated the pieces; gradients are reduce-scattered
  // into pieces and optimizer state is in pieces.
  shard_grad_op,
  // ZeRO-1 (DeepSpeed stage 1): whole parameters and whole gradients on every rank; gradients are
  // reduce-scattered so each rank holds the average of its piece, each rank updates its piece, and
  // the parameters are gathered after the step. Only optimizer state is in pieces.
  shard_optimizer,
  // Replicated data parallel (PyTorch NO_SHARD, DDP): everything whole on every rank, gradients
  // all-reduced, every rank runs the whole update.
  no_shard,
};

// "full_shard", "shard_grad_op", "shard_optimizer", "no_shard"
const char* name_of(ShardingMode mode);
// The names above, also "zero3", "zero2", "zero1", "ddp" and dashes for underscores; any case.
// Throws Error (kind usage) listing the accepted names otherwise.
ShardingMode parse_sharding_mode(const std::string& name);
// ZeRO stage: 3, 2, 1, 0.
int zero_stage(ShardingMode mode);

// What a mode keeps in pieces on the ranks of a shard group; the rest is held whole on every rank.
// The one statement of the rule: the estimates (plan_estimate.hpp) derive their memory and traffic
// from it.
struct ShardedState {
  bool parameters = false;
  bool gradients = false;
  bool optimizer_state = false;
};
// full_shard: all three; shard_grad_op: gradients and optimizer state; shard_optimizer: optimizer
// state; no_shard: none.
ShardedState sharded_state(ShardingMode mode);

}  // namespace fsdp
