// ShardingSpec: how one tensor is laid out over a 1-D or 2-D mesh of devices.
#pragma once

#include <array>
#include <cstdint>
#include <string>

namespace fsdp::solver {

// Each mesh axis is used at most once by a tensor, in one of three ways: not at all (the tensor is
// the same on every device along it: replicated), to cut one tensor dimension into as many
// contiguous blocks as the axis has devices (sharded), or to hold a full-size partial sum whose sum
// along the axis is the value (partial: what splitting a contraction dimension makes, an
// all-reduce or reduce-scatter away from usable). Both axes may cut the same dimension: it is then
// cut into (axis 0 size) x (axis 1 size) blocks, axis 0 major. On a 1-D mesh only axis 0 exists,
// so a tensor is replicated, sharded(dim) or partial, as the factories below make it.
struct ShardingSpec {
  enum class Kind : std::uint8_t { replicated, sharded, partial };
  static constexpr int kMaxAxes = 2;

  struct AxisUse {
    Kind kind = Kind::replicated;
    int dim = -1;  // the tensor dimension a sharded axis cuts; -1 otherwise
  };
  std::array<AxisUse, kMaxAxes> axes{};

  static constexpr ShardingSpec replicated() { return ShardingSpec{}; }
  static constexpr ShardingSpec sharded(int dim, int axis = 0) {
    ShardingSpec spec;
    spec.axes[static_cast<std::size_t>(axis)] = AxisUse{Kind::sharded, dim};
    return spec;
  }
  static constexpr ShardingSpec partial(int axis = 0) {
    ShardingSpec spec;
    spec.axes[static_cast<std::size_t>(axis)] = AxisUse{Kind::partial, -1};
    return spec;
  }

  const AxisUse& axis(int a) const { return axes[static_cast<std::size_t>(a)]; }
  bool is_replicated() const;  // no axis used
  bool is_sharded() const;     // some axis cuts a dimension
  bool is_partial() const;     // some axis holds a partial sum
  bool axis_sharded(int a) const { return axis(a).kind == Kind::sharded; }
  bool axis_partial(int a) const { return axis(a).kind == Kind::partial; }
  // True when mesh axis a is used at all (sharded or partial).
  bool uses_axis(int a) const { return axis(a).kind != Kind::replicated; }
  // The dimension axis 0 cuts (-1 when it cuts none): the 1-D spec's dimension.
  int dim() const { return axis(0).dim; }
  // The same layout with every partial axis replicated: the layout of a gradient flowing back
  // into a tensor of this layout (the gradient of a partial sum is the same on every device).
  ShardingSpec without_partial() const;

  // One entry per dimension. With mesh_axes 1: "[S,R,R]" (dim 0 sharded), "[R,R]" (replicated),
  // "[R,R]+P" (partial sum pending). With 2 mesh axes each dimension says which axes cut it:
  // "[S0,R,S1]", "[S01,R]" (both axes, axis 0 major), and the partial axes follow: "[R,R]+P1",
  // "[S0,R]+P1". A spec that uses axis 1 is always written in the 2-axis form.
  std::string to_string(int rank, int mesh_axes = 1) const;

  // Parses to_string's forms ("S" in a 1-axis form is "S0"; "+P" is "+P0"), and the short forms
  // "R", "P", "S<d>" / "S(<d>)" (dimension d cut along axis 0). Throws fsdp::Error naming the
  // accepted forms otherwise, when a dimension is outside [0, rank) or an axis is used twice.
  static ShardingSpec parse(const std::string& text, int rank);
};

inline bool operator==(const ShardingSpec::AxisUse& a, const ShardingSpec::AxisUse& b) {
  return a.kind == b.kind && a.dim == b.dim;
}
inline bool operator==(const ShardingSpec& a, const ShardingSpec& b) {
  return a.axes[0] == b.axes[0] && a.axes[1] == b.axes[1];
}
inline bool operator!=(const ShardingSpec& a, const ShardingSpec& b) {
  return !(a == b);
}

}  // namespace fsdp::solver
