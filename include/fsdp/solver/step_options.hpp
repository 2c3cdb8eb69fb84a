// What the solver plans for: one forward pass, or a whole training step (forward, backward,
// gradient synchronisation, optimizer) under a memory budget per device.
#pragma once

#include <cstdint>
#include <string>

#include "fsdp/shard/plan_estimate.hpp"

namespace fsdp::solver {

enum class StepKind : std::uint8_t {
  // The forward pass only, costed as the solver always did: compute and the conversions between
  // layouts. Memory is that of inference: parameter values, inputs, and each activation until
  // its last consumer has run.
  forward,
  // Forward, backward (gradient matmuls, gradient conversions), the gradient synchronisation of
  // every parameter into its layout, and the optimizer's element-wise step. Memory holds every
  // parameter's value, gradient and optimizer state, and activations until the backward pass
  // last reads them.
  training,
};
// "forward", "training"
const char* name_of(StepKind step);
// "forward" (also "inference"), "training" (also "train"); any case. Throws fsdp::Error otherwise.
StepKind parse_step_kind(const std::string& name);

struct StepOptions {
  StepKind step = StepKind::forward;
  // Bytes per parameter element come from fsdp::element_bytes(dtype, {optimizer, precision}), the
  // rule fsdp-plan's estimates use (docs/plans.md).
  OptimizerKind optimizer = OptimizerKind::adam;
  Precision precision = Precision::fp32;
  // The most bytes one device may hold at its peak; 0: no limit.
  std::int64_t memory_budget_bytes = 0;

  bool training() const { return step == StepKind::training; }
  // Throws fsdp::Error when the budget is negative.
  void validate() const;
};

}  // namespace fsdp::solver
