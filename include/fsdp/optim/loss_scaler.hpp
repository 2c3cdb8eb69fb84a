// Dynamic loss scaling (PyTorch's GradScaler) for 16-bit gradients: the loss is multiplied by
// scale() before the backward pass so that small gradients survive in fp16; after the reduction
// the gradient pieces are divided by it again, and a step whose gradients overflowed anywhere is
// skipped on every rank while the scale backs off. After growth_interval clean steps the scale
// grows. The decision is collective, so every rank (and every replica) skips the same steps.
#pragma once

#include <cstdint>

#include "fsdp/core/stateful.hpp"
#include "fsdp/unit/sharded_model.hpp"

namespace fsdp {

struct LossScalerOptions {
  double init_scale = 65536.0;  // 2^16
  double growth_factor = 2.0;   // > 1
  double backoff_factor = 0.5;  // in (0, 1)
  std::int64_t growth_interval = 2000;
  bool dynamic = true;  // false: the scale stays init_scale (overflows are still found)
};

// What a checkpoint needs to resume the scaler exactly.
struct LossScalerState {
  double scale = 65536.0;
  std::int64_t clean_steps = 0;    // since the last overflow or growth
  std::int64_t skipped_steps = 0;  // overflows so far
  bool operator==(const LossScalerState& o) const {
    return scale == o.scale && clean_steps == o.clean_steps && skipped_steps == o.skipped_steps;
  }
};

// A Stateful: a checkpoint given it as an object saves and restores its state, as JSON
// {"scale": .., "clean_steps": .., "skipped_steps": ..}.
class LossScaler : public Stateful {
 public:
  // Error (kind usage) naming the option when init_scale <= 0 or not finite, growth_factor <= 1,
  // backoff_factor outside (0, 1), or growth_interval < 1.
  explicit LossScaler(LossScalerOptions options = {});

  // Multiply the loss (or the gradient of the loss) by this before the backward pass.
  double scale() const { return state_.scale; }

  // Collective over the model's group: divides every gradient piece by scale() and returns true
  // when any element on any rank is infinite or NaN. Call it after the gradients are reduced and
  // before clipping; on true, skip the optimizer step (every rank gets the same answer) and zero
  // the gradients. Then call update() with the answer.
  template <class T>
  bool unscale_and_check(ShardedModel<T>& model);

  // An overflow: the scale is multiplied by backoff_factor and the clean steps start again; a
  // clean step: after growth_interval of them in a row the scale is multiplied by growth_factor.
  void update(bool found_overflow);

  const LossScalerState& state() const { return state_; }
  // Resumes from a checkpoint's state (scale > 0, counters >= 0, else Error).
  void set_state(const LossScalerState& state);

  // Stateful: state() as JSON; check_state_dict throws Error (kind mismatch) unless state is such
  // an object with a state set_state takes; load_state_dict sets it.
  std::string state_dict() const override;
  void check_state_dict(const std::string& state) const override;
  void load_state_dict(const std::string& state) override;
  const LossScalerOptions& options() const { return options_; }

 private:
  LossScalerOptions options_;
  LossScalerState state_;
};

}  // namespace fsdp
