// Optimizer: one of the optimizer rules, chosen by name ("sgd", "adam", "adamw"), for command
// lines and the C API.
#pragma once

#include <string>
#include <variant>
#include <vector>

#include "fsdp/optim/adam.hpp"
#include "fsdp/optim/sgd.hpp"
#include "fsdp/shard/plan_estimate.hpp"

namespace fsdp {

// The hyperparameters of every rule, PyTorch's defaults; each rule reads its own.
struct OptimizerSettings {
  double lr = 1e-3;           // Adam's default: give SGD's learning rate explicitly
  double weight_decay = 0.0;  // sgd and adam: L2, added to the gradient; adamw: decoupled
  double momentum = 0.0;      // sgd
  double dampening = 0.0;     // sgd
  bool nesterov = false;      // sgd
  double beta1 = 0.9;         // adam, adamw
  double beta2 = 0.999;       // adam, adamw
  double eps = 1e-8;          // adam, adamw
};

// The names Optimizer accepts, in the order error messages list them.
const std::vector<std::string>& optimizer_names();

template <class T>
class Optimizer {
 public:
  // Errors: a name not in optimizer_names() (ErrorKind::usage, listing them); settings
  // the rule refuses (its constructor's errors).
  Optimizer(const std::string& name, const OptimizerSettings& settings);
  // The rule's step (Sgd<T>::step, Adam<T>::step).
  void step(ShardedModel<T>& model);
  const std::string& name() const { return name_; }
  // For memory estimates: sgd with momentum keeps a buffer per element, sgd without none.
  OptimizerKind kind() const;

 private:
  std::string name_;
  std::variant<Sgd<T>, Adam<T>> rule_;
};

extern template class Optimizer<float>;
extern template class Optimizer<double>;

}  // namespace fsdp
