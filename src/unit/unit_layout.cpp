#include "fsdp/unit/unit_layout.hpp"

#include <algorithm>
#include <string>

#include "fsdp/core/error.hpp"

namespace fsdp {
namespace {

// What `rank` holds of a parameter placed `where`.
ShardRange held_piece(std::int64_t numel, const ParameterPlacement& where, int world_size,
                      int rank) {
  switch (where.placement) {
    case Placement::sharded:
      return shard_range(numel, world_size, rank);
    case Placement::whole:
      return ShardRange{numel, 0, where.owner_rank == rank ? numel : 0};
    case Placement::replicated:
      break;
  }
  return ShardRange{numel, 0, numel};
}

}  // namespace

UnitLayout make_unit_layout(const ShardingPlan& plan, const std::vector<std::size_t>& indices,
                            int rank, std::int64_t element_bytes,
                            std::int64_t direct_gather_bytes) {
  const int n = plan.world_size();
  require(rank >= 0 && rank < n, "unit layout for rank " + std::to_string(rank) +
                                     " of a plan for " + std::to_string(n) +
                                     " ranks; the rank must be in [0, " + std::to_string(n) + ")");
  require(element_bytes >= 1, "unit layout for elements of " + std::to_string(element_bytes) +
                                  " bytes; an element has at least 1 byte");
  UnitLayout layout;
  layout.world_size = n;
  layout.rank = rank;
  layout.parameters.reserve(indices.size());
  std::vector<std::size_t> sharded;
  for (std::size_t index : indices) {
    require(index < plan.parameters().size(),
            "unit layout for parameter #" + std::to_string(index) + " of a plan with " +
                std::to_string(plan.parameters().size()) + " parameters");
    ParameterLayout p;
    p.plan_index = index;
    p.placement = plan.placements()[index];
    p.numel = plan.parameters()[index].numel();
    p.piece = held_piece(p.numel, p.placement, n, rank);
    const std::size_t i = layout.parameters.size();
    layout.parameters.push_back(p);
    switch (p.placement.placement) {
      case Placement::sharded:
        sharded.push_back(i);
        break;
      case Placement::whole: {
        auto it = std::find_if(
            layout.owners.begin(), layout.owners.end(),
            [&](const OwnerGroupLayout& g) { return g.owner == p.placement.owner_rank; });
        if (it == layout.owners.end()) {
          layout.owners.push_back(OwnerGroupLayout{p.placement.owner_rank, {}, 0, 0});
          it = layout.owners.end() - 1;
        }
        it->members.push_back(i);
        break;
      }
      case Placement::replicated:
        layout.replicated.push_back(i);
        break;
    }
  }
  std::sort(layout.owners.begin(), layout.owners.end(),
            [](const OwnerGroupLayout& a, const OwnerGroupLayout& b) { return a.owner < b.owner; });

  // Sharded: large pieces are gathered in place, the rest packed (a lone parameter always goes
  // in place: it needs no packing).
  for (std::size_t i : sharded) {
    const std::int64_t piece_bytes = layout.parameters[i].piece.padded * element_bytes;
    (piece_bytes >= direct_gather_bytes || sharded.size() == 1 ? layout.direct : layout.packed)
        .push_back(i);
  }
  for (std::size_t i : layout.packed) {
    ParameterLayout& p = layout.parameters[i];
    p.flat_offset = layout.flat_numel;
    p.full_offset = layout.packed_full_numel;
    layout.flat_numel += p.piece.padded;
    layout.packed_full_numel += p.numel;
  }
  layout.packed_numel = layout.flat_numel;
  for (std::size_t i : layout.direct) {
    layout.parameters[i].flat_offset = layout.flat_numel;
    layout.flat_numel += layout.parameters[i].piece.padded;
  }
  for (OwnerGroupLayout& g : layout.owners) {
    for (std::size_t i : g.members) {
      layout.parameters[i].flat_offset = g.numel;
      g.numel += layout.parameters[i].numel;
    }
  }

  // Full gradients.
  std::int64_t& grad_end = layout.full_grad_numel;
  for (std::size_t i : layout.packed) {
    layout.parameters[i].grad_offset = grad_end;
    grad_end += layout.parameters[i].numel;
  }
  for (std::size_t i : layout.direct) {
    layout.parameters[i].grad_offset = grad_end;
    grad_end += n * layout.parameters[i].piece.padded;
  }
  for (OwnerGroupLayout& g : layout.owners) {
    g.grad_offset = grad_end;
    for (std::size_t i : g.members) {
      layout.parameters[i].grad_offset = grad_end;
      grad_end += layout.parameters[i].numel;
    }
  }
  layout.replicated_grad_offset = grad_end;
  for (std::size_t i : layout.replicated) {
    layout.parameters[i].grad_offset = grad_end;
    grad_end += layout.parameters[i].numel;
  }

  // Packed pieces: rank r's piece of parameter p sits at r * packed_numel + p.flat_offset in the
  // rank-major buffers, and at its element offset in the whole parameter.
  for (std::size_t i : layout.packed) {
    const ParameterLayout& p = layout.parameters[i];
    for (int r = 0; r < n; ++r) {
      const ShardRange range = shard_range(p.numel, n, r);
      if (range.size == 0) {
        continue;
      }
      const std::int64_t rank_major = r * layout.packed_numel + p.flat_offset;
      layout.unpack.push_back(CopySegment{rank_major, p.full_offset + range.offset, range.size});
      layout.pack.push_back(CopySegment{p.grad_offset + range.offset, rank_major, range.size});
    }
  }
  return layout;
}

}  // namespace fsdp
