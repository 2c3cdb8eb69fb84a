// OptimizerState: what an optimizer keeps for each parameter piece it steps (momentum, moments),
// by parameter and by name.
#pragma once

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "fsdp/unit/memory_tracker.hpp"
#include "fsdp/unit/sharded_parameter.hpp"

namespace fsdp {

// Named buffers of a piece's size (ShardedParameter::shard_size()), counted by the model's memory
// tracker as optimizer state. A rule makes a piece's state at its first step of that piece (get);
// a checkpoint's load puts in what it read (adopt). The state belongs to the optimizer and goes
// with it: a new optimizer on the same model starts without any, as PyTorch's does, and one rule
// never reads another's state.
template <class T>
class OptimizerState {
 public:
  // p's state called name, made zeroed when p has none of that name yet.
  DeviceView<T> get(ShardedParameter<T>& p, const std::string& name);
  // The state called name of the parameter called parameter; nullptr when there is none.
  const DeviceView<T>* find(const std::string& parameter, const std::string& name) const;
  // state (made by ShardedParameter::make_optimizer_state) becomes the state called name of the
  // parameter called parameter; one it replaces is freed.
  void adopt(const std::string& parameter, const std::string& name, TrackedView<T> state);
  // The names of the parameter's states in the order they were made; empty when it has none.
  std::vector<std::string> names(const std::string& parameter) const;
  // No piece has state (before the first step, or after clear()).
  bool empty() const { return by_parameter_.empty(); }
  // Frees every state.
  void clear() { by_parameter_.clear(); }

 private:
  struct Named {
    std::string name;
    TrackedView<T> values;
  };
  // The state called name among a parameter's states; nullptr when there is none.
  template <class States>
  static auto* named(States& states, const std::string& name) {
    const auto found = std::find_if(states.begin(), states.end(),
                                    [&](const Named& state) { return state.name == name; });
    return found == states.end() ? nullptr : &*found;
  }
  std::map<std::string, std::vector<Named>, std::less<>> by_parameter_;
};

extern template class OptimizerState<float>;
extern template class OptimizerState<double>;

}  // namespace fsdp
