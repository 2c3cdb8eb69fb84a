#include "fsdp/optim/loss_scaler.hpp"

#include <cmath>
#include <nlohmann/json.hpp>
#include <string>

#include "../core/json_input.hpp"

namespace fsdp {
namespace {

// grad *= inverse; 1 when a result is infinite or NaN. grad: a DeviceView<T> or
// Bfloat16Values<T> (a power-of-two scale divides bfloat16 exactly, as it does T).
template <class Grad, class T>
int unscale(const ExecutionSpace& space, const Grad& grad, T inverse) {
  int bad = 0;
  // x - x is 0 for every finite x and NaN for infinities and NaN.
  Kokkos::parallel_reduce(
      "fsdp::unscale_and_check", device_range(space, 0, static_cast<std::int64_t>(grad.size())),
      KOKKOS_LAMBDA(std::size_t i, int& any) {
        const T g = static_cast<T>(grad(i)) * inverse;
        grad(i) = g;
        if (!(g - g == T(0))) {
          any = 1;
        }
      },
      Kokkos::Max<int>(bad));
  return bad;
}

}  // namespace

LossScaler::LossScaler(LossScalerOptions options) : options_(options) {
  require(std::isfinite(options_.init_scale) && options_.init_scale > 0,
          "LossScalerOptions::init_scale must be a positive finite number, got " +
              std::to_string(options_.init_scale) + " (PyTorch's default is 65536)");
  require(options_.growth_factor > 1, "LossScalerOptions::growth_factor must be > 1, got " +
                                          std::to_string(options_.growth_factor) + " (default 2)");
  require(options_.backoff_factor > 0 && options_.backoff_factor < 1,
          "LossScalerOptions::backoff_factor must be in (0, 1), got " +
              std::to_string(options_.backoff_factor) + " (default 0.5)");
  require(options_.growth_interval >= 1, "LossScalerOptions::growth_interval must be >= 1, got " +
                                             std::to_string(options_.growth_interval) +
                                             " (default 2000)");
  state_.scale = options_.init_scale;
}

template <class T>
bool LossScaler::unscale_and_check(ShardedModel<T>& model) {
  model.wait_for_gradients();
  const T inverse = static_cast<T>(1.0 / state_.scale);
  int found = 0;
  for (std::size_t u = 0; u < model.unit_count(); ++u) {
    const ExecutionSpace& space = model.unit(u).execution_space();
    for (ShardedParameter<T>& p : model.unit(u).parameters()) {
      const int bad =
          p.grad_piece().visit([&](const auto& grad) { return unscale(space, grad, inverse); });
      found = found > bad ? found : bad;
    }
  }
  model.group().all_reduce(Kokkos::DefaultHostExecutionSpace(), host_view(&found, 1),
                           ReduceOp::max);
  return found != 0;
}

void LossScaler::update(bool found_overflow) {
  if (found_overflow) {
    ++state_.skipped_steps;
    state_.clean_steps = 0;
    if (options_.dynamic) {
      state_.scale *= options_.backoff_factor;
    }
    return;
  }
  ++state_.clean_steps;
  if (options_.dynamic && state_.clean_steps >= options_.growth_interval) {
    state_.scale *= options_.growth_factor;
    state_.clean_steps = 0;
  }
}

namespace {

// Error (kind) unless state is one a scaler can resume from.
void require_valid(const LossScalerState& state, ErrorKind kind) {
  require(std::isfinite(state.scale) && state.scale > 0 && state.clean_steps >= 0 &&
              state.skipped_steps >= 0,
          "a loss scaler state needs a positive finite scale and counters >= 0, got scale " +
              std::to_string(state.scale) + ", clean steps " + std::to_string(state.clean_steps) +
              ", skipped steps " + std::to_string(state.skipped_steps),
          kind);
}

// What state_dict wrote, read back and checked (Error, kind mismatch, naming what is wrong).
LossScalerState parsed_state(const std::string& text) {
  const std::string what = "the loss scaler's state";
  try {
    const nlohmann::json json = parse_json_input(text, what);
    require(json.is_object(), what + " must be a JSON object, not " + json_excerpt(json));
    require_known_fields(json, {"scale", "clean_steps", "skipped_steps"}, what);
    for (const char* field : {"scale", "clean_steps", "skipped_steps"}) {
      require(json.contains(field), what + " has no field \"" + std::string(field) + "\"");
    }
    require(json.at("scale").is_number(),
            what + ": scale must be a number, not " + json_excerpt(json.at("scale")));
    LossScalerState state;
    state.scale = json.at("scale").get<double>();
    state.clean_steps = json_integer<std::int64_t>(json.at("clean_steps"), what + ": clean_steps");
    state.skipped_steps =
        json_integer<std::int64_t>(json.at("skipped_steps"), what + ": skipped_steps");
    require_valid(state, ErrorKind::mismatch);
    return state;
  } catch (const Error& e) {
    throw Error(ErrorKind::mismatch, e.message());
  }
}

}  // namespace

void LossScaler::set_state(const LossScalerState& state) {
  require_valid(state, ErrorKind::usage);
  state_ = state;
}

std::string LossScaler::state_dict() const {
  // nlohmann writes a double with the digits that read it back exactly.
  return nlohmann::json{{"scale", state_.scale},
                        {"clean_steps", state_.clean_steps},
                        {"skipped_steps", state_.skipped_steps}}
      .dump();
}

void LossScaler::check_state_dict(const std::string& state) const {
  parsed_state(state);
}

void LossScaler::load_state_dict(const std::string& state) {
  state_ = parsed_state(state);
}

template bool LossScaler::unscale_and_check(ShardedModel<float>&);
template bool LossScaler::unscale_and_check(ShardedModel<double>&);

}  // namespace fsdp
