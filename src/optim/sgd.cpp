#include "fsdp/optim/sgd.hpp"

namespace fsdp {
namespace {

// One SGD step of a piece; grad is a DeviceView<T> or Bfloat16Values<T> (GradientPiece::visit),
// buffer the momentum buffer (empty without momentum).
template <class T, class Grad>
void sgd_update(const ExecutionSpace& space, const DeviceView<T>& param, const Grad& grad,
                const DeviceView<T>& buffer, const detail::SgdCoefficients<T>& c) {
  const detail::SgdCoefficients<T> k = c;  // by value into the kernel
  Kokkos::parallel_for(
      "fsdp::Sgd::step", device_range(space, 0, static_cast<std::int64_t>(param.size())),
      KOKKOS_LAMBDA(std::size_t i) {
        T g = static_cast<T>(grad(i)) + k.weight_decay * param(i);
        if (k.momentum != T(0)) {
          buffer(i) = k.first ? g : k.momentum * buffer(i) + (T(1) - k.dampening) * g;
          g = k.nesterov ? g + k.momentum * buffer(i) : buffer(i);
        }
        param(i) -= k.lr * g;
      });
}

}  // namespace

template <class T>
void require_unit_grads(const ShardedUnit<T>& unit, const char* optimizer) {
  if (!unit.has_grads()) {
    throw Error(std::string(optimizer) + " step with no gradient for unit '" + unit.name() +
                "'; call reduce_scatter_grads() on every unit (or leave its backward scope) "
                "before stepping");
  }
}
template void require_unit_grads(const ShardedUnit<float>&, const char*);
template void require_unit_grads(const ShardedUnit<double>&, const char*);

template <class T>
void require_grads(ShardedModel<T>& model, const char* optimizer) {
  model.wait_for_gradients();  // reductions still in flight complete the pieces first
  for (std::size_t u = 0; u < model.unit_count(); ++u) {
    require_unit_grads(model.unit(u), optimizer);
  }
}
template void require_grads(ShardedModel<float>&, const char*);
template void require_grads(ShardedModel<double>&, const char*);

template <class T>
void require_same_settings(ShardedModel<T>& model, const Configuration& settings, bool& agreed) {
  if (!agreed) {
    require_same_configuration(settings, model.group(), model.replicas());
    agreed = true;
  }
}
template void require_same_settings(ShardedModel<float>&, const Configuration&, bool&);
template void require_same_settings(ShardedModel<double>&, const Configuration&, bool&);

template <class T>
Sgd<T>::Sgd(SgdOptions options) : options_(options) {
  require(options_.lr >= 0, "SGD lr must be >= 0, got " + std::to_string(options_.lr));
  require(options_.momentum >= 0,
          "SGD momentum must be >= 0, got " + std::to_string(options_.momentum));
  require(options_.weight_decay >= 0,
          "SGD weight_decay must be >= 0, got " + std::to_string(options_.weight_decay));
  require(!options_.nesterov || (options_.momentum > 0 && options_.dampening == 0),
          "SGD with nesterov needs momentum > 0 and dampening 0");
}

template <class T>
void Sgd<T>::agree_with_ranks(ShardedModel<T>& model) {
  require_same_settings(model,
                        Configuration("optimizer settings")
                            .text("optimizer", "sgd")
                            .number("lr", options_.lr)
                            .number("momentum", options_.momentum)
                            .number("dampening", options_.dampening)
                            .flag("nesterov", options_.nesterov)
                            .number("weight_decay", options_.weight_decay),
                        agreed_);
}

template <class T>
void Sgd<T>::step(ShardedModel<T>& model) {
  agree_with_ranks(model);
  require_grads(model, "SGD");
  step_every_unit(*this, model);
}

template <class T>
void Sgd<T>::begin_step(ShardedModel<T>& model) {
  agree_with_ranks(model);
  detail::SgdCoefficients<T>& c = coefficients_;
  c.first = steps_ == 0;
  c.lr = static_cast<T>(options_.lr);
  c.momentum = static_cast<T>(options_.momentum);
  c.dampening = static_cast<T>(options_.dampening);
  c.weight_decay = static_cast<T>(options_.weight_decay);
  c.nesterov = options_.nesterov;
}

template <class T>
void Sgd<T>::step_unit(ShardedUnit<T>& unit) {
  require_unit_grads(unit, "SGD");
  const ExecutionSpace& space = unit.execution_space();
  for (ShardedParameter<T>& p : unit.parameters()) {
    if (p.shard_size() == 0 || !p.trainable()) {
      continue;  // nothing here, or frozen: no step, no state
    }
    DeviceView<T> buffer;
    if (coefficients_.momentum != T(0)) {
      buffer = state_.get(p, kSgdMomentumBuffer);
    }
    p.grad_piece().visit(
        [&](const auto& grad) { sgd_update(space, p.shard(), grad, buffer, coefficients_); });
  }
}

template <class T>
void Sgd<T>::end_step() {
  ExecutionSpace().fence();  // every unit's kernels: the step is done when it returns
  ++steps_;
}

template <class T>
void Sgd<T>::set_step_count(std::int64_t steps) {
  require(steps >= 0, "Sgd step count must be >= 0, got " + std::to_string(steps));
  steps_ = steps;
}

template <class T>
void Sgd<T>::set_lr(double lr) {
  replace_setting<Sgd<T>>(options_, &SgdOptions::lr, lr, agreed_);
}

template <class T>
void Sgd<T>::set_weight_decay(double weight_decay) {
  replace_setting<Sgd<T>>(options_, &SgdOptions::weight_decay, weight_decay, agreed_);
}

template class Sgd<float>;
template class Sgd<double>;

}  // namespace fsdp
