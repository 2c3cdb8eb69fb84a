// From a solution to what fsdp runs: an FSDP sharding plan of the graph's parameters, and what of
// the solution fsdp cannot execute.
#pragma once

#include <string>
#include <vector>

#include "fsdp/shard/sharding_plan.hpp"
#include "fsdp/solver/graph.hpp"
#include "fsdp/solver/solution.hpp"

namespace fsdp::solver {

struct ExecutablePlan {
  // One parameter per parameter node of the graph, in the graph's order: name = the node's id,
  // its shape and dtype, no layer (each its own unit), placed `sharded` when the solution cuts it
  // along some mesh axis (FSDP; a tensor-parallel split too, see notes) and `replicated`
  // otherwise. Made for shard_group_size ranks.
  ShardingPlan plan;
  // The ranks that shard the parameters together: the mesh's devices, or on a 2-D mesh whose
  // sharded parameters are all cut along axis 1 only, axis 1's devices (hybrid sharding: run
  // with fsdp::make_hybrid_groups(world, shard_group_size), docs/modes.md).
  int shard_group_size = 1;
  int world_size = 1;  // the mesh's devices
  // What fsdp cannot execute of the solution and what the plan does instead, one sentence each;
  // empty when the plan is the solution's.
  std::vector<std::string> notes;
};

// Throws fsdp::Error when the graph has no parameter node (a plan has at least one parameter) or
// the solution is not one of this graph.
ExecutablePlan executable_plan(const Graph& graph, const Solution& solution);

}  // namespace fsdp::solver
