#include "fsdp/solver/fsdp_plan.hpp"

#include "fsdp/core/error.hpp"

namespace fsdp::solver {
namespace {

bool cut_along(const ParameterOutcome& p, int axis) {
  return p.uses[static_cast<std::size_t>(axis)] != ParameterUse::replicated;
}

std::string axis_text(int axis) {
  return "axis " + std::to_string(axis);
}

}  // namespace

ExecutablePlan executable_plan(const Graph& graph, const Solution& solution) {
  require(solution.nodes.size() == graph.size(),
          "executable_plan: the solution has " + std::to_string(solution.nodes.size()) +
              " nodes, the graph " + std::to_string(graph.size()));
  const Machine& machine = solution.machine;
  const int axes = machine.axis_count();
  int shard_group_size = machine.devices;
  std::vector<std::string> notes;

  // Which axes the sharded parameters are cut along: all the same set, or a mix.
  bool along_both = false, along_0_only = false, along_1_only = false;
  for (const ParameterOutcome& p : solution.parameters) {
    const bool a0 = cut_along(p, 0);
    const bool a1 = axes > 1 && cut_along(p, 1);
    along_both = along_both || (a0 && a1);
    along_0_only = along_0_only || (a0 && !a1);
    along_1_only = along_1_only || (!a0 && a1);
  }
  const int kinds = int(along_both) + int(along_0_only) + int(along_1_only);
  if (axes > 1 && kinds == 1 && along_1_only) {
    shard_group_size = machine.axis(1).devices;
  } else if (axes > 1 && kinds == 1 && along_0_only) {
    notes.push_back(
        "the solution shards parameters along mesh axis 0 only and replicates them along axis "
        "1, but fsdp's shard groups are consecutive ranks (mesh axis 1): the plan shards them "
        "over all " +
        std::to_string(machine.devices) +
        " ranks instead (less memory, gathers over both axes); solve with the axes swapped "
        "(--mesh " +
        std::to_string(machine.axis(1).devices) + "x" + std::to_string(machine.axis(0).devices) +
        ") to get hybrid sharding");
  } else if (axes > 1 && kinds > 1) {
    notes.push_back(
        "the solution shards some parameters along one mesh axis and others along another, but "
        "fsdp shards every parameter over the same ranks: the plan shards them over all " +
        std::to_string(machine.devices) + " ranks");
  }

  std::vector<ParameterInfo> parameters;
  std::vector<ParameterPlacement> placements;
  int tensor_parallel = 0;
  std::string example;  // the first tensor-parallel parameter and its splits
  for (const ParameterOutcome& p : solution.parameters) {
    const Node& node = graph.node(graph.index_of(p.id));
    parameters.push_back(ParameterInfo{node.id, node.shape, node.dtype, "", false});
    const bool sharded = cut_along(p, 0) || (axes > 1 && cut_along(p, 1));
    placements.push_back(
        ParameterPlacement{sharded ? Placement::sharded : Placement::replicated, -1});
    std::string splits;
    for (int a = 0; a < axes; ++a) {
      if (p.uses[static_cast<std::size_t>(a)] == ParameterUse::tensor_parallel) {
        splits += (splits.empty() ? "" : " and ") + std::string("dimension ") +
                  std::to_string(p.layout.axis(a).dim) + " along mesh " + axis_text(a);
      }
    }
    if (!splits.empty()) {
      ++tensor_parallel;
      if (example.empty()) {
        example = "'" + p.id + "': " + splits;
      }
    }
  }
  if (tensor_parallel == 1) {
    notes.push_back("1 parameter is split for tensor parallelism, which fsdp does not run (" +
                    example +
                    "): the plan shards it (FSDP), so each rank gathers it whole for its compute");
  } else if (tensor_parallel > 1) {
    notes.push_back(std::to_string(tensor_parallel) +
                    " parameters are split for tensor parallelism, which fsdp does not run (such "
                    "as " +
                    example +
                    "): the plan shards them (FSDP), so each rank gathers them whole for its "
                    "compute");
  }
  require(!parameters.empty(),
          "executable_plan: the graph has no parameter node; a sharding plan needs at least one "
          "parameter");

  // Compute: fsdp runs every op on a rank's rows of the batch (the first dimension of the data)
  // with parameters gathered whole; other splits of activations are not executed.
  int model_parallel = 0;
  example.clear();
  for (std::size_t i = 0; i < graph.size(); ++i) {
    const Node& node = graph.node(static_cast<int>(i));
    if (node.inputs.empty() || node.kind == OpKind::output) {
      continue;
    }
    const ShardingSpec& out = solution.nodes[i].output_spec;
    bool batch_only = !out.is_partial();
    for (int a = 0; a < axes; ++a) {
      batch_only = batch_only && (!out.axis_sharded(a) || out.axis(a).dim == 0);
    }
    if (!batch_only) {
      ++model_parallel;
      if (example.empty()) {
        example = "'" + node.id + "' " + solution.nodes[i].strategy;
      }
    }
  }
  if (model_parallel > 0) {
    notes.push_back(std::to_string(model_parallel) +
                    " computed nodes are laid out other than by rows of the batch (such "
                    "as " +
                    example +
                    "); fsdp runs data-parallel compute only, so each rank computes "
                    "those nodes for its own batch rows with whole parameters");
  }
  return ExecutablePlan{ShardingPlan("solver", shard_group_size, parameters, placements),
                        shard_group_size, machine.devices, notes};
}

}  // namespace fsdp::solver
