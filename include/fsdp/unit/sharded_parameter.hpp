// ShardedParameter: one parameter of a ShardedUnit, as this rank holds it.
#pragma once

#include <Kokkos_Core.hpp>
#include <cstdint>
#include <string>
#include <vector>

#include "fsdp/core/error.hpp"
#include "fsdp/core/memory_space.hpp"
#include "fsdp/shard/parameter_info.hpp"
#include "fsdp/shard/sharding_plan.hpp"
#include "fsdp/unit/gradient_piece.hpp"
#include "fsdp/unit/memory_tracker.hpp"
#include "fsdp/unit/unit_layout.hpp"

namespace fsdp {

template <class T>
class ShardedUnit;

template <class T>
class ShardedParameter {
 public:
  // In fsdp::MemorySpace: device memory in a CUDA build of Kokkos, host memory otherwise.
  using View = DeviceView<T>;

  // Move-only, and declared so: with the copy merely ill-formed (its widened copy is
  // move-only) std::vector would pick it over a move that Kokkos does not mark noexcept (CUDA).
  ShardedParameter(const ShardedParameter&) = delete;
  ShardedParameter& operator=(const ShardedParameter&) = delete;
  ShardedParameter(ShardedParameter&&) = default;
  ShardedParameter& operator=(ShardedParameter&&) = default;

  const ParameterInfo& info() const { return info_; }
  const std::string& name() const { return info_.name; }
  Placement placement() const { return layout_.placement.placement; }
  std::int64_t numel() const { return layout_.numel; }
  // False for a frozen parameter (ParameterInfo::trainable): it has no gradient (grad() and
  // accumulate_grad() throw, grad_shard() is empty) and no optimizer steps it.
  bool trainable() const { return info_.trainable; }

  // This rank's piece: the global (flattened) offset of its first element and its length. A
  // piece may be empty (short parameters on many ranks, whole parameters owned elsewhere).
  std::int64_t shard_offset() const { return layout_.piece.offset; }
  std::int64_t shard_size() const { return static_cast<std::int64_t>(shard_.size()); }
  // The piece itself, and its gradient (what the optimizer updates; empty when frozen).
  // Persistent. grad_shard() is the gradient kept in T: error (ErrorKind::state) when the unit
  // keeps gradients in bfloat16 (UnitOptions::grad_dtype); grad_piece() reads either.
  const View& shard() const { return shard_; }
  const View& grad_shard() const;
  const GradientPiece<T>& grad_piece() const { return grad_piece_; }

  // The whole parameter, numel() elements in row-major order of its shape. Only while the unit
  // is gathered; the View stays valid until the unit is released. With a 16-bit param_dtype
  // (UnitOptions) it is half() widened to T, made at the first call and valid until the unit's
  // drop_widened() or release(); its bytes count as gathered parameters.
  View full() const;
  // With a 16-bit param_dtype: the whole parameter as gathered, numel() values of that dtype
  // (bfloat16 or float16 bits, fsdp/core/half_conversion.hpp), what a model computing in 16 bits
  // reads; only while the unit is gathered, valid until it is released. Error (ErrorKind::state)
  // for a unit that gathers in T.
  DeviceView<std::uint16_t> half() const;
  // The full-shape gradient to accumulate into (+=). Only while the unit is gathered; zero after
  // each reduce_scatter_grads(), kept across micro-batches until then.
  View grad();
  // grad() += gradient, after checking that gradient has the parameter's shape (a contiguous
  // View of any rank, row-major).
  template <class GradientView>
  void accumulate_grad(const GradientView& gradient);

  // A buffer of the piece's size (shard_size() elements) for an optimizer's state called label
  // (OptimizerState, which owns it), counted as optimizer state while it lives; zero: filled with
  // zeros, else uninitialized (a checkpoint's load reads into it).
  TrackedView<T> make_optimizer_state(const std::string& label, bool zero) const;

 private:
  friend class ShardedUnit<T>;
  ShardedParameter(ShardedUnit<T>* unit, ParameterInfo info, const ParameterLayout& layout)
      : unit_(unit), info_(std::move(info)), layout_(layout) {}

  ShardedUnit<T>* unit_;
  ParameterInfo info_;
  ParameterLayout layout_;       // its piece and offsets in the unit's buffers
  ParameterLayout grad_layout_;  // its gradient's offsets (ShardedUnit::gradient_layout())
  View shard_;
  GradientPiece<T> grad_piece_;
  View full_;
  DeviceView<std::uint16_t> half_;  // 16-bit gathers: the gathered parameter
  TrackedView<T> widened_;          // ... and full_'s storage once full() widened it
};

template <class T>
template <class GradientView>
void ShardedParameter<T>::accumulate_grad(const GradientView& gradient) {
  static_assert(Kokkos::is_view<GradientView>::value, "accumulate_grad takes a Kokkos::View");
  static_assert(
      Kokkos::SpaceAccessibility<ExecutionSpace, typename GradientView::memory_space>::accessible,
      "accumulate_grad: the gradient must live where fsdp's kernels run "
      "(fsdp::MemorySpace); deep_copy it there first");
  const auto& shape = info_.shape;
  bool same =
      static_cast<std::size_t>(GradientView::rank) == std::max<std::size_t>(shape.size(), 1);
  for (std::size_t d = 0; same && d < shape.size(); ++d) {
    same = static_cast<std::int64_t>(gradient.extent(d)) == shape[d];
  }
  if (!same) {
    std::string extents;
    for (std::size_t d = 0; d < static_cast<std::size_t>(GradientView::rank); ++d) {
      extents += (d ? ", " : "") + std::to_string(gradient.extent(d));
    }
    throw Error("gradient for " + describe(info_) + " has shape [" + extents +
                "]; it must have the parameter's shape");
  }
  require(gradient.span_is_contiguous() &&
              (GradientView::rank <= 1 ||
               std::is_same_v<typename GradientView::array_layout, Kokkos::LayoutRight>),
          [&] { return "gradient for '" + info_.name + "' must be a contiguous row-major View"; });
  View target = grad();
  const auto* values = gradient.data();
  const ExecutionSpace space = unit_->execution_space();
  Kokkos::parallel_for(
      "fsdp::accumulate_grad", device_range(space, 0, numel()),
      KOKKOS_LAMBDA(std::size_t i) { target(i) += values[i]; });
  space.fence();
}

}  // namespace fsdp
