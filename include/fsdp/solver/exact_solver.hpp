// ExactSolver: the optimum of the cost model, by dynamic programming over a topological order.
#pragma once

#include <cstddef>

#include "fsdp/solver/cost_model.hpp"
#include "fsdp/solver/graph.hpp"
#include "fsdp/solver/solution.hpp"

namespace fsdp::solver {

// Nodes are decided one at a time in a topological order that places each input and parameter
// just before its first consumer. A DP state is the strategies of the decided nodes that still
// have undecided consumers (the frontier); the cost of a node's edges is known as soon as the
// node is decided, so keeping the cheapest way to reach each frontier state is exact. The work
// grows with the number of strategies to the power of the frontier width: chains and trees have
// width 1, a transformer layer about 4. Gives up with fsdp::Error past max_states.
class ExactSolver {
 public:
  explicit ExactSolver(Machine machine = Machine(), std::size_t max_states = std::size_t{1} << 20);

  Solution solve(const Graph& graph) const;

  const Machine& machine() const { return machine_; }

 private:
  Machine machine_;
  std::size_t max_states_;
};

}  // namespace fsdp::solver
