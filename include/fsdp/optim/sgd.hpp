// Sgd: stochastic gradient descent on the pieces each rank holds (PyTorch's torch.optim.SGD rule).
#pragma once

#include <cstdint>

#include "fsdp/comm/configuration_agreement.hpp"
#include "fsdp/optim/optimizer_state.hpp"
#include "fsdp/unit/sharded_model.hpp"
#include "fsdp/unit/unit_update.hpp"

namespace fsdp {

struct SgdOptions {
  double lr = 0.01;
  double momentum = 0.0;
  double dampening = 0.0;
  bool nesterov = false;
  double weight_decay = 0.0;  // L2: added to the gradient
};

// The label of SGD's momentum buffer per piece (PyTorch: momentum_buffer).
inline constexpr const char* kSgdMomentumBuffer = "momentum";

namespace detail {
// What one step's kernels take (Sgd::begin_step computes them).
template <class T>
struct SgdCoefficients {
  T lr, momentum, dampening, weight_decay;
  bool first, nesterov;
};
}  // namespace detail

// g = grad + weight_decay * p; with momentum: b = g on the first step, else
// b = momentum * b + (1 - dampening) * g, and g = nesterov ? g + momentum * b : b; p -= lr * g.
template <class T>
class Sgd : public UnitUpdate<T> {
 public:
  // Errors: lr < 0, momentum < 0, weight_decay < 0, nesterov without momentum or with dampening.
  explicit Sgd(SgdOptions options);
  // Updates every piece from its gradient piece. Error (before anything changes) when a unit has
  // no reduce-scattered gradients since the last zero_grad. The first step is collective over
  // the model's ranks: they check that each was given the same options (agree_with_ranks).
  void step(ShardedModel<T>& model);
  // The same step unit by unit (UnitUpdate; Runtime::set_optimizer_in_backward): begin_step
  // (collective as step's first part), step_unit on every unit once, end_step.
  void begin_step(ShardedModel<T>& model) override;
  void step_unit(ShardedUnit<T>& unit) override;
  void end_step() override;
  // Collective over the model's group and replicas: every rank's rule and options are the same,
  // else every rank throws fsdp::Error (ErrorKind::mismatch) naming the first that differs. The
  // first step() calls it; call it earlier to fail before training starts. Checks once.
  void agree_with_ranks(ShardedModel<T>& model);
  std::int64_t step_count() const { return steps_; }
  // Resuming from a checkpoint: the steps already taken (>= 0), which the rule's next step
  // continues from (bias correction, the first momentum step).
  void set_step_count(std::int64_t steps);
  const SgdOptions& options() const { return options_; }
  // The learning rate and weight decay of the steps that follow (learning-rate schedules,
  // lr_schedule.hpp), checked as the constructor checks them. The next step checks again,
  // collectively, that every rank has the same settings (so every rank must call these alike).
  void set_lr(double lr);
  void set_weight_decay(double weight_decay);
  // The state the rule keeps per piece (made at its first step of each piece).
  OptimizerState<T>& state() { return state_; }
  const OptimizerState<T>& state() const { return state_; }

 private:
  SgdOptions options_;
  std::int64_t steps_ = 0;
  bool agreed_ = false;
  OptimizerState<T> state_;
  detail::SgdCoefficients<T> coefficients_{};  // of the step begin_step began
};

extern template class Sgd<float>;
extern template class Sgd<double>;

// Waits for the gradient reductions in flight (ShardedModel::wait_for_gradients), then throws Error
// naming the first unit without gradients; used by every optimizer's step().
template <class T>
void require_grads(ShardedModel<T>& model, const char* optimizer);
// The same for one unit, without waiting (UnitUpdate::step_unit).
template <class T>
void require_unit_grads(const ShardedUnit<T>& unit, const char* optimizer);

// Collective over the model's group and replicas: every rank passed the same optimizer settings
// (configuration_agreement.hpp), once per optimizer (agreed is its flag); used by every
// optimizer's agree_with_ranks().
template <class T>
void require_same_settings(ShardedModel<T>& model, const Configuration& settings, bool& agreed);

// Sgd's and Adam's set_lr and set_weight_decay: options' member becomes value if a Rule made with
// it accepts it (else its constructor's error, and nothing changes), and the next step agrees
// again. Agreeing even when the value is unchanged keeps every rank's part in the check
// independent of values that may differ between ranks.
template <class Rule, class Options>
void replace_setting(Options& options, double Options::*member, double value, bool& agreed) {
  Options next = options;
  next.*member = value;
  const Rule checked(next);
  options = next;
  agreed = false;
}

}  // namespace fsdp
