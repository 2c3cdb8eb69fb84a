// The solver's cost model: a machine, what a collective costs on it, and what converting a tensor
// from one sharding to another costs.
#pragma once

#include <cstdint>
#include <string>

#include "fsdp/solver/sharding_spec.hpp"

namespace fsdp::solver {

// Defaults: one H100 SXM node. 989e12 FLOP/s is the dense BF16 tensor-core peak; 450e9 B/s is
// NVLink 4 in one direction (900 GB/s bidirectional per GPU), which is what a ring step uses;
// 5 us is a typical launch + synchronization latency of one NCCL collective inside a node.
struct Machine {
  int devices = 8;
  double flops_per_s = 989e12;
  double link_bytes_per_s = 450e9;
  double collective_latency_s = 5e-6;

  // Throws fsdp::Error unless devices >= 1 and the rates are positive and the latency >= 0.
  void validate() const;
};

// The collective the cost model charges for changing a tensor's layout (none: the change is local).
// It names a costed step of a plan, never an operation that runs: the collectives a ProcessGroup
// issues are fsdp::Collective (src/comm), a different enum.
enum class LayoutCollective : std::uint8_t {
  none,
  all_reduce,
  all_gather,
  reduce_scatter,
  all_to_all
};
const char* name_of(LayoutCollective collective);

// One collective's cost. buffer_bytes is the buffer the collective is named after (the full
// tensor for all-reduce, all-gather and reduce-scatter; one device's shard for all-to-all);
// traffic_bytes is what each device sends by the ring formulas:
//   all-reduce     2 (N-1)/N x buffer     all-gather   (N-1)/N x buffer (the gathered tensor)
//   reduce-scatter   (N-1)/N x buffer     all-to-all   (N-1)/N x buffer (the local shard)
// seconds = traffic_bytes / link_bytes_per_s + collective_latency_s (0 for none).
struct Transfer {
  LayoutCollective collective = LayoutCollective::none;
  double buffer_bytes = 0;
  double traffic_bytes = 0;
  double seconds = 0;
};

Transfer collective_cost(LayoutCollective collective, double buffer_bytes, const Machine& machine);

// The cheapest collective turning a tensor of tensor_bytes (unsharded size) laid out as `from`
// into `to`: partial -> replicated is an all-reduce, partial -> sharded a reduce-scatter,
// sharded -> replicated an all-gather, sharded -> sharded on another dimension an all-to-all.
// Replicated -> anything and sharded -> partial are local (slice, or keep the shard and zero the
// rest), so cost nothing.
Transfer reshard_cost(const ShardingSpec& from, const ShardingSpec& to, double tensor_bytes,
                      const Machine& machine);

// True for transfers that complete a pending partial sum (all-reduce, reduce-scatter): the
// solution reports them as communication; the others (all-gather, all-to-all) as resharding.
inline bool completes_partial_sum(const ShardingSpec& from) {
  return from.is_partial();
}

}  // namespace fsdp::solver
