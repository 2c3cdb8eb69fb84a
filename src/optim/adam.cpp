#include "fsdp/optim/adam.hpp"

#include <cmath>

#include "fsdp/core/device_math.hpp"
#include "fsdp/optim/sgd.hpp"

namespace fsdp {

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
  ++steps_;
  const double t = static_cast<double>(steps_);
  const T lr = static_cast<T>(options_.lr);
  const T beta1 = static_cast<T>(options_.beta1);
  const T beta2 = static_cast<T>(options_.beta2);
  const T eps = static_cast<T>(options_.eps);
  const T correction1 = static_cast<T>(1 - std::pow(options_.beta1, t));
  const T correction2 = static_cast<T>(1 - std::pow(options_.beta2, t));
  const T l2 = options_.decoupled_weight_decay ? T(0) : static_cast<T>(options_.weight_decay);
  const T decay = options_.decoupled_weight_decay
                      ? static_cast<T>(1 - options_.lr * options_.weight_decay)
                      : T(1);
  for (std::size_t u = 0; u < model.unit_count(); ++u) {
    const ExecutionSpace& space = model.unit(u).execution_space();
    for (ShardedParameter<T>& p : model.unit(u).parameters()) {
      if (p.shard_size() == 0 || !p.trainable()) {
        continue;  // nothing here, or frozen: no step, no state
      }
      if (p.optimizer_state().empty()) {
        p.add_optimizer_state(kAdamFirstMoment);
        p.add_optimizer_state(kAdamSecondMoment);
      }
      auto param = p.shard();
      auto grad = p.grad_shard();
      auto m = p.optimizer_state()[0].view();
      auto v = p.optimizer_state()[1].view();
      Kokkos::parallel_for(
          "fsdp::Adam::step", device_range(space, 0, static_cast<std::int64_t>(param.size())),
          KOKKOS_LAMBDA(std::size_t i) {
            const T g = grad(i) + l2 * param(i);
            param(i) *= decay;
            m(i) = beta1 * m(i) + (T(1) - beta1) * g;
            v(i) = beta2 * v(i) + (T(1) - beta2) * g * g;
            param(i) -= lr * (m(i) / correction1) / (device_math::sqrt(v(i) / correction2) + eps);
          });
    }
  }
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
