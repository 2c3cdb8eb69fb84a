// Shard geometry (shard_range) and a unit's buffer layout (UnitLayout), checked for every world
// size 1..5 and every rank in one process: both are pure arithmetic, no communication.
#include <algorithm>
#include <boost/test/unit_test.hpp>
#include <numeric>
#include <string>
#include <vector>

#include "error_message.hpp"
#include "fsdp/shard/shard_range.hpp"
#include "fsdp/shard/sharding_strategy.hpp"
#include "fsdp/unit/unit_layout.hpp"

using namespace fsdp;
using namespace fsdp::test;

namespace {

// The smallest s with s * n >= numel, found by counting (not by the formula under test).
std::int64_t smallest_piece(std::int64_t numel, int n) {
  std::int64_t s = 0;
  while (s * n < numel) {
    ++s;
  }
  return s;
}

// Marks [offset, offset + count) in `seen`; false when a mark falls outside or lands twice.
bool mark(std::vector<int>& seen, std::int64_t offset, std::int64_t count) {
  if (offset < 0 || count < 0 || offset + count > static_cast<std::int64_t>(seen.size())) {
    return false;
  }
  bool once = true;
  for (std::int64_t k = offset; k < offset + count; ++k) {
    once = ++seen[static_cast<std::size_t>(k)] == 1 && once;
  }
  return once;
}

// Copies as ShardedUnit does, counting the elements read and written: false when a segment is
// empty, reaches outside a buffer, or reads or writes an element twice.
bool run_segments(const std::vector<CopySegment>& segments, const std::vector<std::int64_t>& source,
                  std::vector<std::int64_t>& target, std::vector<int>& read,
                  std::vector<int>& written) {
  for (const CopySegment& s : segments) {
    if (s.count <= 0 || !mark(read, s.from, s.count) || !mark(written, s.to, s.count)) {
      return false;
    }
    std::copy_n(source.begin() + s.from, s.count, target.begin() + s.to);
  }
  return true;
}

bool all_once(const std::vector<int>& seen) {
  for (int count : seen) {
    if (count != 1) {
      return false;
    }
  }
  return true;
}

// One unit "u" holding every kind of parameter: sharded ones of several sizes (one shorter than
// most world sizes), whole ones with two owners (one owner holding two, not adjacent in the
// plan), a replicated one; and a second unit "v" with a lone sharded parameter.
ShardingPlan mixed_plan(int n) {
  const std::vector<ParameterInfo> parameters = {
      {"u.a", {7, 5}, DType::f64, "u", false},  {"u.b", {3}, DType::f64, "u", false},
      {"u.w1", {2, 2}, DType::f64, "u", false}, {"u.c", {1}, DType::f64, "u", false},
      {"u.w2", {3}, DType::f64, "u", false},    {"u.g", {2}, DType::f64, "u", true},
      {"u.w3", {5}, DType::f64, "u", false},    {"u.d", {16}, DType::f64, "u", false},
      {"v.a", {9}, DType::f64, "v", false},
  };
  std::vector<ParameterPlacement> placements(parameters.size());
  placements[2] = ParameterPlacement{Placement::whole, n - 1};
  placements[4] = ParameterPlacement{Placement::whole, 0};
  placements[5] = ParameterPlacement{Placement::replicated, -1};
  placements[6] = ParameterPlacement{Placement::whole, n - 1};
  return ShardingPlan("mixed", n, parameters, placements);
}

// The unit of every plan parameter whose unit() is `unit`, in plan order.
std::vector<std::size_t> unit_indices(const ShardingPlan& plan, const std::string& unit) {
  std::vector<std::size_t> indices;
  for (std::size_t i = 0; i < plan.parameters().size(); ++i) {
    if (plan.parameters()[i].unit() == unit) {
      indices.push_back(i);
    }
  }
  return indices;
}

// Every property of one unit's layouts on all ranks of the plan's world.
void check_unit(const ShardingPlan& plan, const std::vector<std::size_t>& indices,
                std::int64_t direct_gather_bytes) {
  const int n = plan.world_size();
  const std::int64_t element = 8;
  std::vector<UnitLayout> layouts;
  for (int r = 0; r < n; ++r) {
    layouts.push_back(make_unit_layout(plan, indices, r, element, direct_gather_bytes));
  }
  const UnitLayout& first = layouts.front();
  BOOST_TEST_CONTEXT("world size " << n << ", unit of parameter #" << indices.front()
                                   << ", direct_gather_bytes " << direct_gather_bytes) {
    BOOST_TEST_REQUIRE(first.parameters.size() == indices.size());

    // Every parameter is in exactly one group, of its placement.
    std::vector<int> grouped(indices.size(), 0);
    std::int64_t sharded = 0;
    for (std::size_t i = 0; i < indices.size(); ++i) {
      BOOST_TEST(first.parameters[i].plan_index == indices[i]);
      BOOST_TEST(first.parameters[i].numel == plan.parameters()[indices[i]].numel());
      sharded += plan.placements()[indices[i]].placement == Placement::sharded;
    }
    for (std::size_t i : first.packed) {
      ++grouped[i];
      BOOST_TEST((first.parameters[i].placement.placement == Placement::sharded));
      BOOST_TEST(sharded > 1);
      BOOST_TEST(first.parameters[i].piece.padded * element < direct_gather_bytes);
    }
    for (std::size_t i : first.direct) {
      ++grouped[i];
      BOOST_TEST((first.parameters[i].placement.placement == Placement::sharded));
      BOOST_TEST(
          (sharded == 1 || first.parameters[i].piece.padded * element >= direct_gather_bytes));
    }
    int previous_owner = -1;
    for (const OwnerGroupLayout& g : first.owners) {
      BOOST_TEST(g.owner > previous_owner);  // ascending, one group per owner
      previous_owner = g.owner;
      std::vector<int> group_seen(static_cast<std::size_t>(g.numel), 0);
      std::int64_t next_grad = g.grad_offset;
      for (std::size_t i : g.members) {
        ++grouped[i];
        const ParameterLayout& p = first.parameters[i];
        BOOST_TEST((p.placement.placement == Placement::whole));
        BOOST_TEST(p.placement.owner_rank == g.owner);
        BOOST_TEST(mark(group_seen, p.flat_offset, p.numel));
        BOOST_TEST(p.grad_offset == next_grad);  // the group's gradients are contiguous
        next_grad += p.numel;
      }
      BOOST_TEST(all_once(group_seen));
    }
    std::int64_t next_replicated = first.replicated_grad_offset;
    for (std::size_t i : first.replicated) {
      ++grouped[i];
      BOOST_TEST((first.parameters[i].placement.placement == Placement::replicated));
      BOOST_TEST(first.parameters[i].grad_offset == next_replicated);
      next_replicated += first.parameters[i].numel;
    }
    BOOST_TEST(next_replicated == first.full_grad_numel);
    for (int count : grouped) {
      BOOST_TEST(count == 1);
    }

    // Sharded pieces: ceil(numel / N) padded, covering [0, numel) once over the ranks, empty
    // where numel < N leaves ranks without elements.
    for (std::size_t i = 0; i < indices.size(); ++i) {
      const ParameterLayout& p = first.parameters[i];
      std::vector<int> seen(static_cast<std::size_t>(p.numel), 0);
      for (int r = 0; r < n; ++r) {
        const ShardRange& piece = layouts[static_cast<std::size_t>(r)].parameters[i].piece;
        switch (p.placement.placement) {
          case Placement::sharded:
            BOOST_TEST(piece.padded == smallest_piece(p.numel, n));
            BOOST_TEST(piece.size <= piece.padded);
            if (p.numel < n && r >= p.numel) {
              BOOST_TEST(piece.size == 0);
            }
            BOOST_TEST(mark(seen, piece.offset, piece.size));
            break;
          case Placement::whole:
            BOOST_TEST(piece.size == (r == p.placement.owner_rank ? p.numel : 0));
            BOOST_TEST(mark(seen, 0, piece.size));
            break;
          case Placement::replicated:
            BOOST_TEST(piece.offset == 0);
            BOOST_TEST(piece.size == p.numel);
            seen.assign(seen.size(), 1);
            break;
        }
      }
      BOOST_TEST(all_once(seen), "parameter #" << indices[i] << " covered once");
    }

    // Offsets do not depend on the rank (the collectives line up); only the pieces do.
    for (const UnitLayout& other : layouts) {
      BOOST_TEST(other.flat_numel == first.flat_numel);
      BOOST_TEST(other.packed_numel == first.packed_numel);
      BOOST_TEST(other.packed_full_numel == first.packed_full_numel);
      BOOST_TEST(other.full_grad_numel == first.full_grad_numel);
      BOOST_TEST(other.packed == first.packed);
      BOOST_TEST(other.direct == first.direct);
      BOOST_TEST(other.unpack == first.unpack);
      BOOST_TEST(other.pack == first.pack);
      for (std::size_t i = 0; i < indices.size(); ++i) {
        BOOST_TEST(other.parameters[i].flat_offset == first.parameters[i].flat_offset);
        BOOST_TEST(other.parameters[i].full_offset == first.parameters[i].full_offset);
        BOOST_TEST(other.parameters[i].grad_offset == first.parameters[i].grad_offset);
      }
    }

    // Flat buffer: packed padded pieces fill [0, packed_numel), direct ones the rest.
    std::vector<int> flat(static_cast<std::size_t>(first.flat_numel), 0);
    std::vector<int> packed_full(static_cast<std::size_t>(first.packed_full_numel), 0);
    std::vector<int> grads(static_cast<std::size_t>(first.full_grad_numel), 0);
    for (std::size_t i : first.packed) {
      const ParameterLayout& p = first.parameters[i];
      BOOST_TEST(p.flat_offset + p.piece.padded <= first.packed_numel);
      BOOST_TEST(mark(flat, p.flat_offset, p.piece.padded));
      BOOST_TEST(mark(packed_full, p.full_offset, p.numel));
      BOOST_TEST(mark(grads, p.grad_offset, p.numel));
    }
    for (std::size_t i : first.direct) {
      const ParameterLayout& p = first.parameters[i];
      BOOST_TEST(p.flat_offset >= first.packed_numel);
      BOOST_TEST(mark(flat, p.flat_offset, p.piece.padded));
      BOOST_TEST(mark(grads, p.grad_offset, n * p.piece.padded));  // N padded pieces
    }
    for (const OwnerGroupLayout& g : first.owners) {
      BOOST_TEST(mark(grads, g.grad_offset, g.numel));
    }
    for (std::size_t i : first.replicated) {
      BOOST_TEST(mark(grads, first.parameters[i].grad_offset, first.parameters[i].numel));
    }
    BOOST_TEST(all_once(flat));
    BOOST_TEST(all_once(packed_full));
    BOOST_TEST(all_once(grads));

    // Unpack: fill the rank-major gather buffer as the all_gather would (rank r's chunk from
    // rank r's layout; padding -1), each element holding where it belongs in the packed full
    // buffer. Every element must land there exactly once.
    const std::int64_t gathered_numel = n * first.packed_numel;
    std::vector<std::int64_t> gathered(static_cast<std::size_t>(gathered_numel), -1);
    for (int r = 0; r < n; ++r) {
      const UnitLayout& layout = layouts[static_cast<std::size_t>(r)];
      for (std::size_t i : layout.packed) {
        const ParameterLayout& p = layout.parameters[i];
        for (std::int64_t j = 0; j < p.piece.size; ++j) {
          gathered[static_cast<std::size_t>(r * layout.packed_numel + p.flat_offset + j)] =
              p.full_offset + p.piece.offset + j;
        }
      }
    }
    std::vector<std::int64_t> unpacked(packed_full.size(), -1);
    std::vector<int> written(packed_full.size(), 0);
    std::vector<int> read(gathered.size(), 0);
    BOOST_TEST_REQUIRE(run_segments(first.unpack, gathered, unpacked, read, written));
    BOOST_TEST(all_once(written));
    for (std::size_t k = 0; k < unpacked.size(); ++k) {
      BOOST_TEST(unpacked[k] == static_cast<std::int64_t>(k));
    }

    // Pack: the full gradient holding its own indices; rank r's chunk of the send buffer must
    // get the gradient of exactly the pieces rank r owns, and leave the padding alone.
    std::vector<std::int64_t> full_grad(grads.size());
    std::iota(full_grad.begin(), full_grad.end(), std::int64_t{0});
    std::vector<std::int64_t> send(gathered.size(), -1);
    std::vector<int> sent(gathered.size(), 0);
    std::vector<int> taken(grads.size(), 0);
    BOOST_TEST_REQUIRE(run_segments(first.pack, full_grad, send, taken, sent));
    for (int r = 0; r < n; ++r) {
      const UnitLayout& layout = layouts[static_cast<std::size_t>(r)];
      for (std::size_t i : layout.packed) {
        const ParameterLayout& p = layout.parameters[i];
        for (std::int64_t j = 0; j < p.piece.padded; ++j) {
          const std::int64_t expected = j < p.piece.size ? p.grad_offset + p.piece.offset + j : -1;
          BOOST_TEST(send[static_cast<std::size_t>(r * layout.packed_numel + p.flat_offset + j)] ==
                     expected);
        }
      }
    }
    // Every packed gradient element is taken once (they sit first in the full gradient).
    for (std::int64_t k = 0; k < first.packed_full_numel; ++k) {
      BOOST_TEST(taken[static_cast<std::size_t>(k)] == 1);
    }
  }
}

}  // namespace

BOOST_AUTO_TEST_CASE(ceil_div_rounds_up) {
  static_assert(ceil_div(0, 3) == 0);
  static_assert(ceil_div(1, 3) == 1);
  static_assert(ceil_div(3, 3) == 1);
  static_assert(ceil_div(4, 3) == 2);
  static_assert(ceil_div(std::uint64_t{10}, std::uint64_t{1}) == 10u);
  BOOST_TEST(ceil_div(std::int64_t{1} << 40, std::int64_t{3}) == 366503875926);
}

BOOST_AUTO_TEST_CASE(shard_range_cases) {
  // numel = 0: every piece empty.
  for (int n = 1; n <= 4; ++n) {
    for (int r = 0; r < n; ++r) {
      BOOST_TEST((shard_range(0, n, r) == ShardRange{0, 0, 0}));
    }
  }
  // numel < N: one element each, then empty pieces at the end.
  BOOST_TEST((shard_range(3, 5, 0) == ShardRange{1, 0, 1}));
  BOOST_TEST((shard_range(3, 5, 2) == ShardRange{1, 2, 1}));
  BOOST_TEST((shard_range(3, 5, 3) == ShardRange{1, 3, 0}));
  BOOST_TEST((shard_range(3, 5, 4) == ShardRange{1, 3, 0}));
  // Divisible: equal pieces.
  BOOST_TEST((shard_range(12, 4, 0) == ShardRange{3, 0, 3}));
  BOOST_TEST((shard_range(12, 4, 3) == ShardRange{3, 9, 3}));
  // Not divisible: a short last piece ...
  BOOST_TEST((shard_range(10, 4, 2) == ShardRange{3, 6, 3}));
  BOOST_TEST((shard_range(10, 4, 3) == ShardRange{3, 9, 1}));
  // ... or an empty one although numel >= N (5 = 2 + 2 + 1 + 0).
  BOOST_TEST((shard_range(5, 4, 2) == ShardRange{2, 4, 1}));
  BOOST_TEST((shard_range(5, 4, 3) == ShardRange{2, 5, 0}));
  BOOST_TEST((shard_range(1, 1, 0) == ShardRange{1, 0, 1}));
  BOOST_TEST(shard_range(10, 4, 3).end() == 10);
}

BOOST_AUTO_TEST_CASE(shard_range_covers_every_element_once) {
  for (int n = 1; n <= 9; ++n) {
    for (std::int64_t numel = 0; numel <= 40; ++numel) {
      BOOST_TEST_CONTEXT("numel " << numel << " on " << n << " ranks") {
        std::vector<int> seen(static_cast<std::size_t>(numel), 0);
        std::int64_t next = 0;
        for (int r = 0; r < n; ++r) {
          const ShardRange piece = shard_range(numel, n, r);
          BOOST_TEST(piece.padded == smallest_piece(numel, n));
          BOOST_TEST(piece.offset == next);  // in rank order, no gap
          BOOST_TEST(piece.size >= 0);
          BOOST_TEST(piece.size <= piece.padded);
          // Only the piece holding the last element may be short; all later ones are empty.
          BOOST_TEST((piece.size == piece.padded || piece.end() == numel));
          BOOST_TEST(mark(seen, piece.offset, piece.size));
          next = piece.end();
        }
        BOOST_TEST(all_once(seen));
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(unit_layouts_of_every_rank_fit_together) {
  for (int n = 1; n <= 5; ++n) {
    const ShardingPlan mixed = mixed_plan(n);
    // 0: everything direct; 1 << 30: everything packed; 24 bytes: pieces of 3 and more fp64
    // elements direct, the rest packed.
    for (std::int64_t direct_gather_bytes :
         {std::int64_t{0}, std::int64_t{1} << 30, std::int64_t{24}}) {
      check_unit(mixed, unit_indices(mixed, "u"), direct_gather_bytes);
      check_unit(mixed, unit_indices(mixed, "v"), direct_gather_bytes);
      for (const char* strategy : {"full", "layerwise"}) {
        const ShardingPlan plan = make_strategy(strategy)->make_plan(mixed.parameters(), n);
        check_unit(plan, unit_indices(plan, "u"), direct_gather_bytes);
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(a_lone_sharded_parameter_is_gathered_in_place) {
  const ShardingPlan plan = mixed_plan(3);
  const UnitLayout layout = make_unit_layout(plan, unit_indices(plan, "v"), 1, 8, 1 << 30);
  BOOST_TEST(layout.packed.empty());
  BOOST_TEST(layout.direct.size() == 1u);
  BOOST_TEST(layout.unpack.empty());
  BOOST_TEST(layout.full_grad_numel == 9);  // 3 padded pieces of 3
}

BOOST_AUTO_TEST_CASE(bad_layout_arguments_are_named) {
  const ShardingPlan plan = mixed_plan(3);
  BOOST_CHECK_EXCEPTION(make_unit_layout(plan, {0}, 3, 8, 0), Error,
                        message_has("rank 3 of a plan for 3 ranks"));
  BOOST_CHECK_EXCEPTION(make_unit_layout(plan, {0}, -1, 8, 0), Error,
                        message_has("must be in [0, 3)"));
  BOOST_CHECK_EXCEPTION(make_unit_layout(plan, {0}, 0, 0, 0), Error,
                        message_has("elements of 0 bytes"));
  BOOST_CHECK_EXCEPTION(make_unit_layout(plan, {0, 9}, 0, 8, 0), Error,
                        message_has("parameter #9 of a plan with 9 parameters"));
}
