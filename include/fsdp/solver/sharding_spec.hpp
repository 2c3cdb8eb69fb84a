// ShardingSpec: how one tensor is laid out over a 1-D mesh of N devices.
#pragma once

#include <cstdint>
#include <string>

namespace fsdp::solver {

// On a 1-D mesh the one mesh axis is used at most once, so a tensor is in exactly one of three
// states: every device holds all of it (replicated), dimension `dim` is cut into N contiguous
// blocks, one per device (sharded), or every device holds a full-size tensor whose sum over the
// devices is the value (partial: what splitting a contraction dimension produces, an all-reduce
// or reduce-scatter away from usable).
struct ShardingSpec {
  enum class Kind : std::uint8_t { replicated, sharded, partial };

  Kind kind = Kind::replicated;
  int dim = -1;  // the sharded dimension; -1 unless kind == sharded

  static ShardingSpec replicated() { return {Kind::replicated, -1}; }
  static ShardingSpec sharded(int dim) { return {Kind::sharded, dim}; }
  static ShardingSpec partial() { return {Kind::partial, -1}; }

  bool is_replicated() const { return kind == Kind::replicated; }
  bool is_sharded() const { return kind == Kind::sharded; }
  bool is_partial() const { return kind == Kind::partial; }

  // One letter per dimension: "[S,R,R]" (dim 0 sharded), "[R,R]" (replicated), "[R,R]+P"
  // (partial sum pending).
  std::string to_string(int rank) const;

  // Parses to_string's form, and the short forms "R", "P", "S0" / "S(0)"; throws fsdp::Error
  // naming the accepted forms otherwise, or when a sharded dimension is outside [0, rank).
  static ShardingSpec parse(const std::string& text, int rank);
};

inline bool operator==(const ShardingSpec& a, const ShardingSpec& b) {
  return a.kind == b.kind && a.dim == b.dim;
}
inline bool operator!=(const ShardingSpec& a, const ShardingSpec& b) {
  return !(a == b);
}

}  // namespace fsdp::solver
