// SimpleSolver: the seed's four phases (parse, seed, propagate, export), fast on large graphs.
#pragma once

#include <vector>

#include "fsdp/solver/cost_model.hpp"
#include "fsdp/solver/graph.hpp"
#include "fsdp/solver/solution.hpp"
#include "fsdp/solver/step_options.hpp"
#include "fsdp/solver/strategy.hpp"

namespace fsdp::solver {

// A matmul's seed candidate, costed on its own: compute over the devices plus the all-reduce a
// contraction split needs before its result is usable. The seed phase keeps the cheapest.
struct SeedCandidate {
  Strategy strategy;
  double compute_s = 0;
  // All-reduce of the output (along the axes where it is a partial sum) for a contraction split,
  // none otherwise.
  Transfer communication;
  double total_s() const { return compute_s + communication.seconds; }
};

struct SolverStats {
  int seeded = 0;                 // matmuls given a seed strategy
  int propagated = 0;             // nodes decided by propagation from decided neighbours
  int conflicts = 0;              // nodes whose decided neighbours wanted different layouts
  int refinement_sweeps = 0;      // rounds of tree-block re-optimization until no gain
  int changed_in_refinement = 0;  // strategy changes those rounds made
  int restarts = 0;               // all-replicated starts refined too
  int relaid = 0;                 // 2-D plans improved by re-laying chains over the mesh axes
  int budget_rounds = 0;          // refinements with a weight on memory, under a budget
  int recombinations = 0;         // exact searches over the strategies the budget search visited
  int budget_moves = 0;           // single-node moves that sped up the plan within the budget
};

class SimpleSolver {
 public:
  // Plans what options say (default: the forward pass, no memory budget).
  explicit SimpleSolver(Machine machine = Machine(), StepOptions options = StepOptions());

  // Seed matmuls with their cheapest candidate; propagate layouts forward and backward from
  // decided nodes to the others, each undecided node taking the strategy cheapest against its
  // decided neighbours (a conflict when they disagree: the lower total, resharding included,
  // wins); then refine: re-optimize tree-shaped blocks of the graph exactly with the rest held,
  // alternating the blocks, until the total stops falling; unless that plan provably cannot be
  // beaten, refine the all-replicated plan too and keep the cheaper; on a 2-D mesh, re-lay the
  // plan over the mesh axes (an exact search over each node's strategy with the axes swapped or
  // spread over both). Under a memory budget, search a weight on the bytes each node keeps until
  // the fastest plan found fits, then mixes of the plans visited, exact searches around each
  // node and moves of one or two nodes (docs/solver.md). Export: evaluate(); when no plan fits,
  // the one with the smallest peak found, with fits_budget false.
  Solution solve(const Graph& graph);

  // The seed candidates of matmul / batched_matmul node `index`: split batch (each row
  // dimension), split contracting, split output features, in that order; only the replicated
  // strategy when no dimension can be cut.
  std::vector<SeedCandidate> seed_candidates(const Graph& graph, int index) const;

  const Machine& machine() const { return machine_; }
  const StepOptions& options() const { return options_; }
  const SolverStats& stats() const { return stats_; }

 private:
  Machine machine_;
  StepOptions options_;
  SolverStats stats_;
};

}  // namespace fsdp::solver
