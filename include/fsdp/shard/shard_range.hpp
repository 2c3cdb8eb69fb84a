// ShardRange: which elements of a sharded parameter one rank holds. The one place the rule is
// written; plans, strategies, estimates, units and checkpoints all ask here.
#pragma once

#include <algorithm>
#include <cstdint>

#include "fsdp/core/ceil_div.hpp"

namespace fsdp {

// Rank r's piece of a parameter of numel elements cut into world_size pieces: elements
// [offset, offset + size) of the flattened parameter.
struct ShardRange {
  // ceil(numel / world_size): every rank's piece in communication buffers, where the real
  // elements are followed by padding up to this size.
  std::int64_t padded = 0;
  // min(r * padded, numel): the first element (numel for an empty piece).
  std::int64_t offset = 0;
  // padded for the leading pieces, fewer for the one holding the last element, 0 after it (the
  // trailing pieces are empty when numel is not a multiple of world_size, or when numel <
  // world_size leaves more ranks than elements).
  std::int64_t size = 0;

  constexpr std::int64_t end() const { return offset + size; }
  constexpr bool operator==(const ShardRange& o) const {
    return padded == o.padded && offset == o.offset && size == o.size;
  }
  constexpr bool operator!=(const ShardRange& o) const { return !(*this == o); }
};

// For numel >= 0, world_size >= 1 and 0 <= rank < world_size (callers validate them: a plan's
// world size and a group's rank are checked where they enter). Pure: no MPI, no allocation.
constexpr ShardRange shard_range(std::int64_t numel, int world_size, int rank) {
  const std::int64_t padded = ceil_div(numel, std::int64_t{world_size});
  const std::int64_t offset = std::min(padded * rank, numel);
  return ShardRange{padded, offset, std::min(offset + padded, numel) - offset};
}

// The ranks of a world_size-rank world grouped by the size of their piece of a parameter of
// numel elements: ranks [0, full) hold `padded` elements, rank `full` holds the rest when numel is
// not a multiple of padded, and the ranks after it hold none. Sums over ranks (estimates, loads,
// balance) add each group once instead of looping over every rank.
struct PieceRun {
  int begin = 0;  // ranks [begin, end) hold `size` elements each
  int end = 0;
  std::int64_t size = 0;
};
struct PieceRuns {
  PieceRun runs[3];
  int count = 0;  // the non-empty runs, in rank order
  const PieceRun* begin() const { return runs; }
  const PieceRun* end() const { return runs + count; }
};
// For numel >= 0 and world_size >= 1; the runs cover [0, world_size) and agree with shard_range.
constexpr PieceRuns piece_runs(std::int64_t numel, int world_size) {
  const std::int64_t padded = ceil_div(numel, std::int64_t{world_size});
  // Ranks with a full piece: numel / padded of them (none when numel is 0).
  const int full = padded == 0 ? 0 : static_cast<int>(numel / padded);
  const bool rest = padded != 0 && numel % padded != 0;
  PieceRuns result{};
  const auto add = [&result](int begin, int end, std::int64_t size) {
    if (begin < end) {
      result.runs[result.count++] = PieceRun{begin, end, size};
    }
  };
  add(0, full, padded);
  add(full, full + (rest ? 1 : 0), rest ? numel - full * padded : 0);
  add(full + (rest ? 1 : 0), world_size, 0);
  return result;
}

}  // namespace fsdp
