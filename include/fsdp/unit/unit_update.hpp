// UnitUpdate: an optimizer that steps the model one unit at a time, so that a runtime can step
// each unit as soon as its gradient reduction lands (optimizer in backward:
// Runtime::set_optimizer_in_backward) instead of after the whole backward. Adam, Sgd and
// Optimizer are UnitUpdates; a step by units is bit for bit the step of the whole model.
#pragma once

#include "fsdp/unit/sharded_model.hpp"

namespace fsdp {

template <class T>
class UnitUpdate {
 public:
  virtual ~UnitUpdate() = default;
  // Before the step's first unit: the step's coefficients, and any collective check of the
  // settings (so every rank calls it at the same point of the step).
  virtual void begin_step(ShardedModel<T>& model) = 0;
  // One unit's update from its reduced gradient pieces; its kernels may still run when it
  // returns. Error (before anything changes): the unit has no reduced gradients.
  virtual void step_unit(ShardedUnit<T>& unit) = 0;
  // After the last unit: waits for the kernels, and the step counts (step_count()).
  virtual void end_step() = 0;
};

// One step of every unit, in the model's order: what a rule's step(model) does once its checks
// passed.
template <class T>
void step_every_unit(UnitUpdate<T>& rule, ShardedModel<T>& model) {
  rule.begin_step(model);
  for (std::size_t u = 0; u < model.unit_count(); ++u) {
    rule.step_unit(model.unit(u));
  }
  rule.end_step();
}

}  // namespace fsdp
