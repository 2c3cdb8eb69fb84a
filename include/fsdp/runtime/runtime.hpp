// Runtime: FSDP's hooks as scopes the user's code opens around each layer. A forward scope waits
// for (or starts) its unit's gather and releases the unit when it closes; a backward scope gathers
// again and starts the reduce-scatter of the gradients when it closes. While a unit computes, the
// gathers of the next units in execution order are in flight (prefetch), within a limit on how
// many units may be gathered at once, and so are the reductions of the units before it, within a
// limit of their own; finish_step completes them.
#pragma once

#include <cstdint>
#include <exception>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "fsdp/unit/sharded_model.hpp"
#include "fsdp/unit/unit_update.hpp"

namespace fsdp {

struct RuntimeOptions {
  // Start the gathers of the next units while the current one computes.
  bool prefetch = true;
  // Units gathered or gathering at once, the current one included (PyTorch FSDP's rate limiter).
  // At least 1; with 1 the next gather starts only once the current unit is released, so it
  // overlaps nothing.
  int max_gathered_units = 2;
  // The same limit while the backward pass runs (its scopes prefetch the units before them), when
  // the backward should look further ahead or less far than the forward; 0: max_gathered_units.
  // The forward's last scopes prefetch the first backward units under max_gathered_units.
  int max_gathered_units_backward = 0;
  // Gradient reductions in flight at once. Closing a backward scope starts the unit's reduction
  // (reduce-scatter, hybrid sharding's replica all-reduce, any 16-bit cast) and returns; while K
  // are in flight it first waits for the oldest. They complete at finish_step (or when the
  // model's gradients are read: ShardedModel::wait_for_gradients). Each holds its unit's whole
  // gradients and communication buffers until it completes. 0: closing a backward scope waits for
  // its reduction, so gradient communication overlaps nothing.
  int max_reductions_in_flight = 2;
  // Units that stay gathered from their forward scope until their backward scope, like PyTorch's
  // reshard_after_forward=False: no second gather, more memory. The last unit of the forward
  // order always stays gathered: its backward scope comes next.
  std::set<std::string> keep_gathered_until_backward;
  // Tied parameters: a parameter that units besides its own use (a language model's output head
  // reading the token embedding), by name, with the units that also use it. It stays one
  // parameter, with one piece per rank, one gradient and one optimizer state. Its own unit stays
  // gathered from its forward scope to its backward scope, so the parameter is gathered once per
  // step and the listed units' scopes read it with full(); their backward scopes add to its
  // gradient with grad(), and the owner's backward scope reduces the sum of every use, once.
  // Each listed unit must come after the owner in the execution order, so that its backward
  // scope runs before the owner's. The owner counts against max_gathered_units only while its
  // gather is in flight, as a unit that stays gathered by its mode does.
  std::map<std::string, std::set<std::string>> tied_parameters;
};

// What the runtime observed: how well prefetch hid the gathers.
struct RuntimeStats {
  std::int64_t scopes = 0;          // forward and backward scopes entered
  std::int64_t gathers = 0;         // gathers started
  std::int64_t prefetched = 0;      // of those, started ahead of their scope
  std::int64_t ready_on_entry = 0;  // scopes whose unit was gathered when they opened
  double wait_s = 0.0;  // time scopes spent waiting for their unit: communication not hidden
  // Time end_backward and finish_step spent waiting for gradient reductions (not starting them:
  // the copies and casts before the collectives are compute): the gradient communication that
  // was not hidden.
  double reduce_s = 0.0;
  std::int64_t reductions = 0;  // gradient reductions started
  // The most reductions in flight at once (at most RuntimeOptions::max_reductions_in_flight;
  // the same on every rank: a reduction counts until the runtime waits for it).
  std::int64_t most_reductions_in_flight = 0;
  // Reductions whose collectives had not completed when finish_step began (summed over steps).
  std::int64_t incomplete_at_finish = 0;
  // With an optimizer in backward: units it stepped before finish_step began, while the
  // backward still computed (summed over steps).
  std::int64_t updated_in_backward = 0;
  // The counts above less those of another (a step's: the stats at its finish less those at its
  // start); most_reductions_in_flight is this one's.
  RuntimeStats since(const RuntimeStats& before) const;
};

template <class T>
class Runtime {
 public:
  // order: every unit of the model exactly once, in forward execution order (backward runs it in
  // reverse). Errors name unknown, repeated and missing units. Collective over the model's group
  // and replicas: every rank must pass the same order and options, else every rank throws
  // fsdp::Error (ErrorKind::mismatch) naming the first that differs.
  Runtime(ShardedModel<T>& model, std::vector<std::string> order, RuntimeOptions options = {});
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;
  // Gives the units back their own group for gathers (see gather_group()).
  ~Runtime();

  // A scope on one unit; closes itself when destroyed (forward: release; backward: reduce-scatter
  // the gradients, then release). Errors on close are raised by the runtime's next call, since a
  // destructor cannot throw; close() raises them directly.
  class Scope {
   public:
    Scope(Scope&& other) noexcept;
    Scope& operator=(Scope&&) = delete;
    Scope(const Scope&) = delete;
    ~Scope();
    ShardedUnit<T>& unit() { return *unit_; }
    // The whole parameter (read) and, in a backward scope, its full gradient (+=). With a
    // 16-bit param_dtype, full() is the parameter widened to T, a copy freed when the scope
    // closes; half() is the gathered 16-bit parameter itself (ShardedParameter::half()).
    typename ShardedParameter<T>::View full(const std::string& parameter);
    DeviceView<std::uint16_t> half(const std::string& parameter);
    typename ShardedParameter<T>::View grad(const std::string& parameter);
    // False for a frozen parameter (ParameterInfo::trainable), which has no gradient: a backward
    // leaves it out (and may skip computing it). Errors as full's.
    bool trainable(const std::string& parameter);
    void close();

   private:
    friend class Runtime;
    Scope(Runtime* runtime, ShardedUnit<T>* unit, bool backward);
    Runtime* runtime_;
    ShardedUnit<T>* unit_;
    bool backward_;
    int exceptions_on_entry_;
  };

  Scope forward(const std::string& unit);
  Scope backward(const std::string& unit);

  // The same as begin/end calls, for C and Fortran. Every call checks the order before it changes
  // anything: a refused call (ErrorKind::order; unknown_name for a unit the order does not have)
  // leaves the runtime as it was, and the expected call still works. A call that fails after its
  // checks (communication, a timeout) loses the step: every later call fails with
  // ErrorKind::state, and the runtime must be destroyed and made again.
  ShardedUnit<T>& begin_forward(const std::string& unit);
  void end_forward(const std::string& unit);
  ShardedUnit<T>& begin_backward(const std::string& unit);
  void end_backward(const std::string& unit);
  // Ends a training step (every forward and backward scope done) or an evaluation step (every
  // forward scope done, no backward): releases what is still gathered and starts over. Errors: a
  // scope left open, a step that stopped half way.
  void finish_step();
  // Scope::full, Scope::half and Scope::grad of the open scope, for C and Fortran. Errors
  // (ErrorKind::state): no scope open, a parameter of another unit, a gradient in a forward scope;
  // ErrorKind::unknown_name for a parameter the model does not have.
  typename ShardedParameter<T>::View full(const std::string& parameter);
  DeviceView<std::uint16_t> half(const std::string& parameter);
  typename ShardedParameter<T>::View grad(const std::string& parameter);

  // Gradient accumulation (PyTorch FSDP2's set_requires_gradient_sync). With false, closing a
  // backward scope leaves the unit's gradients whole and unreduced, and the backward scopes of
  // the following steps add into them; the first step with true (the default) reduces the sum
  // once, into the gradient pieces, before the optimizer step. The memory this costs: every
  // unit's whole gradients (MemoryCategory::full_gradients, one copy of the model's gradients)
  // from its first unreduced backward scope to that reduction; nothing in shard_optimizer, whose
  // whole gradients stay allocated anyway (MemoryCategory::resident_gradients). The other
  // way to accumulate, reducing every step into the pieces (true throughout), costs no memory and
  // one reduction per step (not in shard_optimizer, whose pieces are views into the whole
  // gradients). Between steps only (ErrorKind::order otherwise). Collective over the model's
  // group and replicas: every rank passes the same value, else every rank throws
  // ErrorKind::mismatch.
  void set_requires_gradient_sync(bool sync);
  bool requires_gradient_sync() const { return gradient_sync_; }

  // RuntimeOptions::max_gathered_units_backward and max_reductions_in_flight from the next step
  // on (for C and Fortran, whose runtimes are made with the defaults, and for a code that tunes
  // the overlap while it trains). Between steps only (ErrorKind::order otherwise); a value out of
  // range is ErrorKind::usage, as in the constructor. Collective over the model's group and
  // replicas: every rank passes the same values, else every rank throws ErrorKind::mismatch.
  void set_overlap(int max_gathered_units_backward, int max_reductions_in_flight);
  const RuntimeOptions& options() const { return options_; }

  // Optimizer in backward (PyTorch's _apply_optimizer_in_backward): from the next step on, the
  // runtime steps `optimizer` on each unit as soon as it has waited for the unit's gradient
  // reduction: in a backward scope's close when max_reductions_in_flight makes it wait for the
  // oldest, and in finish_step for the rest, each before the next wait. The optimizer's compute
  // then runs while the last reductions are still in flight, instead of after the step with the
  // link idle. finish_step returns with the step taken (UnitUpdate::end_step): do not step the
  // optimizer again. Bit for bit the step of the whole model after finish_step. Rules that must
  // see every gradient before any update cannot run this way: clipping by the global norm
  // (clip_grad_norm) and fp16 loss scaling (LossScaler's overflow check); call finish_step and
  // then them and the optimizer. Steps without gradient sync (set_requires_gradient_sync(false))
  // and evaluation steps take no step. nullptr: the optimizer steps after finish_step, as the
  // caller does it. The optimizer must outlive its use. Between steps only (ErrorKind::order);
  // collective over the model's group and replicas: every rank sets one or none, else every rank
  // throws ErrorKind::mismatch.
  void set_optimizer_in_backward(UnitUpdate<T>* optimizer);
  bool optimizer_in_backward() const { return optimizer_ != nullptr; }

  // Outside the scopes: starts the gathers of the given units that are sharded (those gathering
  // or gathered are left alone), all in flight together, and releases gathered units. Every name
  // is checked before anything starts. A gather that fails reaches the caller and leaves the
  // runtime usable (this call is not part of the step); the units gathered before it keep
  // gathering. release_multiple refuses (ErrorKind::state) a unit still gathering or the open
  // scope's unit.
  void gather_multiple_async(const std::vector<std::string>& units);
  void release_multiple(const std::vector<std::string>& units);

  // Makes progress on the gathers in flight (MPI progresses non-blocking collectives mostly
  // inside MPI calls). Scopes call it on entry and exit; call it inside long computations to
  // keep prefetched gathers moving.
  void progress();

  // The group the units gather over while this runtime lives: a split of the model's group of
  // their own when the runtime checks ahead (prefetch on a group whose checks_ahead() is true),
  // else the model's group.
  ProcessGroup& gather_group() { return gathers_ ? *gathers_ : model_.group(); }

  const RuntimeStats& stats() const { return stats_; }
  // What the last finished step (finish_step) did alone: scopes that found their gather done on
  // entry (ready_on_entry of scopes), reductions still in flight at its finish
  // (incomplete_at_finish), its waits. Zero before the first step finishes.
  const RuntimeStats& last_step() const { return last_step_; }
  void reset_stats() {
    stats_ = RuntimeStats{};
    step_start_ = RuntimeStats{};
  }
  const std::vector<std::string>& order() const { return order_; }

 private:
  enum class Phase { forward, backward };
  std::size_t index_of(const std::string& unit, const char* operation) const;
  void check_usable(const char* operation) const;
  // check_usable, and no scope open or done (ErrorKind::order): the settings between steps.
  void require_between_steps(const char* operation) const;
  // The index of unit, whose scope of phase must be the open one (end_forward, end_backward).
  std::size_t index_of_open(const std::string& unit, Phase phase, const char* operation) const;
  std::string open_scope_text() const;
  ShardedParameter<T>& open_parameter(const std::string& parameter, bool gradient);
  // Frees the float copies that the scope of order_[index] read (its unit's and its tied
  // parameters').
  void drop_widened(std::size_t index);
  template <class Body>
  void losing_the_step_on_failure(const char* operation, const std::string& unit, Body&& body);
  void enter(std::size_t index);
  void prefetch();
  // Starts unit index's gather; the announced one (expected_) must go first.
  void start_gather(std::size_t index);
  std::string order_text() const;
  // The unit holds its parameters for the whole step by design (its mode, or a tied parameter
  // other units read): only its gather in flight counts against max_gathered_units.
  bool held_for_step(std::size_t index) const;

  ShardedModel<T>& model_;
  std::vector<std::string> order_;
  std::vector<ShardedUnit<T>*> units_;  // in order
  std::map<std::string, std::size_t> index_;
  RuntimeOptions options_;
  std::set<std::size_t> tied_owners_;  // units that own a tied parameter
  RuntimeStats stats_;
  RuntimeStats step_start_;  // stats_ when the current step began
  RuntimeStats last_step_;
  int gather_limit() const;  // max_gathered_units of the phase
  Phase phase_ = Phase::forward;
  std::size_t done_ = 0;  // scopes of the current phase closed so far
  int open_ = -1;         // index of the open scope, -1 when none
  // Whether the open scope's Kokkos Tools region ("fsdp::forward <unit>") was pushed.
  bool scope_region_ = false;
  void close_scope_region();
  std::string lost_step_;      // why the step cannot go on; empty while it can
  bool gradient_sync_ = true;  // set_requires_gradient_sync
  // Optimizer in backward (set_optimizer_in_backward): the rule, and which units (by index) it
  // stepped in this step (none: the step is not begun).
  UnitUpdate<T>* optimizer_ = nullptr;
  std::vector<bool> updated_;
  // Steps unit with optimizer_ (the step's first unit begins it); false, doing nothing, without
  // one or for a unit already stepped. Only in steps with gradient sync (its callers' condition).
  bool update(ShardedUnit<T>* unit);
  // Waits for the oldest reduction in flight (timed in reduce_s) and returns its unit.
  ShardedUnit<T>* wait_oldest_reduction();
  // Checking ahead (ProcessGroup::checks_ahead(), with prefetch): the units gather over a split of
  // their group that carries nothing else, on which prefetch() announces the next gather a scope
  // before it starts, so that its signature check has been answered by then.
  std::optional<ProcessGroup> gathers_;
  int expected_ = -1;  // the unit whose gather is announced and not started; -1 when none
};

extern template class Runtime<float>;
extern template class Runtime<double>;

}  // namespace fsdp
