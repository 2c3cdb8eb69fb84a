#include "fsdp/optim/adam.hpp"

#include <cmath>

#include "fsdp/core/device_math.hpp"
#include "fsdp/optim/sgd.hpp"

namespace fsdp {
namespace {

// One Adam step of a piece; grad is a DeviceView<T> or Bfloat16Values<T> (GradientPiece::visit).
template <class T, class Grad>
void adam_update(const ExecutionSpace& space, const DeviceView<T>& param, const Grad& grad,
                 const DeviceView<T>& m, const DeviceView<T>& v,
                 const detail::AdamCoefficients<T>& c) {
  const detail::AdamCoefficients<T> k = c;  // by value into the kernel
  Kokkos::parallel_for(
      "fsdp::Adam::step", device_range(space, 0, static_cast<std::int64_t>(param.size())),
      KOKKOS_LAMBDA(std::size_t i) {
        const T g = static_cast<T>(grad(i)) + k.l2 * param(i);
        param(i) *= k.decay;
        m(i) = k.beta1 * m(i) + (T(1) - k.beta1) * g;
        v(i) = k.beta2 * v(i) + (T(1) - k.beta2) * g * g;
        param(i) -=
            k.lr * (m(i) / k.correction1) / (device_math::sqrt(v(i) / k.correction2) + k.eps);
      });
}

}  // namespace

template <class T>
Adam<T>::Adam(AdamOptions options) : options_(options) {
  const char* name = options_.decoupled_weight_decay ? "AdamW" : "Adam";
  require(options_.lr >= 0, std::string(name) + " lr must be >= 0");
  require(options_.eps > 0, std::string(name) + " eps must be > 0");
  require(options_.beta1 >= 0 && options_.beta1 < 1 && options_.beta2 >= 0 && options_.beta2 < 1,
          std::string(name) + " betas must lie in [0, 1), got (" + std::to_string(options_.beta1) +
              ", " + std::to_string(options_.beta2) + ")");
  require(options_.weight_decay >= 0, std::string(name) + " weight_decay must be >= 0");
}

template <class T>
void Adam<T>::agree_with_ranks(ShardedModel<T>& model) {
  require_same_settings(model,
                        Configuration("optimizer settings")
                            .text("optimizer", options_.decoupled_weight_decay ? "adamw" : "adam")
                            .number("lr", options_.lr)
                            .number("beta1", options_.beta1)
                            .number("beta2", options_.beta2)
                            .number("eps", options_.eps)
                            .number("weight_decay", options_.weight_decay),
                        agreed_);
}

template <class T>
void Adam<T>::step(ShardedModel<T>& model) {
  agree_with_ranks(model);
  require_grads(model, options_.decoupled_weight_decay ? "AdamW" : "Adam");
  step_every_unit(*this, model);
}

template <class T>
void Adam<T>::begin_step(ShardedModel<T>& model) {
  agree_with_ranks(model);
  ++steps_;
  const double t = static_cast<double>(steps_);
  detail::AdamCoefficients<T>& c = coefficients_;
  c.lr = static_cast<T>(options_.lr);
  c.beta1 = static_cast<T>(options_.beta1);
  c.beta2 = static_cast<T>(options_.beta2);
  c.eps = static_cast<T>(options_.eps);
  c.correction1 = static_cast<T>(1 - std::pow(options_.beta1, t));
  c.correction2 = static_cast<T>(1 - std::pow(options_.beta2, t));
  c.l2 = options_.decoupled_weight_decay ? T(0) : static_cast<T>(options_.weight_decay);
  c.decay = options_.decoupled_weight_decay
                ? static_cast<T>(1 - options_.lr * options_.weight_decay)
                : T(1);
}

template <class T>
void Adam<T>::step_unit(ShardedUnit<T>& unit) {
  require_unit_grads(unit, options_.decoupled_weight_decay ? "AdamW" : "Adam");
  const ExecutionSpace& space = unit.execution_space();
  for (ShardedParameter<T>& p : unit.parameters()) {
    if (p.shard_size() == 0 || !p.trainable()) {
      continue;  // nothing here, or frozen: no step, no state
    }
    const DeviceView<T> first_moment = state_.get(p, kAdamFirstMoment);
    const DeviceView<T> second_moment = state_.get(p, kAdamSecondMoment);
    p.grad_piece().visit([&](const auto& grad) {
      adam_update(space, p.shard(), grad, first_moment, second_moment, coefficients_);
    });
  }
}

template <class T>
void Adam<T>::end_step() {
  ExecutionSpace().fence();  // every unit's kernels: the step is done when it returns
}

template <class T>
void Adam<T>::set_step_count(std::int64_t steps) {
  require(steps >= 0, "Adam step count must be >= 0, got " + std::to_string(steps));
  steps_ = steps;
}

template <class T>
void Adam<T>::set_lr(double lr) {
  replace_setting<Adam<T>>(options_, &AdamOptions::lr, lr, agreed_);
}

template <class T>
void Adam<T>::set_weight_decay(double weight_decay) {
  replace_setting<Adam<T>>(options_, &AdamOptions::weight_decay, weight_decay, agreed_);
}

template class Adam<float>;
template class Adam<double>;

}  // namespace fsdp
