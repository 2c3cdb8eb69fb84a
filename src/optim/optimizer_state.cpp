#include "fsdp/optim/optimizer_state.hpp"

namespace fsdp {

template <class T>
DeviceView<T> OptimizerState<T>::get(ShardedParameter<T>& p, const std::string& name) {
  std::vector<Named>& states = by_parameter_[p.name()];
  if (const Named* state = named(states, name)) {
    return state->values.view();
  }
  states.push_back(Named{name, p.make_optimizer_state(name, true)});
  return states.back().values.view();
}

template <class T>
const DeviceView<T>* OptimizerState<T>::find(const std::string& parameter,
                                             const std::string& name) const {
  const auto found = by_parameter_.find(parameter);
  if (found == by_parameter_.end()) {
    return nullptr;
  }
  const Named* state = named(found->second, name);
  return state != nullptr ? &state->values.view() : nullptr;
}

template <class T>
void OptimizerState<T>::adopt(const std::string& parameter, const std::string& name,
                              TrackedView<T> state) {
  std::vector<Named>& states = by_parameter_[parameter];
  if (Named* same = named(states, name)) {
    same->values = std::move(state);
  } else {
    states.push_back(Named{name, std::move(state)});
  }
}

template <class T>
std::vector<std::string> OptimizerState<T>::names(const std::string& parameter) const {
  std::vector<std::string> names;
  const auto found = by_parameter_.find(parameter);
  if (found != by_parameter_.end()) {
    for (const Named& state : found->second) {
      names.push_back(state.name);
    }
  }
  return names;
}

template class OptimizerState<float>;
template class OptimizerState<double>;

}  // namespace fsdp
