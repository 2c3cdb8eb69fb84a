// LrSchedule: the learning rate of each optimizer step, as a pure function of the step's index:
// an optional linear warm-up, then constant, linear or cosine decay to a floor, or step decay.
//
// A schedule keeps no position of its own: the step it is at is the optimizer's step count,
// which checkpoints save and load (at any world size), so a resumed run continues the schedule
// exactly where it stopped, and a step the loss scaler skips does not advance it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "fsdp/optim/optimizer.hpp"

namespace fsdp {

// What follows the warm-up (PyTorch's ConstantLR-, LinearLR-, CosineAnnealingLR- and StepLR-like
// rules, in closed form).
enum class LrDecay { constant, linear, cosine, step };

// "constant", "linear", "cosine", "step"
const char* name_of(LrDecay decay);
// The names above, exactly. Throws Error (kind usage) listing them otherwise.
LrDecay parse_lr_decay(const std::string& name);

struct LrScheduleOptions {
  LrDecay decay = LrDecay::constant;
  // The first warmup_steps steps (0-based index t) take lr * (t + 1) / warmup_steps: the rate
  // climbs in equal parts and the last warm-up step takes lr itself.
  std::int64_t warmup_steps = 0;
  // linear and cosine: the decay runs from lr at step warmup_steps to min_lr at step total_steps
  // (> warmup_steps), and stays at min_lr after it.
  std::int64_t total_steps = 0;
  double min_lr = 0.0;
  // step: after the warm-up, the rate is lr * gamma^floor((t - warmup_steps) / step_size).
  std::int64_t step_size = 1;
  double gamma = 0.1;
};

class LrSchedule {
 public:
  // Errors (ErrorKind::usage): lr < 0, warmup_steps < 0; linear and cosine: total_steps <=
  // warmup_steps, min_lr outside [0, lr]; step: step_size < 1, gamma <= 0.
  LrSchedule(double lr, LrScheduleOptions options);
  // The learning rate of the step of 0-based index step (>= 0, else ErrorKind::usage).
  double lr_at(std::int64_t step) const;
  // Sets the optimizer's learning rate for its next step: lr_at(optimizer.step_count()). Call it
  // before every optimizer step (or every step_count change, such as a checkpoint load).
  template <class T>
  void apply(Optimizer<T>& optimizer) const {
    optimizer.set_lr(lr_at(optimizer.step_count()));
  }
  double lr() const { return lr_; }
  const LrScheduleOptions& options() const { return options_; }
  // "cosine decay from 0.003 to 0 at step 1000 after 100 warm-up steps": for logs and errors.
  std::string describe() const;

 private:
  double lr_;
  LrScheduleOptions options_;
};

}  // namespace fsdp
