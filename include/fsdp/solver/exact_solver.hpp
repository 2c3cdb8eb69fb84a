// ExactSolver: the optimum of the cost model, by dynamic programming over a topological order.
#pragma once

#include <cstddef>

#include "fsdp/solver/cost_model.hpp"
#include "fsdp/solver/graph.hpp"
#include "fsdp/solver/solution.hpp"
#include "fsdp/solver/step_options.hpp"

namespace fsdp::solver {

// Nodes are decided one at a time in a topological order that places each input and parameter
// just before its first consumer. A DP state is the strategies of the decided nodes that still
// have undecided consumers (the frontier); the cost of a node's edges is known as soon as the
// node is decided, so keeping the cheapest way to reach each frontier state is exact. The work
// grows with the number of strategies to the power of the frontier width: chains and trees have
// width 1, a transformer layer about 4.
//
// Under a memory budget a state keeps every way to reach it that no other beats on all of: the
// seconds so far, the highest memory of the steps so far, and the bytes still held (each plus
// the persistent bytes so far); the memory of a step depends only on those and the frontier, so
// this is exact too (docs/solver.md). Ways whose memory already exceeds the budget are dropped.
// When none is left, the same search for the smallest peak gives the solution (fits_budget
// false). Gives up with fsdp::Error past max_states ways to reach the states of one step.
class ExactSolver {
 public:
  explicit ExactSolver(Machine machine = Machine(), std::size_t max_states = std::size_t{1} << 20,
                       StepOptions options = StepOptions());
  ExactSolver(Machine machine, StepOptions options);

  Solution solve(const Graph& graph) const;

  const Machine& machine() const { return machine_; }
  const StepOptions& options() const { return options_; }

 private:
  Machine machine_;
  std::size_t max_states_;
  StepOptions options_;
};

}  // namespace fsdp::solver
