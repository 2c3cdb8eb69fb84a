#include "fsdp/unit/sharded_unit.hpp"
#include "fsdp/core/half_conversion.hpp"
#include "fsdp/core/text.hpp"
#include "units_configuration.hpp"

#include <utility>

namespace fsdp {
namespace {

template <class View>
View slice(const View& view, std::int64_t offset, std::int64_t count) {
  return Kokkos::subview(view, std::make_pair(static_cast<std::size_t>(offset),
                                              static_cast<std::size_t>(offset + count)));
}

// target += source over source.size() elements, a kernel on space (not fenced: the caller fences
// once after all of them). Target: a DeviceView<T> or Bfloat16Values<T>.
template <class Values, class T>
void add_values(const ExecutionSpace& space, const Values& target, const DeviceView<T>& source) {
  Kokkos::parallel_for(
      "fsdp::add_into", device_range(space, 0, static_cast<std::int64_t>(source.size())),
      KOKKOS_LAMBDA(std::size_t i) { target(i) += source(i); });
}

template <class Values, class T>
void copy_values(const ExecutionSpace& space, const Values& target, const DeviceView<T>& source) {
  Kokkos::parallel_for(
      "fsdp::copy_into", device_range(space, 0, static_cast<std::int64_t>(source.size())),
      KOKKOS_LAMBDA(std::size_t i) { target(i) = source(i); });
}

// A kept gradient (in T or bfloat16) += source; = source.
template <class T>
void add_into(const ExecutionSpace& space, const GradientPiece<T>& target,
              const DeviceView<T>& source) {
  target.visit([&](const auto& values) { add_values(space, values, source); });
}
template <class T>
void copy_into(const ExecutionSpace& space, const GradientPiece<T>& target,
               const DeviceView<T>& source) {
  target.visit([&](const auto& values) { copy_values(space, values, source); });
}

// The copies between rank-major communication buffers and whole parameters (UnitLayout::unpack
// and ::pack): one asynchronous copy per segment on space, wherever the buffers live.
template <class T>
void copy_segments(const ExecutionSpace& space, const std::vector<CopySegment>& segments,
                   const DeviceView<T>& from, const DeviceView<T>& to) {
  for (const CopySegment& s : segments) {
    Kokkos::deep_copy(space, slice(to, s.to, s.count), slice(from, s.from, s.count));
  }
}

// A 16-bit buffer (kept as raw bits) seen as bfloat16 or float16 for the collectives.
template <class H>
Kokkos::View<H*, MemorySpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>> as_half(
    const DeviceView<std::uint16_t>& bits) {
  static_assert(sizeof(H) == sizeof(std::uint16_t), "16-bit storage types only");
  return Kokkos::View<H*, MemorySpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>(
      reinterpret_cast<H*>(bits.data()), bits.size());
}

// to(i) = the 16-bit rounding of from(i), for i < from.size(): a kernel on space, not fenced.
template <class H, class T>
void narrow_into(const ExecutionSpace& space, const DeviceView<T>& from,
                 const DeviceView<std::uint16_t>& to) {
  const auto out = as_half<H>(to);
  Kokkos::parallel_for(
      "fsdp::narrow", device_range(space, 0, static_cast<std::int64_t>(from.size())),
      KOKKOS_LAMBDA(std::size_t i) { out(i) = half::narrow(static_cast<float>(from(i)), H{}); });
}

// to(i) = from(i) widened, for i < to.size().
template <class H, class T>
void widen_into(const ExecutionSpace& space, const DeviceView<std::uint16_t>& from,
                const DeviceView<T>& to) {
  const auto in = as_half<H>(from);
  Kokkos::parallel_for(
      "fsdp::widen", device_range(space, 0, static_cast<std::int64_t>(to.size())),
      KOKKOS_LAMBDA(std::size_t i) { to(i) = static_cast<T>(half::widen(in(i))); });
}

// count elements of a kept gradient buffer from offset, as a GradientPiece.
template <class Kept>
auto piece_of(const Kept& kept, std::int64_t offset, std::int64_t count) {
  using T = typename std::decay_t<decltype(kept.values.view())>::value_type;
  return kept.bfloat16.allocated()
             ? GradientPiece<T>(Bfloat16Values<T>(slice(kept.bfloat16.view(), offset, count)))
             : GradientPiece<T>(slice(kept.values.view(), offset, count));
}

template <class Kept>
auto whole_piece(const Kept& kept) {
  const auto count = static_cast<std::int64_t>(
      kept.bfloat16.allocated() ? kept.bfloat16.view().size() : kept.values.view().size());
  return piece_of(kept, 0, count);
}

// Zeroes a kept gradient buffer (bfloat16 +0 is all bits zero), on space.
template <class Kept>
void zero_kept(const ExecutionSpace& space, Kept& kept) {
  if (kept.values.allocated()) {
    Kokkos::deep_copy(space, kept.values.view(), 0);
  }
  if (kept.bfloat16.allocated()) {
    Kokkos::deep_copy(space, kept.bfloat16.view(), std::uint16_t{0});
  }
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
    throw Error("full() of parameter '" + info_.name + "' while unit '" + unit_->name() + "' is " +
                name_of(unit_->state()) +
                "; gather the unit (or enter its scope) before reading whole parameters");
  }
  if (full_.data() == nullptr && half_.data() != nullptr) {
    unit_->widen(const_cast<ShardedParameter&>(*this));
  }
  return full_;
}

template <class T>
DeviceView<std::uint16_t> ShardedParameter<T>::half() const {
  if (unit_->state() != UnitState::gathered) {
    throw Error("half() of parameter '" + info_.name + "' while unit '" + unit_->name() + "' is " +
                name_of(unit_->state()) +
                "; gather the unit (or enter its scope) before reading whole parameters");
  }
  if (!is_16_bit(unit_->param_dtype())) {
    throw Error(ErrorKind::state,
                "half() of parameter '" + info_.name + "': unit '" + unit_->name() +
                    "' gathers its parameters in " + name_of(dtype_of<T>()) +
                    ", its own dtype (no 16-bit UnitOptions::param_dtype); read them with full(), "
                    "or give a float model param_dtype bf16 or fp16");
  }
  return half_;
}

template <class T>
typename ShardedParameter<T>::View ShardedParameter<T>::grad() {
  if (unit_->state() != UnitState::gathered) {
    throw Error("gradient of parameter '" + info_.name + "' written while unit '" + unit_->name() +
                "' is " + name_of(unit_->state()) +
                "; gradients are written while the unit is gathered (in its backward scope)");
  }
  if (!trainable()) {
    throw Error(ErrorKind::state, "gradient of parameter '" + info_.name +
                                      "', which is frozen (trainable false): it has no gradient; "
                                      "leave it out of the backward's gradients");
  }
  return slice(unit_->full_gradients(), grad_layout_.grad_offset, numel());
}

template <class T>
const typename ShardedParameter<T>::View& ShardedParameter<T>::grad_shard() const {
  if (grad_piece_.in_bfloat16()) {
    throw Error(ErrorKind::state, "grad_shard() of parameter '" + info_.name + "': unit '" +
                                      unit_->name() +
                                      "' keeps its gradients in bfloat16 (UnitOptions::grad_dtype "
                                      "bf16); read them with grad_piece()");
  }
  return grad_piece_.values();
}

template <class T>
TrackedView<T> ShardedParameter<T>::make_optimizer_state(const std::string& label,
                                                         bool zero) const {
  return TrackedView<T>(unit_->tracker_, MemoryCategory::optimizer_state, info_.name + "." + label,
                        shard_size(), zero);
}

// ---- ShardedUnit ----

template <class T>
ShardedUnit<T>::ShardedUnit(std::string name, ProcessGroup group, const ShardingPlan& plan,
                            const std::vector<std::size_t>& indices,
                            std::shared_ptr<MemoryTracker> tracker,
                            std::shared_ptr<BufferPool<T>> pool, const UnitOptions& options)
    : ShardedUnit(std::move(name), std::move(group), plan, indices, std::move(tracker),
                  std::move(pool), options, true) {}

template <class T>
ShardedUnit<T>::ShardedUnit(std::string name, ProcessGroup group, const ShardingPlan& plan,
                            const std::vector<std::size_t>& indices,
                            std::shared_ptr<MemoryTracker> tracker,
                            std::shared_ptr<BufferPool<T>> pool, const UnitOptions& options,
                            bool check_agreement)
    : name_(std::move(name)),
      group_(std::move(group)),
      gather_group_(group_),
      mode_(options.mode),
      replicas_(options.replicas),
      replica_reductions_(options.replicas),
      param_dtype_(options.param_dtype),
      reduce_dtype_(options.reduce_dtype),
      grad_dtype_(options.grad_dtype),
      tracker_(std::move(tracker)),
      pool_(std::move(pool)) {
  // First, so that ranks given different units fail together instead of some failing below.
  if (check_agreement) {
    require_same_configuration(
        detail::units_configuration(Configuration("unit").text("name", name_), dtype_of<T>(), plan,
                                    indices, options),
        group_, replicas());
  }
  require(!indices.empty(), "unit '" + name_ + "' has no parameters");
  require(plan.world_size() == group_.size(),
          "the plan was made for " + std::to_string(plan.world_size()) +
              " ranks but the process group has " + std::to_string(group_.size()));
  for (std::size_t index : indices) {
    const ParameterInfo& info = plan.parameters().at(index);
    require(info.dtype == dtype_of<T>(),
            "parameter " + describe(info) + " cannot train in a model of " +
                name_of(dtype_of<T>()) + "; give every parameter the model's dtype");
  }
  for (const auto& [dtype, option] : {std::make_pair(param_dtype_, "param_dtype"),
                                      std::make_pair(reduce_dtype_, "reduce_dtype")}) {
    // f32 is "no cast" (the default) for float and double models alike.
    require(dtype == DType::f32 || dtype == dtype_of<T>() || is_16_bit(dtype),
            std::string("mixed precision ") + option + " " + name_of(dtype) + " for a model of " +
                name_of(dtype_of<T>()) + "; give bf16, fp16, or fp32 for no cast");
    if (is_16_bit(dtype)) {
      require(dtype_of<T>() == DType::f32,
              std::string("mixed precision (") + option + " " + name_of(dtype) +
                  ") keeps fp32 master weights: use a float model, not " + name_of(dtype_of<T>()));
    }
  }
  require(grad_dtype_ == DType::f32 || grad_dtype_ == dtype_of<T>() ||
              (grad_dtype_ == DType::bf16 && dtype_of<T>() == DType::f32),
          [&] {
            return "grad_dtype " + std::string(name_of(grad_dtype_)) + " for a model of " +
                   name_of(dtype_of<T>()) +
                   (grad_dtype_ == DType::f16
                        ? ": unscaling loss-scaled gradients would take them below float16's "
                          "range; keep them in bf16 (float's range) or fp32"
                        : "; give bf16 (a float model) or fp32 for no cast");
          });
  layout_ = make_unit_layout(plan, indices, group_.rank(), static_cast<std::int64_t>(sizeof(T)),
                             options.direct_gather_bytes);
  parameters_.reserve(indices.size());
  std::vector<std::size_t> trained_indices;
  for (const ParameterLayout& p : layout_.parameters) {
    const ParameterInfo& info = plan.parameters()[p.plan_index];
    if (info.trainable) {
      trained_.push_back(parameters_.size());
      trained_indices.push_back(p.plan_index);
    }
    index_[info.name] = parameters_.size();
    parameters_.push_back(ShardedParameter<T>(this, info, p));
  }
  // The gradients are those of the unit made of its trainable parameters alone: frozen ones
  // take no place in any gradient buffer and no part in any reduction.
  grad_layout_ =
      trained_indices.size() == indices.size()
          ? layout_
          : make_unit_layout(plan, trained_indices, group_.rank(),
                             static_cast<std::int64_t>(sizeof(T)), options.direct_gather_bytes);
  for (std::size_t k = 0; k < trained_.size(); ++k) {
    ShardedParameter<T>& p = parameters_[trained_[k]];
    p.grad_layout_ = grad_layout_.parameters[k];
    if (keeps_bfloat16_gradients()) {  // empty where another rank owns the whole parameter
      p.grad_piece_ = GradientPiece<T>(Bfloat16Values<T>(DeviceView<std::uint16_t>()));
    }
  }

  // Sharded: every piece a view of the flat buffers (the empty trailing ones too), unless the
  // mode keeps whole parameters (gradients) resident: then pieces are views into those.
  const bool resident_grads = keeps_gradients();
  if (!keeps_parameters()) {
    // adopt_pieces is the one place that points the pieces into the flat buffer (a load's too).
    adopt_pieces(TrackedView<T>(tracker_, MemoryCategory::parameter_shards, name_ + ".shards",
                                layout_.flat_numel));
  }
  if (!resident_grads) {
    flat_grad_shard_ = keep_gradients(MemoryCategory::gradient_shards, name_ + ".grad_shards",
                                      grad_layout_.flat_numel);
    for (const auto* kind : {&grad_layout_.packed, &grad_layout_.direct}) {
      for (std::size_t i : *kind) {
        ShardedParameter<T>& p = grad_parameter(i);
        p.grad_piece_ =
            piece_of(flat_grad_shard_, p.grad_layout_.flat_offset, p.grad_layout_.piece.size);
      }
    }
  }

  // Whole: each owner keeps its parameters back to back, broadcast in one piece.
  owners_.resize(layout_.owners.size());
  for (std::size_t k = 0; k < owners_.size(); ++k) {
    const OwnerGroupLayout& g = layout_.owners[k];
    if (g.owner != group_.rank()) {
      continue;
    }
    owners_[k].storage =
        TrackedView<T>(tracker_, MemoryCategory::parameter_shards, name_ + ".whole", g.numel);
    for (std::size_t i : g.members) {
      ShardedParameter<T>& p = parameters_[i];
      p.shard_ = slice(owners_[k].storage.view(), p.layout_.flat_offset, p.numel());
    }
  }
  owner_grads_.resize(grad_layout_.owners.size());
  for (std::size_t k = 0; k < owner_grads_.size() && !resident_grads; ++k) {
    const OwnerGroupLayout& g = grad_layout_.owners[k];
    if (g.owner != group_.rank()) {
      continue;
    }
    owner_grads_[k] =
        keep_gradients(MemoryCategory::gradient_shards, name_ + ".whole_grads", g.numel);
    for (std::size_t i : g.members) {
      ShardedParameter<T>& p = grad_parameter(i);
      p.grad_piece_ = piece_of(owner_grads_[k], p.grad_layout_.flat_offset, p.numel());
    }
  }

  // Replicated: every rank holds everything.
  for (std::size_t i : layout_.replicated) {
    ShardedParameter<T>& p = parameters_[i];
    replicated_storage_.emplace_back(tracker_, MemoryCategory::parameter_shards, p.name(),
                                     p.numel());
    p.shard_ = replicated_storage_.back().view();
  }
  for (std::size_t i : grad_layout_.replicated) {
    ShardedParameter<T>& p = grad_parameter(i);
    if (!resident_grads) {
      replicated_grads_.push_back(
          keep_gradients(MemoryCategory::gradient_shards, p.name() + ".grad", p.numel()));
      p.grad_piece_ = whole_piece(replicated_grads_.back());
    }
  }
  direct_full_.resize(layout_.direct.size());
  if (keeps_parameters()) {
    make_resident_parameters();
  }
  if (resident_grads) {
    make_resident_gradients();
  }
}

template <class T>
bool ShardedUnit<T>::stays_gathered() const {
  // What stays whole is what the mode does not keep in pieces (sharded_state, the one statement
  // of the rule); no_shard keeps nothing in pieces and gets a replicated plan instead.
  const ShardedState pieces = sharded_state(mode_);
  return pieces.optimizer_state && !pieces.parameters;
}

template <class T>
bool ShardedUnit<T>::keeps_parameters() const {
  return stays_gathered() && !gathers_in_half();
}

template <class T>
bool ShardedUnit<T>::keeps_gradients() const {
  const ShardedState pieces = sharded_state(mode_);
  return pieces.optimizer_state && !pieces.gradients;
}

// The whole parameters allocated once; each rank's pieces are views into them, so a piece is
// never stored twice: the memory per rank is the ZeRO paper's (parameters whole, optimizer state
// in pieces).
template <class T>
void ShardedUnit<T>::make_resident_parameters() {
  const int n = group_.size();
  if (!layout_.packed.empty()) {
    packed_full_ = TrackedView<T>(tracker_, MemoryCategory::resident_parameters,
                                  name_ + ".packed_full", layout_.packed_full_numel);
    for (std::size_t i : layout_.packed) {
      ShardedParameter<T>& p = parameters_[i];
      const ShardRange& piece = p.layout_.piece;
      p.shard_ = slice(packed_full_.view(), p.layout_.full_offset + piece.offset, piece.size);
    }
  }
  for (std::size_t k = 0; k < layout_.direct.size(); ++k) {
    ShardedParameter<T>& p = parameters_[layout_.direct[k]];
    const ShardRange& piece = p.layout_.piece;
    direct_full_[k] =
        TrackedView<T>(tracker_, MemoryCategory::resident_parameters, p.name(), piece.padded * n);
    p.shard_ = slice(direct_full_[k].view(), piece.offset, piece.size);
  }
  for (std::size_t k = 0; k < owners_.size(); ++k) {
    const OwnerGroupLayout& g = layout_.owners[k];
    if (g.owner != group_.rank()) {
      owners_[k].gathered =
          TrackedView<T>(tracker_, MemoryCategory::resident_parameters, name_ + ".whole", g.numel);
    }
  }
}

// shard_optimizer: the whole gradients allocated once, the gradient pieces views into them.
template <class T>
void ShardedUnit<T>::make_resident_gradients() {
  // Every rank's gradient piece sits where its reduce-scatter chunk lands in the whole gradient:
  // a packed or direct parameter's piece at its element offset, an owner's whole parameter and a
  // replicated one where their gradient starts.
  if (writes_resident_gradients()) {  // in T: what grad() writes into
    full_grads_ = TrackedView<T>(tracker_, MemoryCategory::resident_gradients, name_ + ".grads",
                                 grad_layout_.full_grad_numel);
  } else {
    resident_grads_ = keep_gradients(MemoryCategory::resident_gradients, name_ + ".grads",
                                     grad_layout_.full_grad_numel);
  }
  for (std::size_t i : trained_) {
    ShardedParameter<T>& p = parameters_[i];
    const ShardRange& piece = p.grad_layout_.piece;
    const std::int64_t offset =
        p.grad_layout_.grad_offset + (p.placement() == Placement::sharded ? piece.offset : 0);
    p.grad_piece_ = writes_resident_gradients()
                        ? GradientPiece<T>(slice(full_grads_.view(), offset, piece.size))
                        : piece_of(resident_grads_, offset, piece.size);
  }
}

template <class T>
typename ShardedUnit<T>::KeptGradients ShardedUnit<T>::keep_gradients(MemoryCategory category,
                                                                      const std::string& label,
                                                                      std::int64_t count) {
  KeptGradients kept;
  if (keeps_bfloat16_gradients()) {
    kept.bfloat16 = TrackedView<std::uint16_t>(tracker_, category, label, count);
  } else {
    kept.values = TrackedView<T>(tracker_, category, label, count);
  }
  return kept;
}

template <class T>
ShardedUnit<T>::~ShardedUnit() {
  // Transfers in flight write into buffers about to be freed: let them finish first.
  release_reduction();
  for (Work& work : in_flight_) {
    try {
      work.wait();
    } catch (const std::exception&) {
      // Reported by Work; a destructor never throws.
    }
  }
}

template <class T>
ShardedParameter<T>* ShardedUnit<T>::find_parameter(const std::string& name) {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &parameters_[it->second];
}

template <class T>
ShardedParameter<T>& ShardedUnit<T>::parameter(const std::string& name) {
  if (ShardedParameter<T>* found = find_parameter(name)) {
    return *found;
  }
  std::vector<std::string> names;
  for (const auto& p : parameters_) {
    names.push_back(p.name());
  }
  throw Error(ErrorKind::unknown_name,
              "unit '" + name_ + "' has no parameter '" + name + "'; it has " + join(names));
}

template <class T>
std::int64_t ShardedUnit<T>::full_bytes() const {
  std::int64_t numel = 0;
  for (const ShardedParameter<T>& p : parameters_) {
    numel += p.numel();
  }
  return numel * static_cast<std::int64_t>(sizeof(T));
}

template <class T>
void ShardedUnit<T>::require_state(UnitState expected, const char* operation) const {
  if (state_ != expected) {
    throw Error(std::string(operation) + " of unit '" + name_ + "' while it is " + name_of(state_) +
                "; it must be " + name_of(expected) +
                (state_ == UnitState::gathered && expected == UnitState::sharded
                     ? " (release it before gathering again)"
                     : ""));
  }
}

template <class T>
void ShardedUnit<T>::gather_async() {
  require_state(UnitState::sharded, "gather");
  try {
    start_gather();
  } catch (...) {
    abandon_gather();
    throw;
  }
  state_ = UnitState::gathering;
}

template <class T>
void ShardedUnit<T>::gather_over(ProcessGroup gathers) {
  require(gathers.size() == group_.size() && gathers.rank() == group_.rank(),
          "gather_over of unit '" + name_ + "': the group must have the ranks of the unit's own (" +
              std::to_string(group_.size()) + " ranks, this one " + std::to_string(group_.rank()) +
              "), got " + std::to_string(gathers.size()) + " ranks, this one " +
              std::to_string(gathers.rank()));
  gather_group_ = std::move(gathers);
}

// The collectives start_gather issues, in its order: the same for every way of gathering
// (start_gather, start_half_gather, start_resident_gather).
template <class T>
void ShardedUnit<T>::expect_gather() {
  require_state(UnitState::sharded, "expect_gather");
  const DType dtype = gathers_in_half() && !keeps_parameters() ? param_dtype_ : dtype_of<T>();
  if (!layout_.packed.empty()) {
    gather_group_.expect_all_gather(static_cast<std::size_t>(layout_.packed_numel), dtype);
  }
  for (std::size_t i : layout_.direct) {
    gather_group_.expect_all_gather(static_cast<std::size_t>(parameters_[i].layout_.piece.padded),
                                    dtype);
  }
  for (const OwnerGroupLayout& g : layout_.owners) {
    gather_group_.expect_broadcast(static_cast<std::size_t>(g.numel), dtype, g.owner);
  }
}

template <class T>
void ShardedUnit<T>::start_gather() {
  if (keeps_parameters()) {
    start_resident_gather();
    return;
  }
  if (gathers_in_half()) {
    param_dtype_ == DType::bf16 ? start_half_gather<bfloat16>() : start_half_gather<float16>();
    return;
  }
  const int n = group_.size();
  // Every buffer a collective fills completely: no zero fill.
  if (!layout_.packed.empty()) {
    packed_gather_ = pool_->acquire(MemoryCategory::communication, name_ + ".packed_gather",
                                    layout_.packed_numel * n, false);
    in_flight_.push_back(gather_group_.all_gather_async(
        space_, slice(flat_shard_.view(), 0, layout_.packed_numel), packed_gather_.view()));
  }
  for (std::size_t k = 0; k < layout_.direct.size(); ++k) {
    const ShardedParameter<T>& p = parameters_[layout_.direct[k]];
    const ShardRange& piece = p.layout_.piece;
    direct_full_[k] =
        pool_->acquire(MemoryCategory::gathered_parameters, p.name(), piece.padded * n, false);
    in_flight_.push_back(gather_group_.all_gather_async(
        space_, slice(flat_shard_.view(), p.layout_.flat_offset, piece.padded),
        direct_full_[k].view()));
  }
  for (std::size_t k = 0; k < owners_.size(); ++k) {
    const OwnerGroupLayout& g = layout_.owners[k];
    OwnerBuffers& buffers = owners_[k];
    if (g.owner == group_.rank()) {
      in_flight_.push_back(gather_group_.broadcast_async(space_, buffers.storage.view(), g.owner));
    } else {
      buffers.gathered =
          pool_->acquire(MemoryCategory::gathered_parameters, name_ + ".whole", g.numel, false);
      in_flight_.push_back(gather_group_.broadcast_async(space_, buffers.gathered.view(), g.owner));
    }
  }
}

template <class T>
bool ShardedUnit<T>::gathers_in_half() const {
  return is_16_bit(param_dtype_);
}

template <class T>
bool ShardedUnit<T>::reduces_in_half() const {
  return is_16_bit(reduce_dtype_);
}

template <class T>
DeviceView<std::uint16_t> ShardedUnit<T>::half_buffer(const std::string& label,
                                                      std::int64_t count) {
  half_buffers_.emplace_back(tracker_, MemoryCategory::communication, name_ + "." + label, count,
                             false);
  return half_buffers_.back().view();
}

template <class T>
DeviceView<std::uint16_t> ShardedUnit<T>::reduction_half_buffer(const std::string& label,
                                                                std::int64_t count) {
  reduction_.half_buffers.emplace_back(tracker_, MemoryCategory::communication, name_ + "." + label,
                                       count, false);
  return reduction_.half_buffers.back().view();
}

// Mixed precision: every piece is rounded to 16 bits while it is copied into the send buffer, and
// the collectives move 16-bit elements; finish_half_gather widens them into the whole parameters.
// Owners broadcast 16 bits too and compute with the widened copy like everyone else, so every rank
// computes with the same values.
template <class T>
template <class H>
void ShardedUnit<T>::start_half_gather() {
  const int n = group_.size();
  half_buffers_.clear();
  if (!layout_.packed.empty()) {
    const auto send = half_buffer("packed_send16", layout_.packed_numel);
    narrow_into<H>(space_, slice(flat_shard_.view(), 0, layout_.packed_numel), send);
    const auto recv = half_buffer("packed_gather16", layout_.packed_numel * n);
    in_flight_.push_back(
        gather_group_.all_gather_async(space_, as_half<H>(send), as_half<H>(recv)));
  }
  for (std::size_t i : layout_.direct) {
    const ShardedParameter<T>& p = parameters_[i];
    const std::int64_t padded = p.layout_.piece.padded;
    const auto send = half_buffer(p.name() + ".send16", padded);
    narrow_into<H>(space_, slice(flat_shard_.view(), p.layout_.flat_offset, padded), send);
    const auto recv = half_buffer(p.name() + ".gather16", padded * n);
    in_flight_.push_back(
        gather_group_.all_gather_async(space_, as_half<H>(send), as_half<H>(recv)));
  }
  for (std::size_t k = 0; k < owners_.size(); ++k) {
    const OwnerGroupLayout& g = layout_.owners[k];
    const auto whole = half_buffer("whole16", g.numel);
    if (g.owner == group_.rank()) {
      narrow_into<H>(space_, owners_[k].storage.view(), whole);
    }
    in_flight_.push_back(gather_group_.broadcast_async(space_, as_half<H>(whole), g.owner));
  }
}

// The gathered parameters stay 16-bit: a direct parameter in its own all-gather output (its
// padding past numel() out of sight), an owner's in the broadcast buffer, the packed ones copied
// out of their rank-major all-gather output into one buffer, a replicated one rounded into a copy.
// full() widens a parameter to T when it is first read (widen()).
template <class T>
template <class H>
void ShardedUnit<T>::finish_half_gather() {
  std::vector<TrackedView<std::uint16_t>> buffers = std::move(half_buffers_);
  half_buffers_.clear();
  gathered_half_.clear();
  // What a collective received becomes gathered parameters; its send buffer is done.
  const auto keep = [&](std::size_t position) {
    buffers[position].recategorize(MemoryCategory::gathered_parameters);
    gathered_half_.push_back(std::move(buffers[position]));
    return gathered_half_.back().view();
  };
  std::size_t next = 0;
  if (!layout_.packed.empty()) {
    const auto recv = buffers[next + 1].view();
    next += 2;
    gathered_half_.emplace_back(tracker_, MemoryCategory::gathered_parameters,
                                name_ + ".packed_full16", layout_.packed_full_numel, false);
    const auto whole = gathered_half_.back().view();
    copy_segments(space_, layout_.unpack, recv, whole);
    for (std::size_t i : layout_.packed) {
      ShardedParameter<T>& p = parameters_[i];
      p.half_ = slice(whole, p.layout_.full_offset, p.numel());
    }
  }
  for (std::size_t i : layout_.direct) {
    ShardedParameter<T>& p = parameters_[i];
    p.half_ = slice(keep(next + 1), 0, p.numel());
    next += 2;
  }
  for (const OwnerGroupLayout& g : layout_.owners) {
    const auto whole = keep(next++);
    for (std::size_t i : g.members) {
      ShardedParameter<T>& p = parameters_[i];
      p.half_ = slice(whole, p.layout_.flat_offset, p.numel());
    }
  }
  for (std::size_t k = 0; k < layout_.replicated.size(); ++k) {
    ShardedParameter<T>& p = parameters_[layout_.replicated[k]];
    gathered_half_.emplace_back(tracker_, MemoryCategory::gathered_parameters, p.name() + "16",
                                p.numel(), false);
    narrow_into<H>(space_, replicated_storage_[k].view(), gathered_half_.back().view());
    p.half_ = gathered_half_.back().view();
  }
  space_.fence();  // the 16-bit parameters are in place, and the send buffers may go
}

template <class T>
void ShardedUnit<T>::widen(ShardedParameter<T>& p) {
  p.widened_ =
      pool_->acquire(MemoryCategory::gathered_parameters, p.name() + ".widened", p.numel(), false);
  param_dtype_ == DType::bf16 ? widen_into<bfloat16>(space_, p.half_, p.widened_.view())
                              : widen_into<float16>(space_, p.half_, p.widened_.view());
  space_.fence();
  p.full_ = p.widened_.view();
}

template <class T>
void ShardedUnit<T>::drop_widened() {
  if (!gathers_in_half()) {
    return;
  }
  for (ShardedParameter<T>& p : parameters_) {
    pool_->give_back(p.widened_);
    p.full_ = View();
  }
}

// Refreshes the resident whole parameters from every rank's piece (which the optimizer may have
// changed): the pieces are copied out to send buffers, since a collective may not read and write
// one buffer, and gathered straight into the resident buffers.
template <class T>
void ShardedUnit<T>::start_resident_gather() {
  const int n = group_.size();
  if (!layout_.packed.empty()) {
    gather_sends_.push_back(pool_->acquire(MemoryCategory::communication, name_ + ".packed_send",
                                           layout_.packed_numel, false));
    const View send = gather_sends_.back().view();
    for (std::size_t i : layout_.packed) {
      const ShardedParameter<T>& p = parameters_[i];
      Kokkos::deep_copy(space_, slice(send, p.layout_.flat_offset, p.shard_size()), p.shard_);
    }
    packed_gather_ = pool_->acquire(MemoryCategory::communication, name_ + ".packed_gather",
                                    layout_.packed_numel * n, false);
    in_flight_.push_back(gather_group_.all_gather_async(space_, send, packed_gather_.view()));
  }
  for (std::size_t k = 0; k < layout_.direct.size(); ++k) {
    const ShardedParameter<T>& p = parameters_[layout_.direct[k]];
    gather_sends_.push_back(pool_->acquire(MemoryCategory::communication, p.name() + ".send",
                                           p.layout_.piece.padded, false));
    const View send = gather_sends_.back().view();
    Kokkos::deep_copy(space_, slice(send, 0, p.shard_size()), p.shard_);
    in_flight_.push_back(gather_group_.all_gather_async(space_, send, direct_full_[k].view()));
  }
  for (std::size_t k = 0; k < owners_.size(); ++k) {
    const OwnerGroupLayout& g = layout_.owners[k];
    OwnerBuffers& buffers = owners_[k];
    in_flight_.push_back(gather_group_.broadcast_async(
        space_, g.owner == group_.rank() ? buffers.storage.view() : buffers.gathered.view(),
        g.owner));
  }
}

// A collective of a gather refused (ranks that disagree, a bad argument: when the gather starts
// or, as the signature check finishes later, when it is tested or waited for) fails on every rank
// at the same collective, so the others complete everywhere: wait for them, return the buffers,
// and leave the unit sharded and usable.
template <class T>
void ShardedUnit<T>::abandon_gather() {
  for (Work& work : in_flight_) {
    try {
      work.wait();
    } catch (const std::exception&) {
      // The first failure is the one the caller sees.
    }
  }
  in_flight_.clear();
  half_buffers_.clear();
  pool_->give_back(packed_gather_);
  for (TrackedView<T>& send : gather_sends_) {
    pool_->give_back(send);
  }
  gather_sends_.clear();
  give_back_whole_parameters();
  state_ = UnitState::sharded;
}

// The whole parameters go back to the pool, unless the mode keeps them resident.
template <class T>
void ShardedUnit<T>::give_back_whole_parameters() {
  if (keeps_parameters()) {
    return;
  }
  pool_->give_back(packed_full_);
  for (TrackedView<T>& full : direct_full_) {
    pool_->give_back(full);
  }
  for (OwnerBuffers& buffers : owners_) {
    pool_->give_back(buffers.gathered);
  }
  drop_widened();
  gathered_half_.clear();
}

template <class T>
bool ShardedUnit<T>::test_gather() {
  if (state_ != UnitState::gathering) {
    return state_ == UnitState::gathered;
  }
  bool done = true;
  try {
    for (Work& work : in_flight_) {
      done = work.test() && done;
    }
  } catch (...) {
    abandon_gather();
    throw;
  }
  if (done) {
    finish_gather();
  }
  return done;
}

template <class T>
void ShardedUnit<T>::wait_gather() {
  require_state(UnitState::gathering, "wait_gather");
  try {
    wait_all(in_flight_);
  } catch (...) {
    abandon_gather();
    throw;
  }
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
  if (gathers_in_half()) {
    param_dtype_ == DType::bf16 ? finish_half_gather<bfloat16>() : finish_half_gather<float16>();
    state_ = UnitState::gathered;
    ++gather_count_;
    return;
  }
  if (!layout_.packed.empty()) {
    // Copy out of the rank-major gather buffer into whole parameters.
    if (!keeps_parameters()) {
      packed_full_ = pool_->acquire(MemoryCategory::gathered_parameters, name_ + ".packed_full",
                                    layout_.packed_full_numel, false);
    }
    copy_segments(space_, layout_.unpack, packed_gather_.view(), packed_full_.view());
    space_.fence();  // the pool may hand packed_gather_ to a collective next
    for (std::size_t i : layout_.packed) {
      ShardedParameter<T>& p = parameters_[i];
      p.full_ = slice(packed_full_.view(), p.layout_.full_offset, p.numel());
    }
    pool_->give_back(packed_gather_);
  }
  for (TrackedView<T>& send : gather_sends_) {
    pool_->give_back(send);  // the all_gathers that read them are complete
  }
  gather_sends_.clear();
  for (std::size_t k = 0; k < layout_.direct.size(); ++k) {
    ShardedParameter<T>& p = parameters_[layout_.direct[k]];
    p.full_ = slice(direct_full_[k].view(), 0, p.numel());  // the padding stays out of sight
  }
  for (std::size_t k = 0; k < owners_.size(); ++k) {
    const OwnerGroupLayout& g = layout_.owners[k];
    const View& whole =
        g.owner == group_.rank() ? owners_[k].storage.view() : owners_[k].gathered.view();
    for (std::size_t i : g.members) {
      ShardedParameter<T>& p = parameters_[i];
      p.full_ = slice(whole, p.layout_.flat_offset, p.numel());
    }
  }
  for (std::size_t k = 0; k < layout_.replicated.size(); ++k) {
    parameters_[layout_.replicated[k]].full_ = replicated_storage_[k].view();
  }
  state_ = UnitState::gathered;
  ++gather_count_;
}

template <class T>
TrackedView<T> ShardedUnit<T>::new_pieces() const {
  if (!flat_shard_.allocated() || state_ != UnitState::sharded) {
    return TrackedView<T>();
  }
  TrackedView<T> buffer(tracker_, MemoryCategory::parameter_shards, name_ + ".shards",
                        layout_.flat_numel, false);
  // The padding after each piece travels in the gathers: zero, as in the buffer it replaces.
  for (const auto* kind : {&layout_.packed, &layout_.direct}) {
    for (std::size_t i : *kind) {
      const ParameterLayout& p = parameters_[i].layout_;
      Kokkos::deep_copy(
          space_, slice(buffer.view(), p.flat_offset + p.piece.size, p.piece.padded - p.piece.size),
          T(0));
    }
  }
  return buffer;
}

template <class T>
DeviceView<T> ShardedUnit<T>::piece_in(const TrackedView<T>& buffer,
                                       const ShardedParameter<T>& p) const {
  const bool in_flat = p.placement() == Placement::sharded && flat_shard_.allocated();
  require(p.unit_ == this && buffer.view().size() == flat_shard_.view().size(),
          "ShardedUnit::piece_in: the buffer or the parameter is not unit " + name_ + "'s",
          ErrorKind::usage);
  return in_flat ? slice(buffer.view(), p.layout_.flat_offset, p.layout_.piece.size) : View();
}

template <class T>
void ShardedUnit<T>::adopt_pieces(TrackedView<T> buffer) {
  require(!keeps_parameters() && state_ == UnitState::sharded &&
              static_cast<std::int64_t>(buffer.view().size()) == layout_.flat_numel,
          "ShardedUnit::adopt_pieces: unit " + name_ +
              " takes a buffer of new_pieces() while it is sharded",
          ErrorKind::state);
  space_.fence();  // the padding's zeros
  flat_shard_ = std::move(buffer);
  for (const auto* kind : {&layout_.packed, &layout_.direct}) {
    for (std::size_t i : *kind) {
      ShardedParameter<T>& p = parameters_[i];
      p.shard_ = slice(flat_shard_.view(), p.layout_.flat_offset, p.layout_.piece.size);
    }
  }
}

template <class T>
void ShardedUnit<T>::release() {
  if (state_ == UnitState::sharded) {
    return;
  }
  require_state(UnitState::gathered, "release");
  for (ShardedParameter<T>& p : parameters_) {
    p.full_ = View();
    p.half_ = DeviceView<std::uint16_t>();
  }
  state_ = UnitState::sharded;
  ++release_count_;
  give_back_whole_parameters();  // resident ones stay, refreshed by the next gather
}

template <class T>
typename ShardedUnit<T>::View ShardedUnit<T>::full_gradients() {
  if (writes_resident_gradients() && reducing()) {
    wait_reduction();  // the resident whole gradients are the reduction's buffer
  }
  if (!full_grads_.allocated() && grad_layout_.full_grad_numel > 0) {
    full_grads_ = pool_->acquire(MemoryCategory::full_gradients, name_ + ".grads",
                                 grad_layout_.full_grad_numel, true);
  }
  return full_grads_.view();
}

template <class T>
void ShardedUnit<T>::reduce_scatter_grads() {
  reduce_scatter_grads_async();
  wait_reduction();
}

template <class T>
void ShardedUnit<T>::reduce_scatter_grads_async() {
  require(state_ != UnitState::gathering, [&] {
    return "reduce_scatter_grads of unit '" + name_ +
           "' while its gather is in flight; wait for the gather first";
  });
  if (reducing()) {
    wait_reduction();
  }
  // shard_optimizer's gradient pieces live inside the whole gradients that the next backward
  // adds into, so a second reduction would mix averaged and local values.
  require(
      !(keeps_gradients() && has_grads_),
      [&] {
        return "reduce_scatter_grads of unit '" + name_ +
               "' twice before zero_grad in mode shard_optimizer; accumulate micro-batches in the "
               "whole gradients and reduce once per optimizer step";
      },
      ErrorKind::state);
  const int n = group_.size();
  Reduction& r = reduction_;
  if (keeps_gradients() && keeps_bfloat16_gradients()) {
    widen_resident_gradients();
  }
  r.grads = full_gradients();  // zeros if this rank wrote none
  if (!writes_resident_gradients()) {
    r.owned_grads = std::move(full_grads_);  // the reduction's now; grad() starts new ones
  }
  const View& grads = r.grads;
  std::vector<Work>& works = r.works;
  std::vector<TrackedView<T>>& staging = r.staging;  // outputs, added into the pieces at the end
  staging.reserve(1 + grad_layout_.direct.size());
  r.stage = ReductionStage::group;

  try {
    if (reduces_in_half()) {
      start_half_reduction();
    } else {
      if (!grad_layout_.packed.empty()) {
        // Pack: rank r's chunk holds, for every packed parameter, the gradient of the piece r
        // owns.
        r.packed_send = pool_->acquire(MemoryCategory::communication, name_ + ".rs_send",
                                       grad_layout_.packed_numel * n, true);
        copy_segments(space_, grad_layout_.pack, grads, r.packed_send.view());
        staging.push_back(pool_->acquire(MemoryCategory::communication, name_ + ".rs_recv",
                                         grad_layout_.packed_numel, false));
        works.push_back(group_.reduce_scatter_async(space_, r.packed_send.view(),
                                                    staging.back().view(), ReduceOp::avg));
      }
      for (std::size_t i : grad_layout_.direct) {
        // The padded full gradient is laid out as N pieces already: reduce-scatter it in place.
        const ShardedParameter<T>& p = grad_parameter(i);
        const std::int64_t padded = p.grad_layout_.piece.padded;
        staging.push_back(pool_->acquire(MemoryCategory::communication, p.name(), padded, false));
        works.push_back(group_.reduce_scatter_async(
            space_, slice(grads, p.grad_layout_.grad_offset, n * padded), staging.back().view(),
            ReduceOp::avg));
      }
      for (const OwnerGroupLayout& g : grad_layout_.owners) {
        const View group_grads = slice(grads, g.grad_offset, g.numel);
        works.push_back(
            group_.reduce_async(space_, group_grads, group_grads, ReduceOp::avg, g.owner));
      }
      if (!grad_layout_.replicated.empty()) {
        works.push_back(group_.all_reduce_async(
            space_,
            slice(grads, grad_layout_.replicated_grad_offset,
                  grad_layout_.full_grad_numel - grad_layout_.replicated_grad_offset),
            ReduceOp::avg));
      }
    }
  } catch (...) {
    release_reduction();  // nothing reached the pieces: the gradients are lost
    reduction_ = Reduction{};
    throw;
  }
}

template <class T>
void ShardedUnit<T>::widen_resident_gradients() {
  const std::int64_t n = grad_layout_.full_grad_numel;
  if (n == 0) {
    return;
  }
  if (full_grads_.allocated()) {
    add_into(space_, whole_piece(resident_grads_), full_grads_.view());
  } else {
    full_grads_ = pool_->acquire(MemoryCategory::full_gradients, name_ + ".grads", n, false);
  }
  widen_into<bfloat16>(space_, resident_grads_.bfloat16.view(), full_grads_.view());
}

template <class T>
void ShardedUnit<T>::fold_gradients() {
  if (!keeps_gradients() || !keeps_bfloat16_gradients() || !full_grads_.allocated()) {
    return;
  }
  if (reducing()) {
    wait_reduction();  // it writes the pieces inside the kept whole gradients
  }
  add_into(space_, whole_piece(resident_grads_), full_grads_.view());
  space_.fence();
  pool_->give_back(full_grads_);
}

template <class T>
bool ShardedUnit<T>::test_reduction(bool may_issue) {
  Reduction& r = reduction_;
  if (r.stage == ReductionStage::none || r.stage == ReductionStage::failed) {
    return r.stage == ReductionStage::none;
  }
  try {
    bool done = true;
    for (Work& work : r.works) {
      done = work.test() && done;
    }
    if (!done || (!may_issue && !reduction_issued())) {
      return false;
    }
    return advance_reduction();
  } catch (...) {
    r.error = std::current_exception();
    release_reduction();
    r.stage = ReductionStage::failed;
    return false;
  }
}

template <class T>
void ShardedUnit<T>::wait_reduction() {
  Reduction& r = reduction_;
  if (r.stage != ReductionStage::failed) {
    try {
      while (r.stage != ReductionStage::none) {
        wait_all(r.works);
        advance_reduction();
      }
      return;
    } catch (...) {
      r.error = std::current_exception();
      release_reduction();
    }
  }
  const std::exception_ptr error = r.error;
  reduction_ = Reduction{};
  std::rethrow_exception(error);
}

template <class T>
bool ShardedUnit<T>::advance_reduction() {
  Reduction& r = reduction_;
  r.works.clear();
  if (r.stage == ReductionStage::group) {
    for (const auto& [from, to] : r.widen) {
      reduce_dtype_ == DType::bf16 ? widen_into<bfloat16>(space_, from, to)
                                   : widen_into<float16>(space_, from, to);
    }
    if (!r.widen.empty()) {
      space_.fence();  // the 16-bit buffers may go
      r.widen.clear();
      r.half_buffers.clear();
    }
    if (averages_over_replicas()) {
      average_over_replicas(r.staging, r.grads, r.works);
      r.stage = ReductionStage::replicas;
      return false;
    }
  }
  finish_reduction();
  return true;
}

template <class T>
void ShardedUnit<T>::finish_reduction() {
  Reduction& r = reduction_;
  const View& grads = r.grads;
  const std::vector<TrackedView<T>>& staging = r.staging;
  if (keeps_gradients()) {
    reduce_into_resident_gradients(staging, grads);
  } else {
    std::size_t next = 0;
    if (!grad_layout_.packed.empty()) {
      add_into(space_, piece_of(flat_grad_shard_, 0, grad_layout_.packed_numel),
               staging[next++].view());
    }
    for (std::size_t i : grad_layout_.direct) {
      const ShardedParameter<T>& p = grad_parameter(i);
      add_into(space_,
               piece_of(flat_grad_shard_, p.grad_layout_.flat_offset, p.grad_layout_.piece.padded),
               staging[next++].view());
    }
    for (std::size_t k = 0; k < owner_grads_.size(); ++k) {
      const OwnerGroupLayout& g = grad_layout_.owners[k];
      if (g.owner == group_.rank()) {
        add_into(space_, whole_piece(owner_grads_[k]), slice(grads, g.grad_offset, g.numel));
      }
    }
    for (std::size_t k = 0; k < grad_layout_.replicated.size(); ++k) {
      const ShardedParameter<T>& p = grad_parameter(grad_layout_.replicated[k]);
      add_into(space_, whole_piece(replicated_grads_[k]),
               slice(grads, p.grad_layout_.grad_offset, p.numel()));
    }
  }
  space_.fence();  // the additions read staging and grads, which go back to the pool now
  release_reduction();
  reduction_ = Reduction{};
  has_grads_ = true;
}

// The buffers of the reduction in flight go back to the pool, once every collective that writes
// into them is done: when it finished, or failed (its gradients are lost then).
template <class T>
void ShardedUnit<T>::release_reduction() {
  Reduction& r = reduction_;
  for (Work& work : r.works) {
    try {
      work.wait();
    } catch (const std::exception&) {
      // The first failure is the one the caller sees.
    }
  }
  r.works.clear();
  r.widen.clear();
  r.half_buffers.clear();
  for (TrackedView<T>& buffer : r.staging) {
    pool_->give_back(buffer);
  }
  r.staging.clear();
  pool_->give_back(r.packed_send);
  pool_->give_back(r.owned_grads);
  r.grads = View();
}

// Mixed precision: the same collectives as reduce_scatter_grads_async on 16-bit copies of the
// gradients (reduce_dtype); advance_reduction widens the results into staging and, for owners and
// replicated parameters, back into grads, where the additions into the fp32 pieces read them.
template <class T>
void ShardedUnit<T>::start_half_reduction() {
  reduce_dtype_ == DType::bf16 ? reduce_in_half<bfloat16>() : reduce_in_half<float16>();
}

template <class T>
template <class H>
void ShardedUnit<T>::reduce_in_half() {
  const int n = group_.size();
  Reduction& r = reduction_;
  const View& grads = r.grads;
  std::vector<TrackedView<T>>& staging = r.staging;
  std::vector<Work>& works = r.works;
  auto& results = r.widen;  // widened after the collectives complete
  if (!grad_layout_.packed.empty()) {
    r.packed_send = pool_->acquire(MemoryCategory::communication, name_ + ".rs_send",
                                   grad_layout_.packed_numel * n, true);
    copy_segments(space_, grad_layout_.pack, grads, r.packed_send.view());
    const auto send = reduction_half_buffer("rs_send16", grad_layout_.packed_numel * n);
    narrow_into<H>(space_, r.packed_send.view(), send);
    const auto recv = reduction_half_buffer("rs_recv16", grad_layout_.packed_numel);
    staging.push_back(pool_->acquire(MemoryCategory::communication, name_ + ".rs_recv",
                                     grad_layout_.packed_numel, false));
    works.push_back(
        group_.reduce_scatter_async(space_, as_half<H>(send), as_half<H>(recv), ReduceOp::avg));
    results.emplace_back(recv, staging.back().view());
  }
  for (std::size_t i : grad_layout_.direct) {
    const ShardedParameter<T>& p = grad_parameter(i);
    const std::int64_t padded = p.grad_layout_.piece.padded;
    const auto send = reduction_half_buffer(p.name() + ".rs_send16", n * padded);
    narrow_into<H>(space_, slice(grads, p.grad_layout_.grad_offset, n * padded), send);
    const auto recv = reduction_half_buffer(p.name() + ".rs_recv16", padded);
    staging.push_back(pool_->acquire(MemoryCategory::communication, p.name(), padded, false));
    works.push_back(
        group_.reduce_scatter_async(space_, as_half<H>(send), as_half<H>(recv), ReduceOp::avg));
    results.emplace_back(recv, staging.back().view());
  }
  for (const OwnerGroupLayout& g : grad_layout_.owners) {
    const View group_grads = slice(grads, g.grad_offset, g.numel);
    const auto buffer = reduction_half_buffer("reduce16", g.numel);
    narrow_into<H>(space_, group_grads, buffer);
    works.push_back(group_.reduce_async(space_, as_half<H>(buffer), as_half<H>(buffer),
                                        ReduceOp::avg, g.owner));
    if (g.owner == group_.rank()) {
      results.emplace_back(buffer, group_grads);
    }
  }
  if (!grad_layout_.replicated.empty()) {
    const View replicated =
        slice(grads, grad_layout_.replicated_grad_offset,
              grad_layout_.full_grad_numel - grad_layout_.replicated_grad_offset);
    const auto buffer =
        reduction_half_buffer("all_reduce16", static_cast<std::int64_t>(replicated.size()));
    narrow_into<H>(space_, replicated, buffer);
    works.push_back(group_.all_reduce_async(space_, as_half<H>(buffer), ReduceOp::avg));
    results.emplace_back(buffer, replicated);
  }
}

// Hybrid sharding: every piece this rank reduced (the chunks in staging, the whole parameters it
// owns, the replicated ones) is averaged over the replicas; they hold the same pieces, so they
// issue the same collectives in the same order.
template <class T>
void ShardedUnit<T>::average_over_replicas(const std::vector<TrackedView<T>>& staging,
                                           const View& grads, std::vector<Work>& works) {
  for (const TrackedView<T>& chunk : staging) {
    works.push_back(replica_reductions_->all_reduce_async(space_, chunk.view(), ReduceOp::avg));
  }
  for (const OwnerGroupLayout& g : grad_layout_.owners) {
    if (g.owner == group_.rank()) {
      works.push_back(replica_reductions_->all_reduce_async(
          space_, slice(grads, g.grad_offset, g.numel), ReduceOp::avg));
    }
  }
  if (!grad_layout_.replicated.empty()) {
    works.push_back(replica_reductions_->all_reduce_async(
        space_,
        slice(grads, grad_layout_.replicated_grad_offset,
              grad_layout_.full_grad_numel - grad_layout_.replicated_grad_offset),
        ReduceOp::avg));
  }
}

// shard_optimizer: the averaged chunks (staging, in the order reduce_scatter_grads issued them)
// are copied over this rank's pieces inside the whole gradients; the owners' and replicated
// gradients were reduced in place in grads, which are the kept whole gradients in T and are
// copied into them in bfloat16.
template <class T>
void ShardedUnit<T>::reduce_into_resident_gradients(const std::vector<TrackedView<T>>& staging,
                                                    const View& grads) {
  std::size_t next = 0;
  if (!grad_layout_.packed.empty()) {
    const View chunk = staging[next++].view();
    for (std::size_t i : grad_layout_.packed) {
      const ShardedParameter<T>& p = grad_parameter(i);
      copy_into(space_, p.grad_piece_, slice(chunk, p.grad_layout_.flat_offset, p.shard_size()));
    }
  }
  for (std::size_t i : grad_layout_.direct) {
    const ShardedParameter<T>& p = grad_parameter(i);
    copy_into(space_, p.grad_piece_, slice(staging[next++].view(), 0, p.shard_size()));
  }
  if (keeps_bfloat16_gradients()) {
    for (std::size_t i : trained_) {
      const ShardedParameter<T>& p = parameters_[i];
      if (p.placement() != Placement::sharded) {  // an owned whole one, or a replicated one
        copy_into(space_, p.grad_piece_,
                  slice(grads, p.grad_layout_.grad_offset,
                        static_cast<std::int64_t>(p.grad_piece_.size())));
      }
    }
  }
}

template <class T>
void ShardedUnit<T>::zero_grad() {
  if (reducing()) {
    wait_reduction();  // its result would land in the zeroed pieces
  }
  if (writes_resident_gradients() && full_grads_.allocated()) {
    Kokkos::deep_copy(space_, full_grads_.view(), T(0));
  } else if (full_grads_.allocated()) {
    pool_->give_back(full_grads_);  // whole gradients never reduced (accumulation): dropped
  }
  zero_kept(space_, flat_grad_shard_);
  zero_kept(space_, resident_grads_);
  for (KeptGradients& grad : owner_grads_) {
    zero_kept(space_, grad);
  }
  for (KeptGradients& grad : replicated_grads_) {
    zero_kept(space_, grad);
  }
  space_.fence();
  has_grads_ = false;
}

template class ShardedParameter<float>;
template class ShardedParameter<double>;
template class ShardedUnit<float>;
template class ShardedUnit<double>;

}  // namespace fsdp
