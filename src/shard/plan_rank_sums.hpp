// Per-rank sums of a plan's figures (bytes held, sent, loads) without a loop over the ranks. Every
// parameter adds a constant to a few ranges of ranks (piece_runs: the ranks with full pieces, the
// one with the rest, those with none; a whole parameter's owner and the others), so the sums are
// constant between the ends of those ranges: runs of ranks with equal sums, at most two more per
// range added, however many ranks there are (fsdp-plan at 10^6 ranks looped 10^6 times per
// parameter, and took 49 s). Private to src/shard.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "fsdp/core/error.hpp"
#include "fsdp/shard/shard_range.hpp"

namespace fsdp::detail {

// Ranks [first, first + count) whose sums are equal.
template <class Value>
struct RankRunOf {
  int first = 0;
  int count = 0;
  Value sum{};
};

template <class Value>
class RankSums {
 public:
  explicit RankSums(int ranks) : ranks_(ranks) {}

  // Adds value to every rank in [begin, end); source is handed back to plus (to name the
  // parameter when a sum overflows). Empty ranges are ignored.
  void add(int begin, int end, const Value& value, std::size_t source) {
    if (begin >= end) {
      return;
    }
    values_.push_back(value);
    const std::size_t index = values_.size() - 1;
    events_.push_back(Event{begin, true, index, source});
    events_.push_back(Event{end, false, index, source});
  }

  // The runs of equal sums covering [0, ranks), in rank order, adjacent runs never equal.
  // plus(sum, value, source) adds (checked: it may throw), minus(sum, value) takes back what plus
  // added, equal(a, b) compares sums. At each rank the values that end are taken back before the
  // ones that begin are added, so every partial sum is at most a real rank's sum and a checked
  // plus overflows only when a rank's sum does.
  template <class Plus, class Minus, class Equal>
  std::vector<RankRunOf<Value>> runs(Plus plus, Minus minus, Equal equal) {
    std::sort(events_.begin(), events_.end(), [](const Event& a, const Event& b) {
      return a.rank != b.rank ? a.rank < b.rank : (!a.begins && b.begins);
    });
    std::vector<RankRunOf<Value>> result;
    Value sum{};
    std::size_t next = 0;
    int rank = 0;
    while (rank < ranks_) {
      for (; next < events_.size() && events_[next].rank == rank; ++next) {
        const Event& event = events_[next];
        if (event.begins) {
          plus(sum, values_[event.value], event.source);
        } else {
          minus(sum, values_[event.value]);
        }
      }
      const int end = next < events_.size() ? std::min(events_[next].rank, ranks_) : ranks_;
      if (!result.empty() && equal(result.back().sum, sum)) {
        result.back().count += end - rank;
      } else {
        result.push_back(RankRunOf<Value>{rank, end - rank, sum});
      }
      rank = end;
    }
    return result;
  }

 private:
  struct Event {
    int rank = 0;
    bool begins = false;
    std::size_t value = 0;
    std::size_t source = 0;
  };
  int ranks_ = 0;
  std::vector<Value> values_;
  std::vector<Event> events_;
};

// Bytes per rank.
using ByteSums = RankSums<std::int64_t>;
using ByteRun = RankRunOf<std::int64_t>;

// Adds the bytes of every rank's piece of a sharded parameter (piece_runs).
inline void add_piece_bytes(ByteSums& sums, std::int64_t numel, std::int64_t element_bytes,
                            int world_size, std::size_t source) {
  for (const PieceRun& run : piece_runs(numel, world_size)) {
    sums.add(run.begin, run.end, run.size * element_bytes, source);
  }
}

// The runs of bytes per rank; a sum over 64 bits is an Error saying what held it ("the bytes one
// rank holds").
inline std::vector<ByteRun> byte_runs(ByteSums& sums) {
  return sums.runs(
      [](std::int64_t& sum, std::int64_t bytes, std::size_t) {
        if (__builtin_add_overflow(sum, bytes, &sum)) {
          throw Error("the bytes one rank holds overflow 64 bits");
        }
      },
      [](std::int64_t& sum, std::int64_t bytes) { sum -= bytes; },
      [](std::int64_t a, std::int64_t b) { return a == b; });
}

}  // namespace fsdp::detail
