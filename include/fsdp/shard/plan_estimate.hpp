// Memory and traffic estimates of a plan per rank, following the accounting of the ZeRO paper
// (Rajbhandari et al., 2019). The formulas are in docs/plans.md.
#pragma once

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <string>
#include <vector>

#include "fsdp/core/optimizer_kind.hpp"
#include "fsdp/shard/sharding_mode.hpp"
#include "fsdp/shard/sharding_plan.hpp"

namespace fsdp {

enum class Precision : std::uint8_t {
  // Parameters, gradients and optimizer states in each parameter's own dtype (fp32 for an fp32
  // model).
  fp32,
  // ZeRO's mixed precision: 16-bit parameters and gradients (2 bytes), fp32 master weights and
  // fp32 optimizer states.
  mixed,
};
// "fp32", "mixed"
const char* name_of(Precision precision);
// "fp32" (also "full"), "mixed" (also "bf16", "fp16", "amp"); any case.
Precision parse_precision(const std::string& name);

struct EstimateOptions {
  OptimizerKind optimizer = OptimizerKind::adam;
  Precision precision = Precision::fp32;
  // Which of parameters, gradients and optimizer state are kept in pieces (the ZeRO stage).
  ShardingMode mode = ShardingMode::full_shard;
  // Shard groups (hybrid-sharded data parallel, HSDP; not the Hybrid strategy): the plan's
  // placements apply within shard groups of this many consecutive
  // ranks (rank r is position r % G of group r / G), and the world_size / G groups hold copies
  // and all-reduce their gradient pieces. 0: the plan's world size (one group, no copies). Must
  // divide the plan's world size.
  int shard_group_size = 0;
  // Gradient accumulation without sync between steps (Runtime::set_requires_gradient_sync):
  // every unit's whole gradients are held from its first backward scope to the reducing step,
  // all at once (accumulated_gradient_bytes), instead of one unit's at a time.
  bool accumulates_whole_gradients = false;
  // Gradient reductions in flight while a unit computes (RuntimeOptions::max_reductions_in_flight,
  // 2 in a runtime by default): each holds its unit's whole gradients and its reduced piece until
  // it completes (reduction_in_flight_bytes). 0: every reduction is waited for when its unit's
  // backward ends, as the estimates before overlap assumed.
  int reductions_in_flight = 0;
  // Precision::mixed with UnitOptions::grad_dtype bf16: the gradients kept between the backward
  // and the step (pieces, shard_optimizer's whole gradients) are 2 bytes per element, the
  // paper's; false: fp32, 4 bytes (fsdp's default).
  bool keeps_16_bit_gradients = false;
};

// Bytes per element of one parameter by role: the K of the ZeRO paper is `optimizer`.
struct ElementBytes {
  std::int64_t parameter = 0;  // resident parameter (working copy), and what a gather moves
  std::int64_t gradient = 0;
  std::int64_t optimizer = 0;  // master weights (mixed) + state buffers
};
// Integer parameters are not trained: no gradient, no optimizer state, never cast.
ElementBytes element_bytes(DType dtype, const EstimateOptions& options);
// The same for one parameter: a frozen one (ParameterInfo::trainable false) has no gradient and
// no optimizer state; under mixed precision it keeps its fp32 piece (as `optimizer`, where the
// master weights are counted) and is gathered in 16 bits.
ElementBytes element_bytes(const ParameterInfo& parameter, const EstimateOptions& options);

struct RankEstimate {
  int rank = 0;
  // Parameter elements held: own pieces, owned and replicated parameters under full_shard;
  // every parameter whole under the other modes.
  std::int64_t elements = 0;
  std::int64_t parameter_bytes = 0;  // persistent, per rank
  std::int64_t gradient_bytes = 0;
  std::int64_t optimizer_bytes = 0;
  std::int64_t persistent_bytes() const {
    return parameter_bytes + gradient_bytes + optimizer_bytes;
  }
  // Bytes this rank sends in one step (ring algorithms, see docs/plans.md).
  std::int64_t forward_gather_send_bytes = 0;   // all-gather (or broadcast) before each forward
  std::int64_t backward_gather_send_bytes = 0;  // the same again before each backward
  std::int64_t gradient_send_bytes = 0;         // reduce-scatter, reduce or all-reduce of grads
  // Shard groups: the all-reduce of this rank's gradient piece with the ranks at the same
  // position in the other shard groups; 0 with one group. In the pieces' dtype: fp32 (4 bytes)
  // under Precision::mixed, where fsdp averages the widened fp32 pieces over the replicas.
  std::int64_t replica_gradient_send_bytes = 0;
  std::int64_t send_bytes() const {
    return forward_gather_send_bytes + backward_gather_send_bytes + gradient_send_bytes +
           replica_gradient_send_bytes;
  }
};

// Ranks with equal estimates, kept once: positions [first, first + count) of every shard group.
struct RankRun {
  int first = 0;
  int count = 0;
  RankEstimate estimate;  // estimate.rank == first
};

// Every rank's estimate, read like a std::vector<RankEstimate> of world-size entries (size(),
// operator[], at(), iteration in rank order), each made when it is read. Ranks with equal
// estimates are stored once, as runs (at most a few per parameter, none per rank), so an
// estimate's memory and time do not grow with the world size (fsdp-plan at 10^6 ranks took 49 s
// and 373 MB); only a loop over every rank does.
class RankEstimates {
 public:
  RankEstimates() = default;
  // runs cover positions [0, group_size) of a shard group, in order; rank r has the estimate of
  // position r % group_size. group_size divides world_size.
  RankEstimates(std::vector<RankRun> runs, int group_size, int world_size);

  std::size_t size() const { return static_cast<std::size_t>(world_size_); }
  bool empty() const { return world_size_ == 0; }
  // Rank r's estimate (rank set to r), r < size(); at() throws Error beyond.
  RankEstimate operator[](std::size_t rank) const;
  RankEstimate at(std::size_t rank) const;
  // The runs of one shard group's positions (the whole world with one group).
  const std::vector<RankRun>& runs() const { return runs_; }
  int group_size() const { return group_size_; }

  class const_iterator {
   public:
    using iterator_category = std::input_iterator_tag;
    using value_type = RankEstimate;
    using difference_type = std::ptrdiff_t;
    using pointer = const RankEstimate*;
    using reference = RankEstimate;
    const_iterator(const RankEstimates* owner, std::size_t rank) : owner_(owner), rank_(rank) {}
    RankEstimate operator*() const { return (*owner_)[rank_]; }
    const_iterator& operator++() {
      ++rank_;
      return *this;
    }
    bool operator==(const const_iterator& other) const { return rank_ == other.rank_; }
    bool operator!=(const const_iterator& other) const { return rank_ != other.rank_; }

   private:
    const RankEstimates* owner_;
    std::size_t rank_;
  };
  const_iterator begin() const { return const_iterator(this, 0); }
  const_iterator end() const { return const_iterator(this, size()); }

 private:
  std::vector<RankRun> runs_;
  int group_size_ = 0;
  int world_size_ = 0;
};

struct PlanEstimate {
  EstimateOptions options;  // as given, with shard_group_size resolved (never 0)
  int world_size = 1;
  std::int64_t total_elements = 0;  // of the model
  RankEstimates ranks;              // one per rank, in rank order
  // Every figure summed over all ranks (fsdp-plan's "all" row); rank is -1.
  RankEstimate all_ranks;
  // The largest unit (layer) by transient bytes and what running it takes on every rank on top
  // of the persistent bytes: full-size parameters (gathered; full_shard) and full-size gradients
  // (before their reduce-scatter; full_shard and shard_grad_op; or in no_shard's all-reduce
  // buffer). Replicated parameters are resident and excluded. shard_optimizer has none: the
  // name is empty and both figures 0 (but for whole_half_parameter_bytes). Under mixed precision
  // the parameters are 16-bit, as a model that reads them with half() holds them; one that reads
  // them with full() adds a float copy (4 bytes per element read) while its scope is open. A
  // unit gathers a 16-bit copy of its replicated parameters (and no_shard of all of them) too,
  // counted here; shard_grad_op and shard_optimizer hold those in whole_half_parameter_bytes.
  std::string largest_unit;
  std::int64_t largest_unit_elements = 0;
  std::int64_t gathered_working_set_bytes = 0;
  // What the working set holds, for people: "parameters and gradients", "gradients" or "".
  std::string working_set_holds;
  // Mixed precision under shard_grad_op and shard_optimizer: every float parameter whole in 16
  // bits (2 bytes), held from its forward to its backward (the paper's 2 Psi of parameters; fsdp
  // keeps no 16-bit copy between steps, only the fp32 master pieces); included in
  // gathered_working_set_bytes. 0 otherwise.
  std::int64_t whole_half_parameter_bytes = 0;
  // EstimateOptions::accumulates_whole_gradients: the whole gradients of every unit (trained,
  // not replicated) where the mode reduces them away after each backward scope; included in
  // gathered_working_set_bytes, whose largest unit then counts its parameters only. 0 otherwise.
  std::int64_t accumulated_gradient_bytes = 0;
  // EstimateOptions::reductions_in_flight times the most one unit's reduction holds: its whole
  // gradients where the mode reduces them from a transient buffer (not counted again when
  // accumulating) and the reduced piece of its sharded parameters (the reduce-scatter's output);
  // included in gathered_working_set_bytes. 0 with no reductions in flight.
  std::int64_t reduction_in_flight_bytes = 0;
  // The rank with the most persistent bytes (the first of equals).
  const RankEstimate& fullest_rank() const;
  // persistent bytes of the fullest rank + the working set: the peak before activations.
  std::int64_t peak_bytes() const;
  // The most bytes one rank sends per step.
  std::int64_t max_send_bytes() const;
  // What every rank holds under no_shard (whole parameters, gradients and optimizer state), the
  // baseline the modes are compared with; the same for every mode and shard group size.
  std::int64_t unsharded_persistent_bytes = 0;
  // world_size / options.shard_group_size: the copies of each piece.
  int replicas() const { return world_size / options.shard_group_size; }
};

// Computes everything from the plan's arithmetic: no ranks are needed, so a plan for 1024 ranks
// is estimated on one process. Throws Error when options.shard_group_size is negative or does
// not divide the plan's world size.
PlanEstimate estimate(const ShardingPlan& plan, const EstimateOptions& options);

// The plan estimated in every mode, options.mode ignored, in the order of the ZeRO paper's
// Figure 1: no_shard, shard_optimizer, shard_grad_op, full_shard.
std::vector<PlanEstimate> estimate_every_mode(const ShardingPlan& plan, EstimateOptions options);

}  // namespace fsdp
