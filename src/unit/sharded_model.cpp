#include "fsdp/unit/sharded_model.hpp"

#include <algorithm>
#include <numeric>

#include "fsdp/core/text.hpp"
#include "units_configuration.hpp"

namespace fsdp {
namespace {

// A caller's pointer (in MemorySpace, like every buffer of fsdp's) as a View of count elements.
template <class T>
Kokkos::View<const T*, MemorySpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>> unmanaged(
    const T* data, std::int64_t count) {
  return Kokkos::View<const T*, MemorySpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>(
      data, static_cast<std::size_t>(count));
}

// The plan a no_shard model's units are made from: every parameter whole on every rank, so
// gathers move nothing and gradients are all-reduced (replicated data parallel).
ShardingPlan replicated_plan(const ShardingPlan& plan) {
  return ShardingPlan(plan.strategy(), plan.world_size(), plan.parameters(),
                      std::vector<ParameterPlacement>(
                          plan.parameters().size(), ParameterPlacement{Placement::replicated, -1}));
}

}  // namespace

template <class T>
ShardedModel<T>::ShardedModel(ProcessGroup group, ShardingPlan plan,
                              const ShardedModelOptions& options)
    : group_(std::move(group)),
      plan_(std::move(plan)),
      mode_(options.unit.mode),
      replicas_(options.unit.replicas),
      tracker_(std::make_shared<MemoryTracker>()),
      pool_(std::make_shared<BufferPool<T>>(tracker_, 0)) {
  // Buffers in a space the group cannot move (host memory on an NCCL group) fail here, with what
  // to do, rather than in the first collective.
  group_.require_transport_for_buffers();
  // Every rank of the model (over the replicas too) was given the same plan and options, before
  // anything that could fail on some ranks only: one all-reduce of a hash when they were.
  std::vector<std::size_t> all(plan_.parameters().size());
  std::iota(all.begin(), all.end(), std::size_t{0});
  require_same_configuration(
      detail::units_configuration(Configuration("model"), dtype_of<T>(), plan_, all, options.unit),
      group_, replicas());
  require(plan_.world_size() == group_.size(),
          "the plan (strategy '" + plan_.strategy() + "') was made for " +
              std::to_string(plan_.world_size()) + " ranks but the process group has " +
              std::to_string(group_.size()) + "; make the plan for the group's size");
  std::map<std::string, std::vector<std::size_t>> members;
  const auto& parameters = plan_.parameters();
  for (std::size_t i = 0; i < parameters.size(); ++i) {
    const std::string& unit = parameters[i].unit();
    if (members.find(unit) == members.end()) {
      unit_names_.push_back(unit);
    }
    members[unit].push_back(i);
    unit_of_parameter_[parameters[i].name] = 0;  // filled below
  }
  const ShardingPlan unit_plan = mode_ == ShardingMode::no_shard ? replicated_plan(plan_) : plan_;
  for (const std::string& unit : unit_names_) {
    unit_index_[unit] = units_.size();
    for (std::size_t i : members[unit]) {
      unit_of_parameter_[parameters[i].name] = units_.size();
    }
    // The model has checked the units' configuration: they need not check it again each.
    units_.push_back(std::unique_ptr<ShardedUnit<T>>(new ShardedUnit<T>(
        unit, group_, unit_plan, members[unit], tracker_, pool_, options.unit, false)));
  }
  if (replicas_ && replicas_->size() > 1) {
    replica_reductions_ = replicas_->split(0, replicas_->rank());
    for (const auto& unit : units_) {
      unit->replica_reductions_ = replica_reductions_;
    }
  }
  std::int64_t largest = 0;
  for (const auto& unit : units_) {
    largest = std::max(largest, unit->full_bytes());
  }
  pool_->set_capacity(options.pool_capacity_bytes >= 0 ? options.pool_capacity_bytes : 2 * largest);
}

template <class T>
ShardedUnit<T>& ShardedModel<T>::unit(const std::string& name) {
  auto it = unit_index_.find(name);
  if (it == unit_index_.end()) {
    throw Error(ErrorKind::unknown_name,
                "the model has no unit '" + name + "'; its units are " + join(unit_names_));
  }
  return *units_[it->second];
}

template <class T>
ShardedUnit<T>& ShardedModel<T>::unit_of(const std::string& parameter) {
  auto it = unit_of_parameter_.find(parameter);
  if (it == unit_of_parameter_.end()) {
    throw Error("the model has no parameter '" + parameter + "'");
  }
  return *units_[it->second];
}

template <class T>
ShardedParameter<T>& ShardedModel<T>::parameter(const std::string& name) {
  return unit_of(name).parameter(name);
}

template <class T>
void ShardedModel<T>::init_from_root(const std::string& name, const T* full_on_root) {
  ShardedParameter<T>& p = parameter(name);
  const int n = group_.size();
  const std::int64_t numel = p.numel();
  switch (p.placement()) {
    case Placement::replicated:
      if (group_.rank() == 0) {
        Kokkos::deep_copy(p.shard(), unmanaged(full_on_root, numel));
      }
      group_.broadcast(ExecutionSpace(), p.shard(), 0);
      return;
    case Placement::sharded:
    case Placement::whole: {
      // Every rank's piece in rank order: they tile [0, numel), so root's array is the send
      // buffer as it is.
      std::vector<std::size_t> counts(static_cast<std::size_t>(n), 0);
      for (const ShardAssignment& a : plan_.assignments(name)) {
        counts[static_cast<std::size_t>(a.owner_rank)] = static_cast<std::size_t>(a.size);
      }
      group_.scatter_v(ExecutionSpace(), unmanaged(full_on_root, group_.rank() == 0 ? numel : 0),
                       counts, p.shard(), 0);
      return;
    }
  }
}

template <class T>
void ShardedModel<T>::init_from_full(const std::string& name, const T* full) {
  ShardedParameter<T>& p = parameter(name);
  if (p.shard_size() > 0) {
    Kokkos::deep_copy(p.shard(), unmanaged(full + p.shard_offset(), p.shard_size()));
  }
}

template <class T>
void ShardedModel<T>::init_with(
    const std::string& name,
    const std::function<void(std::int64_t first, T* values, std::int64_t count)>& fill) {
  ShardedParameter<T>& p = parameter(name);
  if (p.shard_size() > 0) {
    // fill is host code: it writes a host copy of the piece (the piece itself in a host build),
    // which then goes to MemorySpace in one copy.
    auto host = Kokkos::create_mirror_view(p.shard());
    fill(p.shard_offset(), host.data(), p.shard_size());
    Kokkos::deep_copy(p.shard(), host);
  }
}

template <class T>
void ShardedModel<T>::zero_grad() {
  wait_for_gradients();
  for (auto& unit : units_) {
    unit->zero_grad();
  }
}

template <class T>
bool ShardedModel<T>::has_grads() const {
  return std::all_of(units_.begin(), units_.end(),
                     [](const auto& unit) { return unit->has_grads(); });
}

template <class T>
void ShardedModel<T>::reduce_scatter_grads_async(ShardedUnit<T>& unit) {
  const auto queued = std::find(reducing_.begin(), reducing_.end(), &unit);
  if (queued != reducing_.end()) {
    const auto through = queued - reducing_.begin() + 1;
    for (std::ptrdiff_t i = 0; i < through; ++i) {
      wait_oldest_reduction();
    }
  }
  unit.reduce_scatter_grads_async();
  reducing_.push_back(&unit);
}

template <class T>
std::size_t ShardedModel<T>::reductions_incomplete() const {
  return static_cast<std::size_t>(std::count_if(reducing_.begin(), reducing_.end(),
                                                [](const auto* unit) { return unit->reducing(); }));
}

template <class T>
void ShardedModel<T>::progress_reductions() {
  // Only a reduction whose elders issued all their collectives may issue its own next ones.
  bool may_issue = true;
  for (ShardedUnit<T>* unit : reducing_) {
    unit->test_reduction(may_issue);
    may_issue = may_issue && unit->reduction_issued();
  }
}

template <class T>
ShardedUnit<T>* ShardedModel<T>::wait_oldest_reduction() {
  if (reducing_.empty()) {
    return nullptr;
  }
  ShardedUnit<T>* oldest = reducing_.front();
  reducing_.pop_front();
  oldest->wait_reduction();
  return oldest;
}

template <class T>
void ShardedModel<T>::wait_for_gradients() {
  std::exception_ptr first;
  while (!reducing_.empty()) {
    try {
      wait_oldest_reduction();
    } catch (...) {
      if (!first) {
        first = std::current_exception();
      }
    }
  }
  if (first) {
    std::rethrow_exception(first);
  }
}

template class ShardedModel<float>;
template class ShardedModel<double>;

}  // namespace fsdp
