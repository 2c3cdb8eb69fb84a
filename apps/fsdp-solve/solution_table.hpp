// fsdp-solve's tables: the solution node by node with its memory, the parameters' outcomes, and
// the seed candidates of every matmul.
#pragma once

#include <string>

#include "fsdp/solver/graph.hpp"
#include "fsdp/solver/simple_solver.hpp"
#include "fsdp/solver/solution.hpp"

namespace fsdp::apps {

// "4.0 MiB", "512 B".
std::string bytes_text(double bytes);

void print_solution(const solver::Solution& solution, const solver::Graph& graph);
void print_seed_candidates(const solver::SimpleSolver& solver, const solver::Graph& graph);

}  // namespace fsdp::apps
