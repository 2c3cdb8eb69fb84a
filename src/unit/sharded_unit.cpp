#include "fsdp/unit/sharded_unit.hpp"

#include <algorithm>
#include <cstring>
#include <utility>

namespace fsdp {
namespace {

using HostRange = Kokkos::RangePolicy<Kokkos::DefaultHostExecutionSpace>;

// Elements of piece r of a sharded parameter of numel elements cut into pieces of `padded`.
std::int64_t piece_size(std::int64_t numel, std::int64_t padded, int r) {
  return std::clamp<std::int64_t>(numel - r * padded, 0, padded);
}

template <class View>
View slice(const View& view, std::int64_t offset, std::int64_t count) {
  return Kokkos::subview(view, std::make_pair(static_cast<std::size_t>(offset),
                                              static_cast<std::size_t>(offset + count)));
}

template <class T>
void add_into(const Kokkos::View<T*, Kokkos::HostSpace>& target,
              const Kokkos::View<T*, Kokkos::HostSpace>& source) {
  Kokkos::parallel_for("fsdp::add_into", HostRange(0, target.size()),
                       [=](std::size_t i) { target(i) += source(i); });
  Kokkos::DefaultHostExecutionSpace().fence();
}

}  // namespace

const char* name_of(UnitState state) {
  switch (state) {
    case UnitState::sharded:
      return "sharded";
    case UnitState::gathering:
      return "gathering";
    case UnitState::gathered:
      return "gathered";
  }
  return "unknown";
}

// ---- ShardedParameter ----

template <class T>
typename ShardedParameter<T>::View ShardedParameter<T>::full() const {
  if (unit_->state() != UnitState::gathered) {
    throw Error("fsdp: full() of parameter '" + info_.name + "' while unit '" + unit_->name() +
                "' is " + name_of(unit_->state()) +
                "; gather the unit (or enter its scope) before reading whole parameters");
  }
  return full_;
}

template <class T>
typename ShardedParameter<T>::View ShardedParameter<T>::grad() {
  if (unit_->state() != UnitState::gathered) {
    throw Error("fsdp: gradient of parameter '" + info_.name + "' written while unit '" +
                unit_->name() + "' is " + name_of(unit_->state()) +
                "; gradients are written while the unit is gathered (in its backward scope)");
  }
  return slice(unit_->full_gradients(), grad_offset_, numel_);
}

template <class T>
typename ShardedParameter<T>::View ShardedParameter<T>::add_optimizer_state(
    const std::string& label) {
  optimizer_state_.emplace_back(unit_->tracker_, MemoryCategory::optimizer_state,
                                info_.name + "." + label, shard_size());
  return optimizer_state_.back().view();
}

// ---- ShardedUnit ----

template <class T>
ShardedUnit<T>::ShardedUnit(std::string name, ProcessGroup group, const ShardingPlan& plan,
                            const std::vector<std::size_t>& indices,
                            std::shared_ptr<MemoryTracker> tracker,
                            std::shared_ptr<BufferPool<T>> pool, const UnitOptions& options)
    : name_(std::move(name)),
      group_(std::move(group)),
      tracker_(std::move(tracker)),
      pool_(std::move(pool)) {
  require(!indices.empty(), "fsdp: unit '" + name_ + "' has no parameters");
  require(plan.world_size() == group_.size(),
          "fsdp: the plan was made for " + std::to_string(plan.world_size()) +
              " ranks but the process group has " + std::to_string(group_.size()));
  const int n = group_.size();
  const int rank = group_.rank();
  parameters_.reserve(indices.size());
  std::vector<std::size_t> sharded;
  for (std::size_t index : indices) {
    const ParameterInfo& info = plan.parameters().at(index);
    require(info.dtype == dtype_of<T>(),
            "fsdp: parameter " + describe(info) + " cannot train in a model of " +
                name_of(dtype_of<T>()) + "; give every parameter the model's dtype");
    const std::size_t i = parameters_.size();
    parameters_.push_back(ShardedParameter<T>(this, info, plan.placements().at(index)));
    index_[info.name] = i;
    switch (parameters_[i].placement()) {
      case Placement::sharded:
        sharded.push_back(i);
        break;
      case Placement::whole: {
        const int owner = parameters_[i].placement_.owner_rank;
        auto it = std::find_if(owners_.begin(), owners_.end(),
                               [&](const OwnerGroup& g) { return g.owner == owner; });
        if (it == owners_.end()) {
          owners_.push_back(OwnerGroup{});
          owners_.back().owner = owner;
          it = owners_.end() - 1;
        }
        it->members.push_back(i);
        break;
      }
      case Placement::replicated:
        replicated_.push_back(i);
        break;
    }
  }
  std::sort(owners_.begin(), owners_.end(),
            [](const OwnerGroup& a, const OwnerGroup& b) { return a.owner < b.owner; });

  // Sharded: large pieces are gathered in place, the rest packed (a lone parameter always goes
  // in place: it needs no packing).
  for (std::size_t i : sharded) {
    ShardedParameter<T>& p = parameters_[i];
    p.padded_shard_ = plan.padded_shard_numel(p.name());
    const std::int64_t piece_bytes = p.padded_shard_ * static_cast<std::int64_t>(sizeof(T));
    (piece_bytes >= options.direct_gather_bytes || sharded.size() == 1 ? direct_ : packed_)
        .push_back(i);
  }
  for (std::size_t i : packed_) {
    ShardedParameter<T>& p = parameters_[i];
    p.flat_offset_ = flat_numel_;
    p.full_offset_ = packed_full_numel_;
    flat_numel_ += p.padded_shard_;
    packed_full_numel_ += p.numel_;
  }
  packed_numel_ = flat_numel_;
  for (std::size_t i : direct_) {
    parameters_[i].flat_offset_ = flat_numel_;
    flat_numel_ += parameters_[i].padded_shard_;
  }
  flat_shard_ =
      TrackedView<T>(tracker_, MemoryCategory::parameter_shards, name_ + ".shards", flat_numel_);
  flat_grad_shard_ = TrackedView<T>(tracker_, MemoryCategory::gradient_shards,
                                    name_ + ".grad_shards", flat_numel_);
  for (std::size_t i : sharded) {
    ShardedParameter<T>& p = parameters_[i];
    p.shard_offset_ = std::min<std::int64_t>(rank * p.padded_shard_, p.numel_);
    const std::int64_t size = piece_size(p.numel_, p.padded_shard_, rank);
    p.shard_ = slice(flat_shard_.view(), p.flat_offset_, size);
    p.grad_shard_ = slice(flat_grad_shard_.view(), p.flat_offset_, size);
  }

  // Whole: each owner keeps its parameters back to back, broadcast in one piece.
  for (OwnerGroup& g : owners_) {
    for (std::size_t i : g.members) {
      parameters_[i].flat_offset_ = g.numel;
      g.numel += parameters_[i].numel_;
    }
    if (g.owner == rank) {
      g.storage =
          TrackedView<T>(tracker_, MemoryCategory::parameter_shards, name_ + ".whole", g.numel);
      g.grad_storage = TrackedView<T>(tracker_, MemoryCategory::gradient_shards,
                                      name_ + ".whole_grads", g.numel);
      for (std::size_t i : g.members) {
        ShardedParameter<T>& p = parameters_[i];
        p.shard_ = slice(g.storage.view(), p.flat_offset_, p.numel_);
        p.grad_shard_ = slice(g.grad_storage.view(), p.flat_offset_, p.numel_);
      }
    }
  }

  // Replicated: every rank holds everything.
  for (std::size_t i : replicated_) {
    ShardedParameter<T>& p = parameters_[i];
    replicated_storage_.emplace_back(tracker_, MemoryCategory::parameter_shards, p.name(),
                                     p.numel_);
    replicated_grads_.emplace_back(tracker_, MemoryCategory::gradient_shards, p.name() + ".grad",
                                   p.numel_);
    p.shard_ = replicated_storage_.back().view();
    p.grad_shard_ = replicated_grads_.back().view();
  }

  // Full gradients, so that every collective on them works on one contiguous range: packed
  // parameters; direct ones padded to N pieces (reduce-scattered in place); each owner group;
  // replicated parameters.
  for (std::size_t i : packed_) {
    parameters_[i].grad_offset_ = full_grad_numel_;
    full_grad_numel_ += parameters_[i].numel_;
  }
  for (std::size_t i : direct_) {
    parameters_[i].grad_offset_ = full_grad_numel_;
    full_grad_numel_ += n * parameters_[i].padded_shard_;
  }
  for (const OwnerGroup& g : owners_) {
    for (std::size_t i : g.members) {
      parameters_[i].grad_offset_ = full_grad_numel_;
      full_grad_numel_ += parameters_[i].numel_;
    }
  }
  for (std::size_t i : replicated_) {
    parameters_[i].grad_offset_ = full_grad_numel_;
    full_grad_numel_ += parameters_[i].numel_;
  }
  direct_full_.resize(direct_.size());
}

template <class T>
ShardedUnit<T>::~ShardedUnit() {
  // Transfers in flight write into buffers about to be freed: let them finish first.
  for (Work& work : in_flight_) {
    try {
      work.wait();
    } catch (const std::exception&) {
      // Reported by Work; a destructor never throws.
    }
  }
}

template <class T>
ShardedParameter<T>& ShardedUnit<T>::parameter(const std::string& name) {
  auto it = index_.find(name);
  if (it == index_.end()) {
    std::string names;
    for (const auto& p : parameters_) {
      names += (names.empty() ? "" : ", ") + p.name();
    }
    throw Error("fsdp: unit '" + name_ + "' has no parameter '" + name + "'; it has " + names);
  }
  return parameters_[it->second];
}

template <class T>
std::int64_t ShardedUnit<T>::full_bytes() const {
  std::int64_t numel = 0;
  for (const ShardedParameter<T>& p : parameters_) {
    numel += p.numel_;
  }
  return numel * static_cast<std::int64_t>(sizeof(T));
}

template <class T>
int ShardedUnit<T>::collectives_per_gather() const {
  return (packed_.empty() ? 0 : 1) + static_cast<int>(direct_.size()) +
         static_cast<int>(owners_.size());
}

template <class T>
void ShardedUnit<T>::require_state(UnitState expected, const char* operation) const {
  if (state_ != expected) {
    throw Error(std::string("fsdp: ") + operation + " of unit '" + name_ + "' while it is " +
                name_of(state_) + "; it must be " + name_of(expected) +
                (state_ == UnitState::gathered && expected == UnitState::sharded
                     ? " (release it before gathering again)"
                     : ""));
  }
}

template <class T>
void ShardedUnit<T>::gather_async() {
  require_state(UnitState::sharded, "gather");
  const int n = group_.size();
  // Every buffer a collective fills completely: no zero fill.
  if (!packed_.empty()) {
    packed_gather_ = pool_->acquire(MemoryCategory::communication, name_ + ".packed_gather",
                                    packed_numel_ * n, false);
    in_flight_.push_back(group_.all_gather_async(slice(flat_shard_.view(), 0, packed_numel_),
                                                 packed_gather_.view()));
  }
  for (std::size_t k = 0; k < direct_.size(); ++k) {
    const ShardedParameter<T>& p = parameters_[direct_[k]];
    direct_full_[k] =
        pool_->acquire(MemoryCategory::gathered_parameters, p.name(), p.padded_shard_ * n, false);
    in_flight_.push_back(group_.all_gather_async(
        slice(flat_shard_.view(), p.flat_offset_, p.padded_shard_), direct_full_[k].view()));
  }
  for (OwnerGroup& g : owners_) {
    if (g.owner == group_.rank()) {
      in_flight_.push_back(group_.broadcast_async(g.storage.view(), g.owner));
    } else {
      g.gathered =
          pool_->acquire(MemoryCategory::gathered_parameters, name_ + ".whole", g.numel, false);
      in_flight_.push_back(group_.broadcast_async(g.gathered.view(), g.owner));
    }
  }
  state_ = UnitState::gathering;
}

template <class T>
bool ShardedUnit<T>::test_gather() {
  if (state_ != UnitState::gathering) {
    return state_ == UnitState::gathered;
  }
  bool done = true;
  for (Work& work : in_flight_) {
    done = work.test() && done;
  }
  if (done) {
    finish_gather();
  }
  return done;
}

template <class T>
void ShardedUnit<T>::wait_gather() {
  require_state(UnitState::gathering, "wait_gather");
  wait_all(in_flight_);
  finish_gather();
}

template <class T>
void ShardedUnit<T>::gather() {
  gather_async();
  wait_gather();
}

template <class T>
void ShardedUnit<T>::finish_gather() {
  in_flight_.clear();
  const int n = group_.size();
  if (!packed_.empty()) {
    // Copy out: rank r's piece of parameter p sits at r * packed_numel_ + p.flat_offset_.
    packed_full_ = pool_->acquire(MemoryCategory::gathered_parameters, name_ + ".packed_full",
                                  packed_full_numel_, false);
    const T* from = packed_gather_.view().data();
    T* to = packed_full_.view().data();
    for (std::size_t i : packed_) {
      ShardedParameter<T>& p = parameters_[i];
      for (int r = 0; r < n; ++r) {
        const std::int64_t count = piece_size(p.numel_, p.padded_shard_, r);
        if (count > 0) {
          std::memcpy(to + p.full_offset_ + r * p.padded_shard_,
                      from + r * packed_numel_ + p.flat_offset_,
                      static_cast<std::size_t>(count) * sizeof(T));
        }
      }
      p.full_ = slice(packed_full_.view(), p.full_offset_, p.numel_);
    }
    pool_->give_back(packed_gather_);
  }
  for (std::size_t k = 0; k < direct_.size(); ++k) {
    ShardedParameter<T>& p = parameters_[direct_[k]];
    p.full_ = slice(direct_full_[k].view(), 0, p.numel_);  // the padding stays out of sight
  }
  for (OwnerGroup& g : owners_) {
    const View& whole = g.owner == group_.rank() ? g.storage.view() : g.gathered.view();
    for (std::size_t i : g.members) {
      parameters_[i].full_ = slice(whole, parameters_[i].flat_offset_, parameters_[i].numel_);
    }
  }
  for (std::size_t k = 0; k < replicated_.size(); ++k) {
    parameters_[replicated_[k]].full_ = replicated_storage_[k].view();
  }
  state_ = UnitState::gathered;
  ++gather_count_;
}

template <class T>
void ShardedUnit<T>::release() {
  if (state_ == UnitState::sharded) {
    return;
  }
  require_state(UnitState::gathered, "release");
  for (ShardedParameter<T>& p : parameters_) {
    p.full_ = View();
  }
  pool_->give_back(packed_full_);
  for (TrackedView<T>& full : direct_full_) {
    pool_->give_back(full);
  }
  for (OwnerGroup& g : owners_) {
    pool_->give_back(g.gathered);
  }
  state_ = UnitState::sharded;
  ++release_count_;
}

template <class T>
typename ShardedUnit<T>::View ShardedUnit<T>::full_gradients() {
  if (!full_grads_.allocated() && full_grad_numel_ > 0) {
    full_grads_ =
        pool_->acquire(MemoryCategory::full_gradients, name_ + ".grads", full_grad_numel_, true);
  }
  return full_grads_.view();
}

template <class T>
void ShardedUnit<T>::reduce_scatter_grads() {
  require(state_ != UnitState::gathering,
          "fsdp: reduce_scatter_grads of unit '" + name_ +
              "' while its gather is in flight; wait for the gather first");
  const int n = group_.size();
  const View grads = full_gradients();  // zeros if this rank wrote none
  std::vector<Work> works;
  std::vector<TrackedView<T>> staging;  // outputs, added into the gradient pieces at the end
  staging.reserve(1 + direct_.size());

  TrackedView<T> packed_send;
  if (!packed_.empty()) {
    // Pack: rank r's chunk holds, for every packed parameter, the gradient of the piece r owns.
    packed_send =
        pool_->acquire(MemoryCategory::communication, name_ + ".rs_send", packed_numel_ * n, true);
    for (std::size_t i : packed_) {
      const ShardedParameter<T>& p = parameters_[i];
      for (int r = 0; r < n; ++r) {
        const std::int64_t count = piece_size(p.numel_, p.padded_shard_, r);
        if (count > 0) {
          std::memcpy(packed_send.view().data() + r * packed_numel_ + p.flat_offset_,
                      grads.data() + p.grad_offset_ + r * p.padded_shard_,
                      static_cast<std::size_t>(count) * sizeof(T));
        }
      }
    }
    staging.push_back(
        pool_->acquire(MemoryCategory::communication, name_ + ".rs_recv", packed_numel_, false));
    works.push_back(
        group_.reduce_scatter_async(packed_send.view(), staging.back().view(), ReduceOp::avg));
  }
  for (std::size_t i : direct_) {
    // The padded full gradient is laid out as N pieces already: reduce-scatter it in place.
    const ShardedParameter<T>& p = parameters_[i];
    staging.push_back(
        pool_->acquire(MemoryCategory::communication, p.name(), p.padded_shard_, false));
    works.push_back(group_.reduce_scatter_async(slice(grads, p.grad_offset_, n * p.padded_shard_),
                                                staging.back().view(), ReduceOp::avg));
  }
  for (OwnerGroup& g : owners_) {
    const View group_grads = slice(grads, parameters_[g.members.front()].grad_offset_, g.numel);
    works.push_back(group_.reduce_async(group_grads.data(), group_grads.data(),
                                        static_cast<std::size_t>(g.numel), dtype_of<T>(),
                                        ReduceOp::avg, g.owner));
  }
  View replicated_grads;
  if (!replicated_.empty()) {
    const std::int64_t first = parameters_[replicated_.front()].grad_offset_;
    replicated_grads = slice(grads, first, full_grad_numel_ - first);
    works.push_back(group_.all_reduce_async(replicated_grads, ReduceOp::avg));
  }
  wait_all(works);

  std::size_t next = 0;
  if (!packed_.empty()) {
    add_into(slice(flat_grad_shard_.view(), 0, packed_numel_), staging[next++].view());
  }
  for (std::size_t i : direct_) {
    const ShardedParameter<T>& p = parameters_[i];
    add_into(slice(flat_grad_shard_.view(), p.flat_offset_, p.padded_shard_),
             staging[next++].view());
  }
  for (OwnerGroup& g : owners_) {
    if (g.owner == group_.rank()) {
      add_into(g.grad_storage.view(),
               slice(grads, parameters_[g.members.front()].grad_offset_, g.numel));
    }
  }
  for (std::size_t k = 0; k < replicated_.size(); ++k) {
    const ShardedParameter<T>& p = parameters_[replicated_[k]];
    add_into(replicated_grads_[k].view(), slice(grads, p.grad_offset_, p.numel_));
  }
  for (TrackedView<T>& buffer : staging) {
    pool_->give_back(buffer);
  }
  pool_->give_back(packed_send);
  pool_->give_back(full_grads_);
  has_grads_ = true;
}

template <class T>
void ShardedUnit<T>::zero_grad() {
  Kokkos::deep_copy(flat_grad_shard_.view(), T(0));
  for (OwnerGroup& g : owners_) {
    if (g.grad_storage.allocated()) {
      Kokkos::deep_copy(g.grad_storage.view(), T(0));
    }
  }
  for (TrackedView<T>& grad : replicated_grads_) {
    Kokkos::deep_copy(grad.view(), T(0));
  }
  has_grads_ = false;
}

template class ShardedParameter<float>;
template class ShardedParameter<double>;
template class ShardedUnit<float>;
template class ShardedUnit<double>;

}  // namespace fsdp
