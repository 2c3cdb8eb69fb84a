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
                            std::shared_ptr<MemoryTracker> tracker)
    : name_(std::move(name)), group_(std::move(group)), tracker_(std::move(tracker)) {
  require(!indices.empty(), "fsdp: unit '" + name_ + "' has no parameters");
  require(plan.world_size() == group_.size(),
          "fsdp: the plan was made for " + std::to_string(plan.world_size()) +
              " ranks but the process group has " + std::to_string(group_.size()));
  const int rank = group_.rank();
  parameters_.reserve(indices.size());
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
        sharded_.push_back(i);
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

  // Sharded: rank r's pieces packed back to back, each padded to ceil(numel / N), so one
  // all_gather of the flat buffers moves the whole unit.
  for (std::size_t i : sharded_) {
    ShardedParameter<T>& p = parameters_[i];
    p.padded_shard_ = plan.padded_shard_numel(p.name());
    p.flat_offset_ = flat_numel_;
    p.shard_offset_ = std::min<std::int64_t>(rank * p.padded_shard_, p.numel_);
    flat_numel_ += p.padded_shard_;
  }
  flat_shard_ =
      TrackedView<T>(tracker_, MemoryCategory::parameter_shards, name_ + ".shards", flat_numel_);
  flat_grad_shard_ = TrackedView<T>(tracker_, MemoryCategory::gradient_shards,
                                    name_ + ".grad_shards", flat_numel_);
  for (std::size_t i : sharded_) {
    ShardedParameter<T>& p = parameters_[i];
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

  // Full gradients: sharded parameters, then each owner group, then replicated ones, so that
  // every collective on them works on one contiguous range.
  for (std::size_t i : sharded_) {
    parameters_[i].grad_offset_ = full_grad_numel_;
    full_grad_numel_ += parameters_[i].numel_;
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
  return full_grad_numel_ * static_cast<std::int64_t>(sizeof(T));
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
  if (flat_numel_ > 0) {
    gather_buffer_ = TrackedView<T>(
        tracker_,
        sharded_.size() == 1 ? MemoryCategory::gathered_parameters : MemoryCategory::communication,
        name_ + ".gather", flat_numel_ * n);
    in_flight_.push_back(group_.all_gather_async(flat_shard_.view(), gather_buffer_.view()));
  }
  for (OwnerGroup& g : owners_) {
    if (g.owner == group_.rank()) {
      in_flight_.push_back(group_.broadcast_async(g.storage.view(), g.owner));
    } else {
      g.gathered = TrackedView<T>(tracker_, MemoryCategory::gathered_parameters,
                                  name_ + ".gathered", g.numel);
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
  if (sharded_.size() == 1) {
    // One parameter: the gathered pieces are already the parameter (padding at the end).
    ShardedParameter<T>& p = parameters_[sharded_.front()];
    p.full_ = slice(gather_buffer_.view(), 0, p.numel_);
  } else if (!sharded_.empty()) {
    // Copy out: rank r's piece of parameter p sits at r * flat_numel_ + p.flat_offset_.
    sharded_full_ = TrackedView<T>(tracker_, MemoryCategory::gathered_parameters, name_ + ".full",
                                   full_grad_numel_);
    const T* from = gather_buffer_.view().data();
    T* to = sharded_full_.view().data();
    for (std::size_t i : sharded_) {
      ShardedParameter<T>& p = parameters_[i];
      for (int r = 0; r < n; ++r) {
        const std::int64_t count = piece_size(p.numel_, p.padded_shard_, r);
        if (count > 0) {
          std::memcpy(to + p.grad_offset_ + r * p.padded_shard_,
                      from + r * flat_numel_ + p.flat_offset_,
                      static_cast<std::size_t>(count) * sizeof(T));
        }
      }
      p.full_ = slice(sharded_full_.view(), p.grad_offset_, p.numel_);
    }
    gather_buffer_.reset();
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
  gather_buffer_.reset();
  sharded_full_.reset();
  for (OwnerGroup& g : owners_) {
    g.gathered.reset();
  }
  state_ = UnitState::sharded;
  ++release_count_;
}

template <class T>
typename ShardedUnit<T>::View ShardedUnit<T>::full_gradients() {
  if (!full_grads_.allocated() && full_grad_numel_ > 0) {
    full_grads_ = TrackedView<T>(tracker_, MemoryCategory::full_gradients, name_ + ".grads",
                                 full_grad_numel_);
  }
  return full_grads_.view();
}

template <class T>
void ShardedUnit<T>::reduce_scatter_grads() {
  require(state_ != UnitState::gathering, "fsdp: reduce_scatter_grads of unit '" + name_ +
                                              "' while its gather is in flight; "
                                              "wait for the gather first");
  const int n = group_.size();
  const View grads = full_gradients();  // zeros if this rank wrote none

  if (!sharded_.empty()) {
    // Pack: rank r's chunk holds, for every parameter, the gradient of the piece r owns.
    TrackedView<T> send(tracker_, MemoryCategory::communication, name_ + ".rs_send",
                        flat_numel_ * n);
    TrackedView<T> recv(tracker_, MemoryCategory::communication, name_ + ".rs_recv", flat_numel_);
    for (std::size_t i : sharded_) {
      const ShardedParameter<T>& p = parameters_[i];
      for (int r = 0; r < n; ++r) {
        const std::int64_t count = piece_size(p.numel_, p.padded_shard_, r);
        if (count > 0) {
          std::memcpy(send.view().data() + r * flat_numel_ + p.flat_offset_,
                      grads.data() + p.grad_offset_ + r * p.padded_shard_,
                      static_cast<std::size_t>(count) * sizeof(T));
        }
      }
    }
    group_.reduce_scatter(send.view(), recv.view(), ReduceOp::avg);
    add_into(flat_grad_shard_.view(), recv.view());
  }
  for (OwnerGroup& g : owners_) {
    const View group_grads = slice(grads, parameters_[g.members.front()].grad_offset_, g.numel);
    group_.reduce(group_grads.data(), group_grads.data(), static_cast<std::size_t>(g.numel),
                  dtype_of<T>(), ReduceOp::avg, g.owner);
    if (g.owner == group_.rank()) {
      add_into(g.grad_storage.view(), group_grads);
    }
  }
  if (!replicated_.empty()) {
    const ShardedParameter<T>& first = parameters_[replicated_.front()];
    const View replicated_grads =
        slice(grads, first.grad_offset_, full_grad_numel_ - first.grad_offset_);
    group_.all_reduce(replicated_grads, ReduceOp::avg);
    for (std::size_t k = 0; k < replicated_.size(); ++k) {
      const ShardedParameter<T>& p = parameters_[replicated_[k]];
      add_into(replicated_grads_[k].view(), slice(grads, p.grad_offset_, p.numel_));
    }
  }
  full_grads_.reset();
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
