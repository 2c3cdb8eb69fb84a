// Internal: the exact solver's dynamic programming over frontier states (docs/solver.md,
// "ExactSolver"), also run by SimpleSolver on a reduced set of strategies per node.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "step_model.hpp"

namespace fsdp::solver::detail {

// What a search minimizes.
enum class Objective : std::uint8_t {
  seconds,        // no memory limit: one way per state, the fastest
  within_budget,  // the fastest way whose peak fits the budget
  smallest_peak,  // the way with the smallest peak (nothing fits)
};

// The strategy of every node, or an empty list when no way fits the budget. `allowed`, when not
// empty, lists per node the strategies the search may give it (in increasing order); otherwise
// all. Throws fsdp::Error past max_states ways to reach the states of one step, or past
// max_work ways extended by a strategy in all (0: no limit). `work`, when given, receives the ways
// extended, also when it throws.
std::vector<int> pareto_search(const StepModel& model, Objective objective, std::size_t max_states,
                               const std::vector<std::vector<int>>& allowed = {},
                               std::int64_t max_work = 0, std::int64_t* work = nullptr);

}  // namespace fsdp::solver::detail
