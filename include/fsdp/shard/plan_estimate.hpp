// Memory and traffic estimates of a plan per rank, following the accounting of the ZeRO paper
// (Rajbhandari et al., 2019). The formulas are in docs/plans.md.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "fsdp/shard/sharding_plan.hpp"

namespace fsdp {

enum class OptimizerKind : std::uint8_t { sgd, sgd_momentum, adam, adamw };
// "sgd", "sgd_momentum", "adam", "adamw"
const char* name_of(OptimizerKind optimizer);
// The names above, also "momentum" and "sgd-momentum"; any case.
OptimizerKind parse_optimizer(const std::string& name);
// State buffers per parameter element: 0 (SGD), 1 (momentum), 2 (Adam, AdamW: m and v).
int state_buffers(OptimizerKind optimizer);

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
};

// Bytes per element of one parameter by role: the K of the ZeRO paper is `optimizer`.
struct ElementBytes {
  std::int64_t parameter = 0;  // resident parameter (working copy)
  std::int64_t gradient = 0;
  std::int64_t optimizer = 0;  // master weights (mixed) + state buffers
};
// Integer parameters are not trained: no gradient, no optimizer state, never cast.
ElementBytes element_bytes(DType dtype, const EstimateOptions& options);

struct RankEstimate {
  int rank = 0;
  std::int64_t elements = 0;         // elements held (own pieces, owned and replicated parameters)
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
  std::int64_t send_bytes() const {
    return forward_gather_send_bytes + backward_gather_send_bytes + gradient_send_bytes;
  }
};

struct PlanEstimate {
  EstimateOptions options;
  int world_size = 1;
  std::int64_t total_elements = 0;  // of the model
  std::vector<RankEstimate> ranks;  // one per rank, in rank order
  // The largest unit (layer) by gathered bytes and what gathering it takes on every rank: its
  // parameters and gradients at full size (replicated parameters excluded: they are resident).
  std::string largest_unit;
  std::int64_t largest_unit_elements = 0;
  std::int64_t gathered_working_set_bytes = 0;
  // persistent bytes of the fullest rank + the working set: the peak before activations.
  std::int64_t peak_bytes() const;
  // The same model trained without sharding (every rank holds everything), for comparison.
  std::int64_t unsharded_persistent_bytes = 0;
};

// Computes everything from the plan's arithmetic: no ranks are needed, so a plan for 1024 ranks
// is estimated on one process.
PlanEstimate estimate(const ShardingPlan& plan, const EstimateOptions& options);

}  // namespace fsdp
