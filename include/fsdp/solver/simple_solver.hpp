// SimpleSolver: the seed's four phases (parse, seed, propagate, export), fast on large graphs.
#pragma once

#include <vector>

#include "fsdp/solver/cost_model.hpp"
#include "fsdp/solver/graph.hpp"
#include "fsdp/solver/solution.hpp"
#include "fsdp/solver/strategy.hpp"

namespace fsdp::solver {

// A matmul's seed candidate, costed on its own: compute over the devices plus the all-reduce a
// contraction split needs before its result is usable. The seed phase keeps the cheapest.
struct SeedCandidate {
  Strategy strategy;
  double compute_s = 0;
  Transfer communication;  // all-reduce of the output for split_contracting, none otherwise
  double total_s() const { return compute_s + communication.seconds; }
};

struct SolverStats {
  int seeded = 0;                 // matmuls given a seed strategy
  int propagated = 0;             // nodes decided by propagation from decided neighbours
  int conflicts = 0;              // nodes whose decided neighbours wanted different layouts
  int refinement_sweeps = 0;      // rounds of tree-block re-optimization until no gain
  int changed_in_refinement = 0;  // strategy changes those rounds made
  int restarts = 0;               // 1 when the all-replicated start was also refined
};

class SimpleSolver {
 public:
  explicit SimpleSolver(Machine machine = Machine());

  // Seed matmuls with their cheapest candidate; propagate layouts forward and backward from
  // decided nodes to the others, each undecided node taking the strategy cheapest against its
  // decided neighbours (a conflict when they disagree: the lower total, resharding included,
  // wins); then refine: re-optimize tree-shaped blocks of the graph exactly with the rest held,
  // alternating the blocks, until the total stops falling; unless that plan provably cannot be
  // beaten, refine the all-replicated plan too and keep the cheaper. Export: evaluate().
  Solution solve(const Graph& graph);

  // The seed candidates of matmul / batched_matmul node `index`: split batch (each row
  // dimension), split contracting, split output features, in that order; only the replicated
  // strategy when no dimension can be cut.
  std::vector<SeedCandidate> seed_candidates(const Graph& graph, int index) const;

  const Machine& machine() const { return machine_; }
  const SolverStats& stats() const { return stats_; }

 private:
  Machine machine_;
  SolverStats stats_;
};

}  // namespace fsdp::solver
