#include "fsdp/optim/optimizer.hpp"

#include "fsdp/core/profiling_region.hpp"
#include "fsdp/core/text.hpp"

namespace fsdp {
namespace {

template <class T>
std::variant<Sgd<T>, Adam<T>> make_rule(const std::string& name, const OptimizerSettings& s) {
  if (name == "sgd") {
    SgdOptions options;
    options.lr = s.lr;
    options.momentum = s.momentum;
    options.dampening = s.dampening;
    options.nesterov = s.nesterov;
    options.weight_decay = s.weight_decay;
    return Sgd<T>(options);
  }
  if (name == "adam" || name == "adamw") {
    AdamOptions options;
    options.lr = s.lr;
    options.beta1 = s.beta1;
    options.beta2 = s.beta2;
    options.eps = s.eps;
    options.weight_decay = s.weight_decay;
    options.decoupled_weight_decay = name == "adamw";
    return Adam<T>(options);
  }
  throw Error(ErrorKind::usage,
              "unknown optimizer '" + name + "'; use " + join_alternatives(optimizer_names()));
}

}  // namespace

const std::vector<std::string>& optimizer_names() {
  static const std::vector<std::string> names = {"sgd", "adam", "adamw"};
  return names;
}

template <class T>
Optimizer<T>::Optimizer(const std::string& name, const OptimizerSettings& settings)
    : name_(name), settings_(settings), rule_(make_rule<T>(name, settings)) {}

template <class T>
std::int64_t Optimizer<T>::step_count() const {
  return std::visit([](const auto& rule) { return rule.step_count(); }, rule_);
}

template <class T>
void Optimizer<T>::set_step_count(std::int64_t steps) {
  std::visit([&](auto& rule) { rule.set_step_count(steps); }, rule_);
}

template <class T>
void Optimizer<T>::set_lr(double lr) {
  std::visit([&](auto& rule) { rule.set_lr(lr); }, rule_);
  settings_.lr = lr;
}

template <class T>
void Optimizer<T>::set_weight_decay(double weight_decay) {
  std::visit([&](auto& rule) { rule.set_weight_decay(weight_decay); }, rule_);
  settings_.weight_decay = weight_decay;
}

template <class T>
std::vector<std::string> Optimizer<T>::state_names() const {
  if (const auto* sgd = std::get_if<Sgd<T>>(&rule_)) {
    return sgd->options().momentum > 0 ? std::vector<std::string>{kSgdMomentumBuffer}
                                       : std::vector<std::string>{};
  }
  return {kAdamFirstMoment, kAdamSecondMoment};
}

template <class T>
OptimizerState<T>& Optimizer<T>::state() {
  return std::visit([](auto& rule) -> OptimizerState<T>& { return rule.state(); }, rule_);
}

template <class T>
const OptimizerState<T>& Optimizer<T>::state() const {
  return std::visit([](const auto& rule) -> const OptimizerState<T>& { return rule.state(); },
                    rule_);
}

template <class T>
void Optimizer<T>::step(ShardedModel<T>& model) {
  const ProfilingRegion region("fsdp::optimizer_step");
  std::visit([&](auto& rule) { rule.step(model); }, rule_);
}

template <class T>
void Optimizer<T>::begin_step(ShardedModel<T>& model) {
  std::visit([&](auto& rule) { rule.begin_step(model); }, rule_);
}

template <class T>
void Optimizer<T>::step_unit(ShardedUnit<T>& unit) {
  const ProfilingRegion region("fsdp::optimizer_step", unit.name());
  std::visit([&](auto& rule) { rule.step_unit(unit); }, rule_);
}

template <class T>
void Optimizer<T>::end_step() {
  std::visit([](auto& rule) { rule.end_step(); }, rule_);
}

template <class T>
void Optimizer<T>::agree_with_ranks(ShardedModel<T>& model) {
  std::visit([&](auto& rule) { rule.agree_with_ranks(model); }, rule_);
}

template <class T>
OptimizerKind Optimizer<T>::kind() const {
  if (const auto* sgd = std::get_if<Sgd<T>>(&rule_)) {
    return sgd->options().momentum > 0 ? OptimizerKind::sgd_momentum : OptimizerKind::sgd;
  }
  return std::get<Adam<T>>(rule_).options().decoupled_weight_decay ? OptimizerKind::adamw
                                                                   : OptimizerKind::adam;
}

template class Optimizer<float>;
template class Optimizer<double>;

}  // namespace fsdp
