// Optimizer: one of the optimizer rules, chosen by name ("sgd", "adam", "adamw"), for command
// lines and the C API.
#pragma once

#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include "fsdp/core/optimizer_kind.hpp"
#include "fsdp/optim/adam.hpp"
#include "fsdp/optim/sgd.hpp"

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
class Optimizer : public UnitUpdate<T> {
 public:
  // Errors: a name not in optimizer_names() (ErrorKind::usage, listing them); settings
  // the rule refuses (its constructor's errors).
  Optimizer(const std::string& name, const OptimizerSettings& settings);
  // The rule's step (Sgd<T>::step, Adam<T>::step); the first is collective (agree_with_ranks).
  void step(ShardedModel<T>& model);
  // The same step unit by unit (UnitUpdate; Runtime::set_optimizer_in_backward).
  void begin_step(ShardedModel<T>& model) override;
  void step_unit(ShardedUnit<T>& unit) override;
  void end_step() override;
  // The rule's agree_with_ranks: collective over the model's ranks, which must all have been given
  // the same name and settings, else every rank throws fsdp::Error naming the first that differs.
  void agree_with_ranks(ShardedModel<T>& model);
  const std::string& name() const { return name_; }
  // The settings of the next step: those given, with the learning rate and weight decay last set.
  const OptimizerSettings& settings() const { return settings_; }
  // The learning rate and weight decay of the steps that follow (a schedule's apply sets the
  // rate before each step: lr_schedule.hpp). Errors as the constructor's. Every rank must call
  // these alike, with the same values: the next step checks so (one all-reduce of two words).
  void set_lr(double lr);
  void set_weight_decay(double weight_decay);
  // Steps taken; set_step_count resumes from a checkpoint (>= 0).
  std::int64_t step_count() const;
  void set_step_count(std::int64_t steps);
  // The names of the state the rule keeps per parameter piece once it has stepped (state()):
  // {"exp_avg", "exp_avg_sq"} for adam and adamw, {"momentum"} for sgd with momentum, none for
  // plain sgd. Before the first step no piece has state.
  std::vector<std::string> state_names() const;
  // The rule's state (Sgd::state, Adam::state).
  OptimizerState<T>& state();
  const OptimizerState<T>& state() const;
  // For memory estimates: sgd with momentum keeps a buffer per element, sgd without none.
  OptimizerKind kind() const;

 private:
  std::string name_;
  OptimizerSettings settings_;
  std::variant<Sgd<T>, Adam<T>> rule_;
};

extern template class Optimizer<float>;
extern template class Optimizer<double>;

}  // namespace fsdp
