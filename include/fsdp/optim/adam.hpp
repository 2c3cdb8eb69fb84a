// Adam and AdamW on the pieces each rank holds (PyTorch's torch.optim.Adam / AdamW rules).
#pragma once

#include <cstdint>

#include "fsdp/optim/optimizer_state.hpp"
#include "fsdp/unit/sharded_model.hpp"
#include "fsdp/unit/unit_update.hpp"

namespace fsdp {

struct AdamOptions {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;
  // false: Adam's L2 (weight_decay * p added to the gradient); true: AdamW's decoupled decay
  // (p *= 1 - lr * weight_decay before the update).
  bool decoupled_weight_decay = false;

  static AdamOptions adamw(double lr, double weight_decay = 0.01) {
    AdamOptions options;
    options.lr = lr;
    options.weight_decay = weight_decay;
    options.decoupled_weight_decay = true;
    return options;
  }
};

// The labels of Adam's state per piece, in order: the first and second moments (PyTorch's names).
inline constexpr const char* kAdamFirstMoment = "exp_avg";
inline constexpr const char* kAdamSecondMoment = "exp_avg_sq";

namespace detail {
// What one step's kernels take (Adam::begin_step computes them).
template <class T>
struct AdamCoefficients {
  T lr, beta1, beta2, eps, correction1, correction2, l2, decay;
};
}  // namespace detail

// Step t (from 1): m = beta1 m + (1 - beta1) g; v = beta2 v + (1 - beta2) g^2;
// p -= lr * (m / (1 - beta1^t)) / (sqrt(v / (1 - beta2^t)) + eps).
template <class T>
class Adam : public UnitUpdate<T> {
 public:
  // Errors: lr < 0, eps <= 0, betas outside [0, 1), weight_decay < 0.
  explicit Adam(AdamOptions options);
  // Error (before anything changes) when a unit has no reduce-scattered gradients. The first
  // step is collective over the model's ranks: they check that each was given the same options.
  void step(ShardedModel<T>& model);
  // The same step unit by unit (UnitUpdate; Runtime::set_optimizer_in_backward): begin_step
  // (collective as step's first part), step_unit on every unit once, end_step.
  void begin_step(ShardedModel<T>& model) override;
  void step_unit(ShardedUnit<T>& unit) override;
  void end_step() override;
  // Collective over the model's group and replicas: every rank's rule (Adam or AdamW) and options
  // are the same, else every rank throws fsdp::Error (ErrorKind::mismatch) naming the first that
  // differs. The first step() calls it; call it earlier to fail before training. Checks once.
  void agree_with_ranks(ShardedModel<T>& model);
  std::int64_t step_count() const { return steps_; }
  // Resuming from a checkpoint: the steps already taken (>= 0), which the rule's next step
  // continues from (bias correction, the first momentum step).
  void set_step_count(std::int64_t steps);
  const AdamOptions& options() const { return options_; }
  // The learning rate and weight decay of the steps that follow (learning-rate schedules,
  // lr_schedule.hpp), checked as the constructor checks them. The next step checks again,
  // collectively, that every rank has the same settings (so every rank must call these alike).
  void set_lr(double lr);
  void set_weight_decay(double weight_decay);
  // The state the rule keeps per piece (made at its first step of each piece).
  OptimizerState<T>& state() { return state_; }
  const OptimizerState<T>& state() const { return state_; }

 private:
  AdamOptions options_;
  std::int64_t steps_ = 0;
  bool agreed_ = false;
  OptimizerState<T> state_;
  detail::AdamCoefficients<T> coefficients_{};  // of the step begin_step began
};

extern template class Adam<float>;
extern template class Adam<double>;

}  // namespace fsdp
