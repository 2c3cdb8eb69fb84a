#include "fsdp/solver/exact_solver.hpp"

#include <string>

#include "fsdp/core/error.hpp"
#include "pareto_search.hpp"

namespace fsdp::solver {

ExactSolver::ExactSolver(Machine machine, std::size_t max_states, StepOptions options)
    : machine_(std::move(machine)), max_states_(max_states), options_(options) {
  machine_.validate();
  options_.validate();
}

ExactSolver::ExactSolver(Machine machine, StepOptions options)
    : ExactSolver(std::move(machine), std::size_t{1} << 20, options) {}

Solution ExactSolver::solve(const Graph& graph) const {
  const detail::StepModel model(graph, machine_, options_);
  for (std::size_t v = 0; v < graph.size(); ++v) {
    // A state keeps one byte per frontier node.
    require(model.count(static_cast<int>(v)) <= 255, "exact solver: node '" +
                                                         graph.node(static_cast<int>(v)).id +
                                                         "' has more than 255 strategies");
  }
  std::vector<int> choice;
  if (options_.memory_budget_bytes <= 0) {
    choice = detail::pareto_search(model, detail::Objective::seconds, max_states_);
  } else {
    choice = detail::pareto_search(model, detail::Objective::within_budget, max_states_);
    if (choice.empty()) {
      choice = detail::pareto_search(model, detail::Objective::smallest_peak, max_states_);
    }
  }
  return detail::evaluate(model, choice, "exact");
}

}  // namespace fsdp::solver
