// ShardedParameter: one parameter of a ShardedUnit, as this rank holds it.
#pragma once

#include <Kokkos_Core.hpp>
#include <cstdint>
#include <string>
#include <vector>

#include "fsdp/core/error.hpp"
#include "fsdp/shard/parameter_info.hpp"
#include "fsdp/shard/sharding_plan.hpp"
#include "fsdp/unit/memory_tracker.hpp"

namespace fsdp {

template <class T>
class ShardedUnit;

template <class T>
class ShardedParameter {
 public:
  using View = Kokkos::View<T*, Kokkos::HostSpace>;

  const ParameterInfo& info() const { return info_; }
  const std::string& name() const { return info_.name; }
  Placement placement() const { return placement_.placement; }
  std::int64_t numel() const { return numel_; }

  // This rank's piece: the global (flattened) offset of its first element and its length. A
  // piece may be empty (short parameters on many ranks, whole parameters owned elsewhere).
  std::int64_t shard_offset() const { return shard_offset_; }
  std::int64_t shard_size() const { return static_cast<std::int64_t>(shard_.size()); }
  // The piece itself, and its gradient (what the optimizer updates). Persistent.
  const View& shard() const { return shard_; }
  const View& grad_shard() const { return grad_shard_; }

  // The whole parameter, numel() elements in row-major order of its shape. Only while the unit
  // is gathered; the View stays valid until the unit is released.
  View full() const;
  // The full-shape gradient to accumulate into (+=). Only while the unit is gathered; zero after
  // each reduce_scatter_grads(), kept across micro-batches until then.
  View grad();
  // grad() += gradient, after checking that gradient has the parameter's shape (a contiguous
  // View of any rank, row-major).
  template <class GradientView>
  void accumulate_grad(const GradientView& gradient);

  // Optimizer state of the piece (momentum, moments), shard_size() elements each, counted as
  // optimizer state. Created once by the optimizer.
  std::vector<TrackedView<T>>& optimizer_state() { return optimizer_state_; }
  View add_optimizer_state(const std::string& label);

 private:
  friend class ShardedUnit<T>;
  ShardedParameter(ShardedUnit<T>* unit, ParameterInfo info, ParameterPlacement placement)
      : unit_(unit), info_(std::move(info)), placement_(placement), numel_(info_.numel()) {}

  ShardedUnit<T>* unit_;
  ParameterInfo info_;
  ParameterPlacement placement_;
  std::int64_t numel_ = 0;
  std::int64_t shard_offset_ = 0;
  std::int64_t padded_shard_ = 0;  // ceil(numel / N) for sharded parameters
  std::int64_t flat_offset_ = 0;   // in the unit's buffer of its kind (sharded / owner group)
  std::int64_t full_offset_ = 0;   // packed parameters: in the unit's copied-out full buffer
  std::int64_t grad_offset_ = 0;   // in the unit's full-gradient buffer
  View shard_;
  View grad_shard_;
  View full_;
  std::vector<TrackedView<T>> optimizer_state_;
};

template <class T>
template <class GradientView>
void ShardedParameter<T>::accumulate_grad(const GradientView& gradient) {
  static_assert(Kokkos::is_view<GradientView>::value, "accumulate_grad takes a Kokkos::View");
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
    throw Error("fsdp: gradient for " + describe(info_) + " has shape [" + extents +
                "]; it must have the parameter's shape");
  }
  require(gradient.span_is_contiguous() &&
              (GradientView::rank <= 1 ||
               std::is_same_v<typename GradientView::array_layout, Kokkos::LayoutRight>),
          "fsdp: gradient for '" + info_.name + "' must be a contiguous row-major View");
  View target = grad();
  const auto* values = gradient.data();
  Kokkos::parallel_for(
      "fsdp::accumulate_grad",
      Kokkos::RangePolicy<Kokkos::DefaultHostExecutionSpace>(0, static_cast<std::size_t>(numel_)),
      [=](std::size_t i) { target(i) += values[i]; });
  Kokkos::DefaultHostExecutionSpace().fence();
}

}  // namespace fsdp
