// Internal: the peak of a plan under single-node changes, for the moves of SimpleSolver's budget
// search.
#pragma once

#include <cstdint>
#include <limits>
#include <vector>

#include "step_model.hpp"

namespace fsdp::solver::detail {

// The peak of a plan under single-node changes, in O(degree log n) per change: a segment tree
// over the steps (the forward of every node at its index, the backward of node t at n + t) holds
// each step's bytes without the persistent ones; a node's activation and gradient are range
// additions over the steps of their live ranges, conversion buffers point additions at their
// consumer's steps, by the rules of memory_profile (which SimpleSolver checks it against after
// its moves). Positions that are no step hold a large negative number, so they are never the
// peak.
class PeakTracker {
 public:
  PeakTracker(const StepModel& model, const std::vector<int>& choice);

  std::int64_t peak() const { return state_ + high_[1]; }

  // Node v takes strategy s.
  void move(int v, int s);

 private:
  static constexpr std::int64_t kNoStep = std::numeric_limits<std::int64_t>::min() / 4;

  // Adds (sign +1) or removes (-1) what node v holds under its current strategy: its state, its
  // activation and gradient, and the buffers of its input edges; with edges_out also those of the
  // edges to its consumers (a move changes both; building visits every edge once).
  void add_node(int v, int sign, bool edges_out);
  void add_edge(int t, int k, int sign);
  // Adds bytes to the steps from..to (inclusive).
  void add(int from, int to, std::int64_t bytes);

  const StepModel& model_;
  std::vector<int> choice_;
  int n_;
  int size_ = 1;
  std::int64_t state_ = 0;
  std::vector<std::int64_t> high_;     // the highest step below a tree node, its additions included
  std::vector<std::int64_t> pending_;  // additions to a whole subtree, not pushed down
};

}  // namespace fsdp::solver::detail
