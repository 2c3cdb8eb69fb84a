// UnitLayout: where every parameter of a unit lives in the unit's buffers on one rank, and the
// copies that move the packed parameters between the rank-major communication buffers and the
// whole-parameter buffers. Pure arithmetic on the plan (no MPI, no allocation of elements), so
// it is tested for every world size and rank in one process; ShardedUnit allocates and
// communicates from it.
#pragma once

#include <cstdint>
#include <vector>

#include "fsdp/shard/shard_range.hpp"
#include "fsdp/shard/sharding_plan.hpp"

namespace fsdp {

// Where one parameter of the unit lives, in elements.
struct ParameterLayout {
  std::size_t plan_index = 0;  // into ShardingPlan::parameters()
  ParameterPlacement placement;
  std::int64_t numel = 0;
  // What this rank holds of the parameter: its piece of a sharded parameter (padded =
  // ceil(numel / N)); all of a whole parameter on its owner and nothing elsewhere, all of a
  // replicated one (padded = numel for both).
  ShardRange piece;
  // Sharded: the start of its padded piece in the unit's flat shard buffer. Whole: its start in
  // the owner group's buffer. Replicated: 0 (each has buffers of its own).
  std::int64_t flat_offset = 0;
  // Packed parameters: the start of the whole parameter in the unit's packed full buffer.
  std::int64_t full_offset = 0;
  // The start of its gradient in the unit's full-gradient buffer.
  std::int64_t grad_offset = 0;
};

// The whole parameters of one owner rank: kept back to back, broadcast and reduced in one piece.
struct OwnerGroupLayout {
  int owner = 0;
  std::vector<std::size_t> members;  // positions in UnitLayout::parameters
  std::int64_t numel = 0;
  std::int64_t grad_offset = 0;  // of the group's gradients (contiguous) in the full gradient
};

// count elements from source offset `from` to destination offset `to`.
struct CopySegment {
  std::int64_t from = 0;
  std::int64_t to = 0;
  std::int64_t count = 0;
  bool operator==(const CopySegment& o) const {
    return from == o.from && to == o.to && count == o.count;
  }
};

// Buffers, in elements (N = world size):
//   flat shard / flat gradient shard (flat_numel): this rank's padded pieces of the sharded
//     parameters, the packed ones first (packed_numel), then the direct ones.
//   packed gather (N * packed_numel): the all_gather of the packed part, rank-major: rank r's
//     pieces at r * packed_numel. Its reduce-scatter send buffer has the same layout.
//   packed full (packed_full_numel): the packed parameters whole, back to back.
//   full gradient (full_grad_numel): packed parameters whole; each direct one padded to N pieces
//     (reduce-scattered in place); each owner group; the replicated parameters, so that every
//     collective on gradients works on one contiguous range.
struct UnitLayout {
  int world_size = 1;
  int rank = 0;
  std::vector<ParameterLayout> parameters;  // in the order of the unit's plan indices
  // Positions in `parameters`. Sharded ones whose padded piece has at least
  // direct_gather_bytes (or a unit's only sharded one) are direct: gathered by an all_gather of
  // their own straight into their full buffer; the others are packed into one all_gather.
  std::vector<std::size_t> packed;
  std::vector<std::size_t> direct;
  std::vector<OwnerGroupLayout> owners;  // by owner rank, ascending
  std::vector<std::size_t> replicated;
  std::int64_t replicated_grad_offset = 0;  // where the replicated gradients start

  std::int64_t packed_numel = 0;
  std::int64_t flat_numel = 0;
  std::int64_t packed_full_numel = 0;
  std::int64_t full_grad_numel = 0;

  // Packed gather buffer -> packed full buffer (after the all_gather), one segment per
  // non-empty piece.
  std::vector<CopySegment> unpack;
  // Full gradient -> packed reduce-scatter send buffer (before the reduce_scatter): each rank's
  // chunk gets the gradient of the pieces that rank owns.
  std::vector<CopySegment> pack;
};

// The layout of the unit made of plan.parameters()[i] for i in indices, on `rank` of
// plan.world_size(), for elements of element_bytes. Throws Error for a rank outside the plan's
// world, an index outside the plan, or element_bytes < 1.
UnitLayout make_unit_layout(const ShardingPlan& plan, const std::vector<std::size_t>& indices,
                            int rank, std::int64_t element_bytes, std::int64_t direct_gather_bytes);

}  // namespace fsdp
