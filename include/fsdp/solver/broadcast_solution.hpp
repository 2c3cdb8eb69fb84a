// Solving on one rank and handing the solution to all: every rank reads the same layouts.
#pragma once

#include <functional>
#include <string>

#include "fsdp/comm/process_group.hpp"
#include "fsdp/solver/solution.hpp"

namespace fsdp::solver {

// Collective over group. Runs solve() on `root` only, which returns it as solved; the root
// serializes it (Solution::to_json) for the other ranks, which return it as read back: the same
// Solution (doubles round-trip exactly). If solve() throws on the root, every rank throws
// fsdp::Error "fsdp: rank <root> could not compute the solution: <the root's message>" (no rank
// is left waiting; see on_root).
Solution solve_on_root(ProcessGroup& group, const std::function<Solution()>& solve, int root = 0);

// Collective over group: the root's solution (its argument; the others' is ignored) on every
// rank.
Solution broadcast_solution(ProcessGroup& group, const Solution& solution, int root = 0);

}  // namespace fsdp::solver
