// The table fsdp-solve prints: one row per node with its layouts, collectives and costs.
#pragma once

#include "fsdp/solver/graph.hpp"
#include "fsdp/solver/simple_solver.hpp"
#include "fsdp/solver/solution.hpp"

namespace fsdp::apps {

void print_solution(const solver::Solution& solution, const solver::Graph& graph);

// For each matmul: the seed phase's candidates, each costed alone (compute over the devices,
// plus the all-reduce a contraction split needs), so that the seed choice can be checked by hand.
void print_seed_candidates(const solver::SimpleSolver& solver, const solver::Graph& graph);

}  // namespace fsdp::apps
