#include "fsdp/runtime/runtime.hpp"

#include <algorithm>
#include <chrono>

#include "fsdp/comm/configuration_agreement.hpp"
#include "fsdp/core/profiling_region.hpp"
#include "fsdp/core/text.hpp"

namespace fsdp {

RuntimeStats RuntimeStats::since(const RuntimeStats& before) const {
  RuntimeStats d = *this;
  d.scopes -= before.scopes;
  d.gathers -= before.gathers;
  d.prefetched -= before.prefetched;
  d.ready_on_entry -= before.ready_on_entry;
  d.wait_s -= before.wait_s;
  d.reduce_s -= before.reduce_s;
  d.reductions -= before.reductions;
  d.incomplete_at_finish -= before.incomplete_at_finish;
  d.updated_in_backward -= before.updated_in_backward;
  return d;
}

namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// The overlap limits a constructor or set_overlap takes (ErrorKind::usage for a value out of
// range).
void require_overlap_limits(int max_gathered_units_backward, int max_reductions_in_flight) {
  require(max_gathered_units_backward >= 0,
          "RuntimeOptions::max_gathered_units_backward must be >= 1, or 0 for "
          "max_gathered_units; got " +
              std::to_string(max_gathered_units_backward));
  require(max_reductions_in_flight >= 0,
          "RuntimeOptions::max_reductions_in_flight must be >= 0 (0: each reduction is waited "
          "for when its backward scope closes), got " +
              std::to_string(max_reductions_in_flight));
}

}  // namespace

template <class T>
Runtime<T>::Runtime(ShardedModel<T>& model, std::vector<std::string> order, RuntimeOptions options)
    : model_(model), order_(std::move(order)), options_(std::move(options)) {
  // First, so that ranks given different orders or options fail together: a rank that prefetches
  // and one that does not would start gathers the other never matches.
  Configuration configuration("runtime options");
  configuration.integer("units in the execution order", static_cast<std::int64_t>(order_.size()));
  for (std::size_t i = 0; i < order_.size(); ++i) {
    configuration.text("execution order[" + std::to_string(i) + "]", order_[i]);
  }
  configuration.flag("prefetch", options_.prefetch)
      .integer("max_gathered_units", options_.max_gathered_units)
      .integer("max_gathered_units_backward", options_.max_gathered_units_backward)
      .integer("max_reductions_in_flight", options_.max_reductions_in_flight)
      .text("keep_gathered_until_backward",
            join(std::vector<std::string>(options_.keep_gathered_until_backward.begin(),
                                          options_.keep_gathered_until_backward.end())));
  for (const auto& [parameter, users] : options_.tied_parameters) {
    configuration.text("tied_parameters[" + parameter + "]",
                       join(std::vector<std::string>(users.begin(), users.end())));
  }
  require_same_configuration(configuration, model_.group(), model_.replicas());
  require(options_.max_gathered_units >= 1,
          "RuntimeOptions::max_gathered_units must be >= 1, got " +
              std::to_string(options_.max_gathered_units));
  require_overlap_limits(options_.max_gathered_units_backward, options_.max_reductions_in_flight);
  const std::vector<std::string>& names = model_.unit_names();
  for (std::size_t i = 0; i < order_.size(); ++i) {
    const std::string& name = order_[i];
    if (std::find(names.begin(), names.end(), name) == names.end()) {
      throw Error(ErrorKind::unknown_name, "the execution order names unit '" + name +
                                               "', which the model does not have; its units are " +
                                               join(names));
    }
    require(index_.emplace(name, i).second,
            "unit '" + name + "' appears twice in the execution order; list each unit once");
    units_.push_back(&model_.unit(name));
  }
  std::string missing;
  for (const std::string& name : names) {
    if (index_.count(name) == 0) {
      missing += (missing.empty() ? "" : ", ") + name;
    }
  }
  require(missing.empty(), "the execution order leaves out unit(s) " + missing +
                               "; every unit must run once per step (its gradients are needed)");
  for (const std::string& name : options_.keep_gathered_until_backward) {
    index_of(name, "keep_gathered_until_backward");
  }
  for (const auto& [parameter, users] : options_.tied_parameters) {
    if (!model_.plan().contains(parameter)) {
      throw Error(ErrorKind::unknown_name, "tied_parameters names parameter '" + parameter +
                                               "', which the model does not have");
    }
    const std::string& owner = model_.unit_of(parameter).name();
    const std::size_t owner_index = index_of(owner, "tied_parameters");
    for (const std::string& user : users) {
      const std::size_t user_index = index_of(user, "tied_parameters");
      require(user_index > owner_index,
              "tied parameter '" + parameter + "' of unit '" + owner + "' is listed for unit '" +
                  user + "', which " + (user_index == owner_index ? "owns it" : "runs before it") +
                  " in the execution order; list units that run after '" + owner +
                  "' (whose backward scopes add to its gradient before '" + owner +
                  "' reduces it), or make the earliest user the parameter's unit");
    }
    tied_owners_.insert(owner_index);
  }
  // Every rank agreed on prefetch above, and on checks_ahead() when the group was made.
  if (options_.prefetch && model_.group().checks_ahead()) {
    gathers_ = model_.group().split(0, model_.group().rank());
    for (ShardedUnit<T>* unit : units_) {
      unit->gather_over(*gathers_);
    }
  }
}

template <class T>
void Runtime<T>::close_scope_region() {
  pop_profiling_region(scope_region_);
  scope_region_ = false;
}

// A 16-bit gather's float copies (ShardedParameter::full()) live for one scope: what stays
// gathered until the backward (or for the tied parameters' later uses) stays 16-bit.
template <class T>
void Runtime<T>::drop_widened(std::size_t index) {
  const std::string& unit = order_[index];
  units_[index]->drop_widened();
  for (const auto& [parameter, users] : options_.tied_parameters) {
    if (users.count(unit) != 0) {
      model_.unit_of(parameter).drop_widened();
    }
  }
}

template <class T>
Runtime<T>::~Runtime() {
  close_scope_region();  // a scope the caller never closed (it threw inside)
  if (gathers_) {
    for (ShardedUnit<T>* unit : units_) {
      unit->gather_over(unit->group());
    }
  }
}

template <class T>
void Runtime<T>::start_gather(std::size_t index) {
  if (expected_ >= 0) {
    const auto announced = static_cast<std::size_t>(expected_);
    expected_ = -1;
    // The scopes gather in the announced order; gather_multiple_async may ask for other units
    // first, and the announced gather goes out before them.
    if (announced != index) {
      units_[announced]->gather_async();
      ++stats_.gathers;
      ++stats_.prefetched;
    }
  }
  units_[index]->gather_async();
  ++stats_.gathers;
}

template <class T>
std::size_t Runtime<T>::index_of(const std::string& unit, const char* operation) const {
  auto it = index_.find(unit);
  if (it == index_.end()) {
    throw Error(ErrorKind::unknown_name, std::string(operation) + ": unknown unit '" + unit +
                                             "'; the registered order is " + order_text());
  }
  return it->second;
}

template <class T>
bool Runtime<T>::held_for_step(std::size_t index) const {
  return units_[index]->stays_gathered() || tied_owners_.count(index) != 0;
}

template <class T>
std::string Runtime<T>::order_text() const {
  return join(order_);
}

template <class T>
std::string Runtime<T>::open_scope_text() const {
  return std::string(phase_ == Phase::forward ? "forward" : "backward") + " scope of '" +
         order_[static_cast<std::size_t>(open_)] + "'";
}

template <class T>
std::size_t Runtime<T>::index_of_open(const std::string& unit, Phase phase,
                                      const char* operation) const {
  check_usable(operation);
  const std::size_t index = index_of(unit, operation);
  if (phase_ != phase || open_ != static_cast<int>(index)) {
    throw Error(ErrorKind::order, std::string(operation) + " of '" + unit + "' without its " +
                                      (phase == Phase::forward ? "forward" : "backward") +
                                      " scope open (" +
                                      (open_ >= 0 ? "the " + open_scope_text() + " is open"
                                                  : std::string("no scope is open")) +
                                      ")");
  }
  return index;
}

template <class T>
void Runtime<T>::check_usable(const char* operation) const {
  if (!lost_step_.empty()) {
    throw Error(ErrorKind::state, lost_step_ + " (reported by " + operation +
                                      "); the runtime cannot continue this step: create a new one");
  }
}

// The part of a call that changes the step, after its checks passed. A failure there (a
// collective that failed or timed out) may leave the ranks at different points of the step, so
// the step is lost rather than continued on a guess.
template <class T>
template <class Body>
void Runtime<T>::losing_the_step_on_failure(const char* operation, const std::string& unit,
                                            Body&& body) {
  try {
    body();
  } catch (const std::exception& error) {
    lost_step_ = std::string(operation) + (unit.empty() ? "" : " of '" + unit + "'") +
                 " failed: " + error.what();
    throw;
  }
}

template <class T>
void Runtime<T>::progress() {
  for (ShardedUnit<T>* unit : units_) {
    if (unit->state() == UnitState::gathering) {
      unit->test_gather();
    }
  }
  model_.progress_reductions();
}

template <class T>
int Runtime<T>::gather_limit() const {
  return phase_ == Phase::backward && options_.max_gathered_units_backward > 0
             ? options_.max_gathered_units_backward
             : options_.max_gathered_units;
}

template <class T>
void Runtime<T>::prefetch() {
  if (!options_.prefetch) {
    return;
  }
  // The units that come next, in the order their scopes will open. Every rank computes the same
  // list from the same calls, so every rank starts the same gathers in the same order.
  const std::size_t n = order_.size();
  const std::size_t skip = open_ >= 0 ? 1 : 0;
  std::vector<std::size_t> upcoming;
  if (phase_ == Phase::forward) {
    for (std::size_t i = done_ + skip; i < n; ++i) {
      upcoming.push_back(i);
    }
    for (std::size_t i = n; i-- > 0;) {
      upcoming.push_back(i);  // then backward, from the last unit
    }
  } else {
    for (std::size_t k = done_ + skip; k < n; ++k) {
      upcoming.push_back(n - 1 - k);
    }
  }
  // Units that stay gathered until their backward (shard_grad_op, shard_optimizer) hold their
  // parameters for the whole step by design: only their transfers in flight count against the
  // limit, or the forward could not prefetch past the limit's first units.
  int busy = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const UnitState state = units_[i]->state();
    busy += state == UnitState::gathering || (state == UnitState::gathered && !held_for_step(i));
  }
  const std::size_t this_phase = phase_ == Phase::forward ? n - std::min(n, done_ + skip) : 0;
  for (std::size_t k = 0; k < upcoming.size(); ++k) {
    const std::size_t i = upcoming[k];
    if (units_[i]->state() != UnitState::sharded) {
      continue;
    }
    if (busy < gather_limit()) {
      start_gather(i);
      ++stats_.prefetched;
      ++busy;
      continue;
    }
    // The next gather, announced now so that it starts at once when its turn comes. Only within
    // the phase: a step that ends after its forward (evaluation) must not leave one announced.
    if (gathers_ && expected_ < 0 && (phase_ == Phase::backward || k < this_phase)) {
      units_[i]->expect_gather();
      expected_ = static_cast<int>(i);
    }
    break;
  }
}

template <class T>
void Runtime<T>::enter(std::size_t index) {
  ShardedUnit<T>& unit = *units_[index];
  ++stats_.scopes;
  progress();
  if (unit.state() == UnitState::gathered) {
    ++stats_.ready_on_entry;
  } else {
    const ProfilingRegion region("fsdp::wait_for_gather", order_[index]);
    const auto start = std::chrono::steady_clock::now();
    if (unit.state() == UnitState::sharded) {
      start_gather(index);
    }
    unit.wait_gather();
    stats_.wait_s += seconds_since(start);
  }
  open_ = static_cast<int>(index);
  close_scope_region();
  scope_region_ = push_profiling_region(
      phase_ == Phase::forward ? "fsdp::forward" : "fsdp::backward", order_[index]);
  prefetch();
  // A prefetched gather whose signature check the other ranks have already answered starts now,
  // not after this scope's computation (see MpiOperation).
  progress();
}

template <class T>
ShardedUnit<T>& Runtime<T>::begin_forward(const std::string& unit) {
  check_usable("begin_forward");
  const std::size_t index = index_of(unit, "begin_forward");
  if (open_ >= 0) {
    throw Error(ErrorKind::order, "forward scope of '" + unit + "' opened while the " +
                                      open_scope_text() + " is open; close it first");
  }
  if (phase_ != Phase::forward) {
    throw Error(ErrorKind::order,
                "forward scope of '" + unit +
                    "' opened during backward; call finish_step() after the last backward scope");
  }
  if (done_ >= order_.size() || index != done_) {
    throw Error(ErrorKind::order,
                "forward scope of '" + unit + "' opened out of order: " +
                    (done_ < order_.size() ? "expected '" + order_[done_] + "'"
                                           : std::string("every forward scope already ran")) +
                    "; the registered forward order is " + order_text());
  }
  losing_the_step_on_failure("begin_forward", unit, [&] { enter(index); });
  return *units_[index];
}

template <class T>
void Runtime<T>::end_forward(const std::string& unit) {
  const std::size_t index = index_of_open(unit, Phase::forward, "end_forward");
  losing_the_step_on_failure("end_forward", unit, [&] {
    close_scope_region();
    drop_widened(index);
    const bool last = index + 1 == order_.size();
    // Resident parameters stay gathered until the backward: one gather per step.
    if (!last && options_.keep_gathered_until_backward.count(unit) == 0 && !held_for_step(index)) {
      units_[index]->release();
    }
    open_ = -1;
    ++done_;
    progress();
    prefetch();
  });
}

template <class T>
ShardedUnit<T>& Runtime<T>::begin_backward(const std::string& unit) {
  check_usable("begin_backward");
  const std::size_t index = index_of(unit, "begin_backward");
  if (open_ >= 0) {
    throw Error(ErrorKind::order, "backward scope of '" + unit + "' opened while the " +
                                      open_scope_text() + " is open; close it first");
  }
  const std::size_t n = order_.size();
  if (phase_ == Phase::forward && done_ != n) {
    throw Error(ErrorKind::order, "backward scope of '" + unit + "' opened after " +
                                      std::to_string(done_) + " of " + std::to_string(n) +
                                      " forward scopes; run the whole forward first");
  }
  // The first backward scope of a step turns the phase; nothing changes until every check passed.
  const std::size_t done = phase_ == Phase::forward ? 0 : done_;
  const std::size_t expected = done < n ? n - 1 - done : n;
  if (index != expected) {
    throw Error(ErrorKind::order,
                "backward scope of '" + unit + "' opened out of order: " +
                    (expected < n ? "expected '" + order_[expected] + "'"
                                  : std::string("every backward scope already ran")) +
                    "; backward runs the forward order (" + order_text() + ") in reverse");
  }
  phase_ = Phase::backward;
  done_ = done;
  losing_the_step_on_failure("begin_backward", unit, [&] { enter(index); });
  return *units_[index];
}

template <class T>
void Runtime<T>::end_backward(const std::string& unit) {
  const std::size_t index = index_of_open(unit, Phase::backward, "end_backward");
  losing_the_step_on_failure("end_backward", unit, [&] {
    close_scope_region();
    drop_widened(index);
    units_[index]->release();
    open_ = -1;
    ++done_;
    // The next units' gathers go out before this unit's gradients, so that they overlap.
    prefetch();
    if (gradient_sync_) {
      const ProfilingRegion region("fsdp::reduce_gradients", unit);
      const auto most = static_cast<std::size_t>(options_.max_reductions_in_flight);
      std::vector<ShardedUnit<T>*> reduced;  // for the optimizer in backward, once this one is out
      while (most > 0 && model_.reductions_in_flight() >= most) {
        reduced.push_back(wait_oldest_reduction());
      }
      model_.reduce_scatter_grads_async(*units_[index]);
      ++stats_.reductions;
      if (most == 0) {
        while (model_.reductions_in_flight() > 0) {
          reduced.push_back(wait_oldest_reduction());
        }
      }
      stats_.most_reductions_in_flight =
          std::max(stats_.most_reductions_in_flight,
                   static_cast<std::int64_t>(model_.reductions_in_flight()));
      for (ShardedUnit<T>* waited : reduced) {
        stats_.updated_in_backward += update(waited) ? 1 : 0;
      }
    } else {
      units_[index]->fold_gradients();  // bfloat16 shard_optimizer: into the kept whole ones
    }
    progress();
  });
}

template <class T>
void Runtime<T>::finish_step() {
  check_usable("finish_step");
  if (open_ >= 0) {
    throw Error(ErrorKind::order, "finish_step with the " + open_scope_text() +
                                      " still open; close every scope before the step ends");
  }
  const bool evaluation = phase_ == Phase::forward && done_ == order_.size();
  const bool training = phase_ == Phase::backward && done_ == order_.size();
  if (!evaluation && !training) {
    throw Error(ErrorKind::order,
                "finish_step after " + std::to_string(done_) + " of " +
                    std::to_string(order_.size()) +
                    (phase_ == Phase::forward ? " forward" : " backward") +
                    " scopes; a step runs every forward scope, then every backward scope or none");
  }
  losing_the_step_on_failure("finish_step", "", [&] {
    const ProfilingRegion region("fsdp::finish_step");
    model_.progress_reductions();
    stats_.incomplete_at_finish += static_cast<std::int64_t>(model_.reductions_incomplete());
    if (optimizer_ != nullptr && training && gradient_sync_) {
      // Each unit steps as soon as its reduction is waited for, while the later ones fly.
      while (model_.reductions_in_flight() > 0) {
        update(wait_oldest_reduction());
      }
      for (std::size_t i = units_.size(); i-- > 0;) {
        update(units_[i]);  // those a reduction of the model's own waited for (none, normally)
      }
      optimizer_->end_step();
      updated_.assign(units_.size(), false);
    } else {
      const auto start = std::chrono::steady_clock::now();
      model_.wait_for_gradients();  // before clipping and the optimizer read the pieces
      stats_.reduce_s += seconds_since(start);
    }
    for (ShardedUnit<T>* unit : units_) {
      if (unit->state() == UnitState::gathering) {
        unit->wait_gather();
      }
      unit->release();
    }
    phase_ = Phase::forward;
    done_ = 0;
    last_step_ = stats_.since(step_start_);
    step_start_ = stats_;
  });
}

template <class T>
void Runtime<T>::require_between_steps(const char* operation) const {
  check_usable(operation);
  if (open_ >= 0 || done_ != 0) {
    throw Error(ErrorKind::order, std::string(operation) + " inside a step (" +
                                      (open_ >= 0 ? "the " + open_scope_text() + " is open"
                                                  : std::to_string(done_) + " scopes done") +
                                      "); call it between steps, after finish_step");
  }
}

template <class T>
void Runtime<T>::set_requires_gradient_sync(bool sync) {
  require_between_steps("set_requires_gradient_sync");
  require_same_configuration(Configuration("gradient sync").flag("requires_gradient_sync", sync),
                             model_.group(), model_.replicas());
  gradient_sync_ = sync;
}

template <class T>
void Runtime<T>::set_overlap(int max_gathered_units_backward, int max_reductions_in_flight) {
  require_between_steps("set_overlap");
  require_same_configuration(
      Configuration("overlap limits")
          .integer("max_gathered_units_backward", max_gathered_units_backward)
          .integer("max_reductions_in_flight", max_reductions_in_flight),
      model_.group(), model_.replicas());
  require_overlap_limits(max_gathered_units_backward, max_reductions_in_flight);
  options_.max_gathered_units_backward = max_gathered_units_backward;
  options_.max_reductions_in_flight = max_reductions_in_flight;
}

template <class T>
void Runtime<T>::set_optimizer_in_backward(UnitUpdate<T>* optimizer) {
  require_between_steps("set_optimizer_in_backward");
  require_same_configuration(
      Configuration("optimizer in backward").flag("optimizer_in_backward", optimizer != nullptr),
      model_.group(), model_.replicas());
  optimizer_ = optimizer;
  updated_.assign(units_.size(), false);
}

template <class T>
ShardedUnit<T>* Runtime<T>::wait_oldest_reduction() {
  const auto start = std::chrono::steady_clock::now();
  ShardedUnit<T>* unit = model_.wait_oldest_reduction();
  stats_.reduce_s += seconds_since(start);
  return unit;
}

template <class T>
bool Runtime<T>::update(ShardedUnit<T>* unit) {
  if (optimizer_ == nullptr || unit == nullptr) {
    return false;
  }
  const std::size_t index = index_.at(unit->name());
  if (updated_[index]) {
    return false;
  }
  if (std::find(updated_.begin(), updated_.end(), true) == updated_.end()) {
    optimizer_->begin_step(model_);  // the step's first unit: the same call on every rank
  }
  optimizer_->step_unit(*unit);
  updated_[index] = true;
  return true;
}

template <class T>
ShardedParameter<T>& Runtime<T>::open_parameter(const std::string& parameter, bool gradient) {
  const char* what = gradient ? "gradient" : "parameter";
  check_usable(gradient ? "grad" : "full");
  if (open_ < 0) {
    throw Error(ErrorKind::state, std::string(what) + " of '" + parameter +
                                      "' requested with no scope open; open the scope of its "
                                      "unit first");
  }
  const std::string& unit = order_[static_cast<std::size_t>(open_)];
  if (gradient && phase_ != Phase::backward) {
    throw Error(ErrorKind::state, "gradient of '" + parameter +
                                      "' requested in the forward scope of '" + unit +
                                      "'; gradients are written in backward scopes");
  }
  if (!model_.plan().contains(parameter)) {
    throw Error(ErrorKind::unknown_name, "unit '" + unit + "' has no parameter '" + parameter +
                                             "' (the model has no parameter of that name)");
  }
  ShardedUnit<T>& owner = model_.unit_of(parameter);
  const auto tied = options_.tied_parameters.find(parameter);
  const bool used_here = tied != options_.tied_parameters.end() && tied->second.count(unit) != 0;
  if (&owner != units_[static_cast<std::size_t>(open_)] && !used_here) {
    throw Error(ErrorKind::state, std::string(what) + " of '" + parameter + "' (unit '" +
                                      owner.name() + "') requested in the " + open_scope_text() +
                                      "; open its own unit's scope, or list this unit for it in "
                                      "RuntimeOptions::tied_parameters");
  }
  return owner.parameter(parameter);
}

template <class T>
typename ShardedParameter<T>::View Runtime<T>::full(const std::string& parameter) {
  return open_parameter(parameter, false).full();
}

template <class T>
DeviceView<std::uint16_t> Runtime<T>::half(const std::string& parameter) {
  return open_parameter(parameter, false).half();
}

template <class T>
typename ShardedParameter<T>::View Runtime<T>::grad(const std::string& parameter) {
  return open_parameter(parameter, true).grad();
}

template <class T>
void Runtime<T>::gather_multiple_async(const std::vector<std::string>& units) {
  check_usable("gather_multiple_async");
  std::vector<std::size_t> sharded;
  for (const std::string& name : units) {
    const std::size_t index = index_of(name, "gather_multiple_async");
    if (units_[index]->state() == UnitState::sharded &&
        std::find(sharded.begin(), sharded.end(), index) == sharded.end()) {
      sharded.push_back(index);
    }
  }
  for (std::size_t index : sharded) {
    if (units_[index]->state() == UnitState::sharded) {  // not the announced gather, started first
      start_gather(index);
    }
  }
}

template <class T>
void Runtime<T>::release_multiple(const std::vector<std::string>& units) {
  check_usable("release_multiple");
  std::vector<ShardedUnit<T>*> releasing;
  for (const std::string& name : units) {
    const std::size_t index = index_of(name, "release_multiple");
    if (open_ == static_cast<int>(index)) {
      throw Error(ErrorKind::state, "release_multiple of '" + name + "' while the " +
                                        open_scope_text() + " is open; close the scope");
    }
    if (units_[index]->state() == UnitState::gathering) {
      throw Error(ErrorKind::state, "release_multiple of '" + name +
                                        "' while it is gathering; wait for its gather first");
    }
    releasing.push_back(units_[index]);
  }
  for (ShardedUnit<T>* unit : releasing) {
    unit->release();
  }
}

template <class T>
typename Runtime<T>::Scope Runtime<T>::forward(const std::string& unit) {
  ShardedUnit<T>& u = begin_forward(unit);
  return Scope(this, &u, false);
}

template <class T>
typename Runtime<T>::Scope Runtime<T>::backward(const std::string& unit) {
  ShardedUnit<T>& u = begin_backward(unit);
  return Scope(this, &u, true);
}

// ---- Scope ----

template <class T>
Runtime<T>::Scope::Scope(Runtime* runtime, ShardedUnit<T>* unit, bool backward)
    : runtime_(runtime),
      unit_(unit),
      backward_(backward),
      exceptions_on_entry_(std::uncaught_exceptions()) {}

template <class T>
Runtime<T>::Scope::Scope(Scope&& other) noexcept
    : runtime_(other.runtime_),
      unit_(other.unit_),
      backward_(other.backward_),
      exceptions_on_entry_(other.exceptions_on_entry_) {
  other.runtime_ = nullptr;
}

template <class T>
typename ShardedParameter<T>::View Runtime<T>::Scope::full(const std::string& parameter) {
  if (ShardedParameter<T>* own = unit_->find_parameter(parameter)) {
    return own->full();
  }
  // A tied parameter of another unit, or an error that says whose it is.
  return runtime_->full(parameter);
}

template <class T>
DeviceView<std::uint16_t> Runtime<T>::Scope::half(const std::string& parameter) {
  if (ShardedParameter<T>* own = unit_->find_parameter(parameter)) {
    return own->half();
  }
  return runtime_->half(parameter);
}

template <class T>
typename ShardedParameter<T>::View Runtime<T>::Scope::grad(const std::string& parameter) {
  if (!backward_) {
    throw Error(ErrorKind::state, "gradient of '" + parameter +
                                      "' requested in the forward scope of '" + unit_->name() +
                                      "'; gradients are written in backward scopes");
  }
  if (ShardedParameter<T>* own = unit_->find_parameter(parameter)) {
    return own->grad();
  }
  return runtime_->grad(parameter);
}

template <class T>
bool Runtime<T>::Scope::trainable(const std::string& parameter) {
  if (ShardedParameter<T>* own = unit_->find_parameter(parameter)) {
    return own->trainable();
  }
  return runtime_->open_parameter(parameter, false).trainable();
}

template <class T>
void Runtime<T>::Scope::close() {
  if (runtime_ == nullptr) {
    return;
  }
  Runtime* runtime = runtime_;
  runtime_ = nullptr;
  if (backward_) {
    runtime->end_backward(unit_->name());
  } else {
    runtime->end_forward(unit_->name());
  }
}

template <class T>
Runtime<T>::Scope::~Scope() {
  if (runtime_ == nullptr) {
    return;
  }
  if (std::uncaught_exceptions() > exceptions_on_entry_) {
    // Unwinding: no collective now (the other ranks may not be here). The step is lost.
    runtime_->lost_step_ = "the " + std::string(backward_ ? "backward" : "forward") +
                           " scope of '" + unit_->name() + "' was left by an exception";
    runtime_ = nullptr;
    return;
  }
  Runtime* runtime = runtime_;
  try {
    close();
  } catch (const std::exception& error) {
    if (runtime->lost_step_.empty()) {
      runtime->lost_step_ = error.what();  // raised by the runtime's next call
    }
  }
}

template class Runtime<float>;
template class Runtime<double>;

}  // namespace fsdp
