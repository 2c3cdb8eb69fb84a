#include "fsdp/optim/lr_schedule.hpp"

#include <algorithm>
#include <cmath>

#include "fsdp/core/enum_names.hpp"
#include "fsdp/core/error.hpp"
#include "fsdp/core/text.hpp"

namespace fsdp {

namespace {

const EnumNames<LrDecay>& lr_decay_names() {
  static const EnumNames<LrDecay> names("learning-rate decay", {{LrDecay::constant, "constant"},
                                                                {LrDecay::linear, "linear"},
                                                                {LrDecay::cosine, "cosine"},
                                                                {LrDecay::step, "step"}});
  return names;
}

bool decays_to_floor(LrDecay decay) {
  return decay == LrDecay::linear || decay == LrDecay::cosine;
}

}  // namespace

const char* name_of(LrDecay decay) {
  return lr_decay_names().name_of(decay);
}

LrDecay parse_lr_decay(const std::string& name) {
  return lr_decay_names().parse(name);
}

LrSchedule::LrSchedule(double lr, LrScheduleOptions options) : lr_(lr), options_(options) {
  const auto check = [](bool ok, const std::string& message) {
    require(ok, "learning-rate schedule: " + message, ErrorKind::usage);
  };
  check(std::isfinite(lr) && lr >= 0, "lr must be finite and >= 0, got " + number_text(lr));
  check(options_.warmup_steps >= 0,
        "warmup_steps must be >= 0, got " + std::to_string(options_.warmup_steps));
  if (decays_to_floor(options_.decay)) {
    check(options_.total_steps > options_.warmup_steps,
          std::string(name_of(options_.decay)) + " decay needs total_steps > warmup_steps (" +
              std::to_string(options_.warmup_steps) + "), got " +
              std::to_string(options_.total_steps));
    check(std::isfinite(options_.min_lr) && options_.min_lr >= 0 && options_.min_lr <= lr,
          "min_lr must lie in [0, lr] = [0, " + number_text(lr) + "], got " +
              number_text(options_.min_lr));
  }
  if (options_.decay == LrDecay::step) {
    check(options_.step_size >= 1,
          "step decay needs step_size >= 1, got " + std::to_string(options_.step_size));
    check(std::isfinite(options_.gamma) && options_.gamma > 0,
          "step decay needs gamma > 0, got " + number_text(options_.gamma));
  }
}

double LrSchedule::lr_at(std::int64_t step) const {
  require(
      step >= 0,
      [&] { return "learning-rate schedule: step must be >= 0, got " + std::to_string(step); },
      ErrorKind::usage);
  const LrScheduleOptions& o = options_;
  if (step < o.warmup_steps) {
    return lr_ * static_cast<double>(step + 1) / static_cast<double>(o.warmup_steps);
  }
  const std::int64_t since = step - o.warmup_steps;
  switch (o.decay) {
    case LrDecay::constant:
      return lr_;
    case LrDecay::linear:
    case LrDecay::cosine: {
      const std::int64_t length = o.total_steps - o.warmup_steps;
      const double progress =
          static_cast<double>(std::min(since, length)) / static_cast<double>(length);
      const double factor =
          o.decay == LrDecay::linear ? 1 - progress : 0.5 * (1 + std::cos(M_PI * progress));
      return o.min_lr + (lr_ - o.min_lr) * factor;
    }
    case LrDecay::step:
      return lr_ * std::pow(o.gamma, static_cast<double>(since / o.step_size));
  }
  return lr_;  // not reached: every LrDecay is handled above
}

std::string LrSchedule::describe() const {
  const LrScheduleOptions& o = options_;
  std::string text;
  switch (o.decay) {
    case LrDecay::constant:
      text = "constant " + number_text(lr_);
      break;
    case LrDecay::linear:
    case LrDecay::cosine:
      text = std::string(name_of(o.decay)) + " decay from " + number_text(lr_) + " to " +
             number_text(o.min_lr) + " at step " + std::to_string(o.total_steps);
      break;
    case LrDecay::step:
      text = number_text(lr_) + " times " + number_text(o.gamma) + " every " +
             std::to_string(o.step_size) + " steps";
      break;
  }
  if (o.warmup_steps > 0) {
    text += " after " + std::to_string(o.warmup_steps) + " warm-up steps";
  }
  return text;
}

}  // namespace fsdp
