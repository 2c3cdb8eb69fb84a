// The elements one rank sends in a collective over n ranks by the ring algorithms of
// docs/plans.md ("Bytes sent per step"), in blocks of ceil(count / n) elements. Every function is
// 0 on one rank. fsdp-bench counts the bytes of a step with them, and a dialled network
// (dialled_network.hpp) charges a collective's time by them.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <numeric>
#include <vector>

#include "fsdp/core/ceil_div.hpp"

namespace fsdp::ring {

inline std::int64_t block(std::size_t count, int n) {
  return ceil_div(static_cast<std::int64_t>(count), std::int64_t{n});
}
// n - 1 steps, each forwarding one rank's chunk of count elements.
inline std::int64_t all_gather(std::size_t count, int n) {
  return (n - 1) * static_cast<std::int64_t>(count);
}
// n - 1 steps, each sending one partial sum of a chunk of count elements.
inline std::int64_t reduce_scatter(std::size_t count, int n) {
  return (n - 1) * static_cast<std::int64_t>(count);
}
// A ring moves every chunk padded to the largest.
inline std::int64_t all_gather_v(const std::vector<std::size_t>& counts, int n) {
  return all_gather(counts.empty() ? 0 : *std::max_element(counts.begin(), counts.end()), n);
}
// Reduce-scatter then all-gather of blocks.
inline std::int64_t all_reduce(std::size_t count, int n) {
  return 2 * (n - 1) * block(count, n);
}
// Scatter (the root sends n - 1 blocks) then ring all-gather of the blocks.
inline std::int64_t broadcast(std::size_t count, int n, bool root) {
  return (root ? 2 : 1) * (n - 1) * block(count, n);
}
// Ring reduce-scatter of blocks, then every other rank sends its block to the root.
inline std::int64_t reduce(std::size_t count, int n, bool root) {
  return (root ? n - 1 : n) * block(count, n);
}

// The root sends every other rank its chunk; the others send nothing.
inline std::int64_t scatter_v(const std::vector<std::size_t>& counts, int root, int rank) {
  if (rank != root || root < 0 || static_cast<std::size_t>(root) >= counts.size()) {
    return 0;
  }
  const std::size_t all = std::accumulate(counts.begin(), counts.end(), std::size_t{0});
  return static_cast<std::int64_t>(all - counts[static_cast<std::size_t>(root)]);
}

}  // namespace fsdp::ring
