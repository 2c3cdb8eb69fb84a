#include "fsdp/solver/broadcast_solution.hpp"

#include "fsdp/comm/on_root.hpp"

namespace fsdp::solver {

Solution solve_on_root(ProcessGroup& group, const std::function<Solution()>& solve, int root) {
  return Solution::from_json(on_root(
      group, "compute the solution", [&] { return solve().to_json(); }, root));
}

Solution broadcast_solution(ProcessGroup& group, const Solution& solution, int root) {
  return solve_on_root(
      group, [&] { return solution; }, root);
}

}  // namespace fsdp::solver
