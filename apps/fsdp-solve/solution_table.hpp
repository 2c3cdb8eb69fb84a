// The table fsdp-solve prints: one row per node with its layouts, collectives and costs.
#pragma once

#include "fsdp/solver/graph.hpp"
#include "fsdp/solver/solution.hpp"

namespace fsdp::apps {

void print_solution(const solver::Solution& solution, const solver::Graph& graph);

}  // namespace fsdp::apps
