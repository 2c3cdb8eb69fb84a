// fsdp-train's training run: options, and the run itself for fp32 or fp64.
#pragma once

#include <cstdint>
#include <exception>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "../common/usage_exit.hpp"
#include "dataset.hpp"
#include "fsdp/comm/process_group.hpp"
#include "fsdp/comm/raise_on_every_rank.hpp"
#include "fsdp/core/error.hpp"

namespace fsdp_train {

struct TrainOptions {
  // "mlp": the classifier of layers `hidden` on --data or synthetic data; "gpt": the GPT-2
  // transformer of hidden.size() blocks of width hidden[0] on text (docs/train.md).
  std::string model = "mlp";
  std::vector<std::int64_t> hidden{64, 64};
  std::int64_t heads = 4;  // gpt: attention heads (a divisor of the width)
  std::int64_t seq = 64;   // gpt: bytes per sequence
  // gpt: keep only each block's input in forward and recompute the block in its backward scope.
  bool activation_checkpointing = false;
  std::string dtype = "fp32";
  std::string optimizer = "adam";
  double lr = 3e-3;
  double weight_decay = 0.0;
  double momentum = 0.0;  // sgd only
  // The learning rate of each step (fsdp::LrSchedule): --lr after --warmup-steps of linear
  // warm-up, then constant, linear or cosine decay to --min-lr at the last step of the run, or
  // step decay (times --lr-gamma every --lr-step-size steps).
  std::string lr_schedule = "constant";
  std::int64_t warmup_steps = 0;
  double min_lr = 0.0;
  std::int64_t lr_step_size = 1;
  double lr_gamma = 0.1;
  std::string strategy = "full";
  std::string mode = "full_shard";  // what stays in pieces (fsdp::parse_sharding_mode)
  // Hybrid sharding: ranks per shard group (0: the ranks of each node; -1: one group of all
  // ranks, no replicas), or the number of replica groups (0: not given).
  int shard_group_size = -1;
  int replicate_groups = 0;
  // "" (none), "bf16" or "fp16": 16-bit gathered parameters and gradient reductions over fp32
  // master pieces (fp16 with dynamic loss scaling).
  std::string mixed_precision;
  // With mixed_precision: the dtype of the gradients kept between backward and step
  // (UnitOptions::grad_dtype), "fp32" or "bf16".
  std::string grad_dtype = "fp32";
  std::vector<std::string> full_shard_patterns;
  std::vector<std::string> layer_wise_patterns;
  // Parameter-name globs of parameters to freeze (fine-tuning): never reduced or stepped.
  std::vector<std::string> freeze_patterns;
  int epochs = 10;
  std::int64_t batch_size = 120;  // global: split evenly across the ranks
  // Each rank's share of a step in this many forward and backward passes, reduced once.
  int grad_accumulation = 1;
  std::uint64_t seed = 0;
  double clip = 0.0;                // 0: no clipping
  int prefetch_limit = 2;           // units gathered at once (RuntimeOptions::max_gathered_units)
  bool no_prefetch = false;         // gather each unit only when its scope opens
  int backward_prefetch_limit = 0;  // RuntimeOptions::max_gathered_units_backward
  int reductions_in_flight = 2;     // RuntimeOptions::max_reductions_in_flight
  bool optimizer_in_backward = false;  // Runtime::set_optimizer_in_backward
  double eval_fraction = 0.2;
  bool json = false;
  bool check = false;
  double check_tolerance = -1.0;  // < 0: check_tolerance(dtype)
  bool expect_loss_drop = false;
  // Checkpoints (docs/train.md): where, how often, how many to keep, and whether to continue
  // from the newest one there.
  std::string init_from;       // start from these parameters (plain HDF5 or a checkpoint) if set
  std::string checkpoint_dir;  // "": no checkpoints
  std::int64_t checkpoint_every = 0;  // steps between checkpoints; 0: only when the run ends
  int keep_last = 0;                  // 0: keep every checkpoint
  // Every checkpoint written before the run goes on; by default those of --checkpoint-every are
  // written in the background (fsdp::BackgroundSave) and the last one, or a stop's, at once.
  bool sync_checkpoints = false;
  bool resume = false;
  // Subnormal floats computed as they are, slowly, instead of flushed to zero
  // (models/subnormals.hpp).
  bool keep_subnormals = false;
  std::int64_t stop_after = 0;  // stop once this many steps are done in all (0: run every epoch)
  double time_budget = 0;       // seconds this process may run; 0: no limit
};

// An error every rank has, with the same message: rank 0 prints it and every rank exits 1.
class AgreedError : public std::runtime_error {
 public:
  explicit AgreedError(const std::string& message) : std::runtime_error(message) {}
};

// fsdp::on_every_rank, whose failure every rank has: as AgreedError, which rank 0 prints.
template <class Work>
void agreed_on_every_rank(fsdp::ProcessGroup& group, const std::string& task, Work&& work) {
  try {
    fsdp::on_every_rank(group, task, std::forward<Work>(work));
  } catch (const fsdp::Error& error) {
    throw AgreedError(fsdp::message_of(error));
  }
}

// Exit codes of fsdp-train.
constexpr int kExitOk = 0;
constexpr int kExitError = fsdp_apps::kExitError;
constexpr int kExitUsage = fsdp_apps::kExitUsage;
constexpr int kExitLossDidNotDrop = 3;
// --time-budget ran out before the last epoch: a checkpoint was saved, resume with --resume.
constexpr int kExitOutOfTime = 4;
constexpr int kExitCheckFailed = 5;

// --check tolerance on the largest relative parameter difference, by element type. fp32: the
// sharded run averages N per-rank mean gradients where the unsharded one takes one mean over the
// global batch, so the sums round differently (~1e-7 relative per step) and Adam carries the
// differences on; fp64 rounds 2^29 times finer. "bf16", "fp16" and "fp32 by loss" (an fp32
// transformer, whose weights part ways under Adam while the loss does not): the largest
// difference of the last epoch's mean loss, in nats.
double check_tolerance(const std::string& dtype);
// The ranks per shard group the options ask for (--shard-group-size, or the ranks divided by
// --replicate-groups): -1 for no hybrid sharding, 0 for the ranks of each node.
int hybrid_shard_group_size(const TrainOptions& options, int ranks);

// The steps of the whole run, epochs x ceil(training samples / global batch): the horizon of the
// learning-rate schedule, the same at any number of ranks.
std::int64_t scheduled_steps(const TrainOptions& options, const Split& data);

// Throws fsdp::Error naming the option that is wrong and what would be right. No communication:
// every rank reaches the same verdict from the same options and data.
void validate(const TrainOptions& options, int ranks, const Split& data);

// Trains on every rank of group (collective) and prints on rank 0. Returns an exit code that is
// the same on every rank. Throws fsdp::Error on bad options (the same on every rank).
int train(const TrainOptions& options, fsdp::ProcessGroup& group, const Split& data);

}  // namespace fsdp_train
