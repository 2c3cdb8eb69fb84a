// ShardedModel: every unit of a ShardingPlan on this rank, with initialization and memory report.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "fsdp/comm/process_group.hpp"
#include "fsdp/shard/sharding_plan.hpp"
#include "fsdp/unit/memory_tracker.hpp"
#include "fsdp/unit/sharded_unit.hpp"

namespace fsdp {

struct ShardedModelOptions {
  // unit.mode is what stays in pieces (sharding_mode.hpp; docs/modes.md): full_shard by default.
  UnitOptions unit;
  // Bytes of released buffers kept for the next gathers (BufferPool). Negative: twice the
  // largest unit's full size, enough for a gathered unit and the one prefetched next.
  std::int64_t pool_capacity_bytes = -1;
};

template <class T>
class ShardedModel {
 public:
  // Units are the plan's units (ParameterInfo::unit()), in the order of their first parameter.
  // Parameters start at zero. Errors: the plan's world size differs from the group's size, or a
  // parameter's dtype is not T.
  ShardedModel(ProcessGroup group, ShardingPlan plan, const ShardedModelOptions& options = {});

  // The plan the model was made with; under no_shard its units hold every parameter whole.
  const ShardingPlan& plan() const { return plan_; }
  ShardingMode mode() const { return mode_; }
  // Hybrid sharding: the ranks holding the same pieces in the other shard groups
  // (UnitOptions::replicas); nullptr without replicas. group() is the shard group.
  ProcessGroup* replicas() { return replicas_ ? &*replicas_ : nullptr; }
  // Hybrid sharding: the split of replicas() that carries only the units' averages of their
  // gradients over the replicas (ShardedUnit, reduce_scatter_grads_async); nullptr without
  // replicas.
  ProcessGroup* replica_reductions() {
    return replica_reductions_ ? &*replica_reductions_ : nullptr;
  }
  ProcessGroup& group() { return group_; }
  std::size_t unit_count() const { return units_.size(); }
  ShardedUnit<T>& unit(std::size_t index) { return *units_.at(index); }
  // Throws Error listing the units when there is none of that name.
  ShardedUnit<T>& unit(const std::string& name);
  const std::vector<std::string>& unit_names() const { return unit_names_; }
  ShardedUnit<T>& unit_of(const std::string& parameter);
  ShardedParameter<T>& parameter(const std::string& name);

  // ---- initialization: three ways, for parameters of any size ----
  // full_on_root holds all numel() elements on rank 0 (ignored elsewhere); each rank receives
  // only what it holds. Collective.
  void init_from_root(const std::string& name, const T* full_on_root);
  // Every rank holds the whole parameter; each keeps its piece. No communication.
  void init_from_full(const std::string& name, const T* full);
  // fill(first, values, count) fills this rank's piece: the count elements of the flattened
  // parameter starting at element first. Called once per rank that holds a piece, so a huge
  // parameter never exists whole anywhere. No communication.
  void init_with(
      const std::string& name,
      const std::function<void(std::int64_t first, T* values, std::int64_t count)>& fill);

  // ---- gradients ----
  // Waits for the reductions in flight first (wait_for_gradients).
  void zero_grad();
  // True when every unit holds reduce-scattered gradients.
  bool has_grads() const;

  // ---- gradient reductions in flight (a runtime's backward scopes start them) ----
  // Starts unit's gradient reduction (ShardedUnit::reduce_scatter_grads_async) and returns; it
  // stays in flight until wait_oldest_reduction or wait_for_gradients. The reductions are waited
  // for in the order they started, and hybrid sharding's replica all-reduces are issued in that
  // order, so every rank issues the same collectives in the same order. A unit already in flight
  // is waited for first, with those before it.
  void reduce_scatter_grads_async(ShardedUnit<T>& unit);
  // Reductions started and not yet waited for (a reduction that completed on its own counts
  // until it is waited for: the count is the same on every rank).
  std::size_t reductions_in_flight() const { return reducing_.size(); }
  // Of those, the ones whose collectives have not all completed yet (timing: differs by rank).
  std::size_t reductions_incomplete() const;
  // Makes progress on the reductions in flight without waiting. Never throws: a failure is kept
  // and raised by the wait, where every rank meets it.
  void progress_reductions();
  // Waits for the oldest reduction in flight and returns its unit (nullptr, doing nothing, when
  // none is in flight); rethrows its failure.
  ShardedUnit<T>* wait_oldest_reduction();
  // Waits for every reduction in flight, so that every gradient piece is complete; the first
  // failure is rethrown after all were waited for. The optimizers, grad_norm, clip_grad_norm
  // and LossScaler call it before they read the pieces; Runtime::finish_step calls it.
  void wait_for_gradients();

  // ---- memory ----
  const MemoryReport& memory() const { return tracker_->report(); }
  void reset_memory_peaks() { tracker_->reset_peaks(); }
  const std::shared_ptr<MemoryTracker>& tracker() const { return tracker_; }
  BufferPool<T>& pool() { return *pool_; }

 private:
  ProcessGroup group_;
  ShardingPlan plan_;
  ShardingMode mode_;
  std::optional<ProcessGroup> replicas_;
  std::optional<ProcessGroup> replica_reductions_;
  std::shared_ptr<MemoryTracker> tracker_;
  std::shared_ptr<BufferPool<T>> pool_;
  std::vector<std::unique_ptr<ShardedUnit<T>>> units_;
  std::deque<ShardedUnit<T>*> reducing_;  // reductions in flight, oldest first
  std::vector<std::string> unit_names_;
  std::map<std::string, std::size_t> unit_index_;
  std::map<std::string, std::size_t> unit_of_parameter_;
};

extern template class ShardedModel<float>;
extern template class ShardedModel<double>;

}  // namespace fsdp
