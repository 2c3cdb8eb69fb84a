#include "fsdp/solver/strategy.hpp"

#include "node_error.hpp"
#include "op_table.hpp"
#include "step_model.hpp"
#include "strategy_list.hpp"

namespace fsdp::solver {
namespace {

// What one axis's part of a strategy does; `axis` picks the specs' use of that axis.
std::string describe_role(StrategyRole role, const Strategy& strategy, const Node& node, int axis) {
  switch (role) {
    case StrategyRole::replicated:
      return "replicated";
    case StrategyRole::split_batch:
      return "split batch dim " + std::to_string(strategy.output.axis(axis).dim);
    case StrategyRole::split_contracting:
      return "split contracting (K)";
    case StrategyRole::split_output_features:
      return "split output features (N)";
    case StrategyRole::follow_dim:
      return "sharded dim " + std::to_string(strategy.output.axis(axis).dim);
    case StrategyRole::follow_partial:
      return node.kind == OpKind::reduce && !strategy.inputs.empty() &&
                     !strategy.inputs[0].axis_partial(axis)
                 ? "reduce over sharded dim (partial)"
                 : "on partial sums";
  }
  return "?";
}

// The strategies of the node on a 1-D mesh of `devices`, before pins are applied.
std::vector<Strategy> unpinned_strategies(const Graph& graph, int index, int devices) {
  const Node& node = graph.node(index);
  detail::InputNodes in;
  for (int p : node.inputs) {
    in.push_back(&graph.node(p));
  }
  const detail::OpProperties& op = detail::properties_of(node.kind);
  detail::StrategyList list(devices, op.flops(node, in));
  if (devices > 1) {
    op.sharded_strategies(node, in, list);
    for (const auto& inputs : detail::find_op(node.op).spelling->partial_inputs) {
      list.add(StrategyRole::follow_partial, inputs, ShardingSpec::partial());
    }
  }
  list.add(StrategyRole::replicated,
           std::vector<ShardingSpec>(in.size(), ShardingSpec::replicated()),
           ShardingSpec::replicated());
  return list.take();
}

bool same_layouts(const Strategy& a, const Strategy& b) {
  return a.role == b.role && a.inputs == b.inputs && a.output == b.output;
}

// Whether a 1-D strategy cuts anything: then its work is divided over the axis's devices.
bool divides_work(const Strategy& s) {
  bool cut = s.output.is_sharded();
  for (const ShardingSpec& input : s.inputs) {
    cut = cut || input.is_sharded();
  }
  return cut;
}

// Whether the 1-D strategies cut a common dimension of some tensor (an input or the output).
bool cut_common_dimension(const Strategy& a, const Strategy& b) {
  const auto common = [](const ShardingSpec& x, const ShardingSpec& y) {
    return x.axis_sharded(0) && y.axis_sharded(0) && x.dim() == y.dim();
  };
  bool shared = common(a.output, b.output);
  for (std::size_t k = 0; k < a.inputs.size(); ++k) {
    shared = shared || common(a.inputs[k], b.inputs[k]);
  }
  return shared;
}

ShardingSpec on_two_axes(const ShardingSpec& axis0, const ShardingSpec& axis1) {
  ShardingSpec spec;
  spec.axes[0] = axis0.axis(0);
  spec.axes[1] = axis1.axis(0);
  return spec;
}

// The 2-D strategies: one 1-D strategy per axis.
std::vector<Strategy> mesh_strategies(const Graph& graph, int index, const Machine& machine) {
  const int d0 = machine.axis(0).devices;
  const int d1 = machine.axis(1).devices;
  const std::vector<Strategy> first = unpinned_strategies(graph, index, d0);
  const std::vector<Strategy> second = unpinned_strategies(graph, index, d1);
  std::vector<Strategy> both;  // on d0 * d1 devices, for strategies cutting along both axes
  bool both_made = false;
  const Node& node = graph.node(index);
  detail::InputNodes in;
  for (int p : node.inputs) {
    in.push_back(&graph.node(p));
  }
  const double flops = static_cast<double>(detail::properties_of(node.kind).flops(node, in));
  std::vector<Strategy> out;
  for (const Strategy& s0 : first) {
    for (const Strategy& s1 : second) {
      if (cut_common_dimension(s0, s1)) {
        if (!same_layouts(s0, s1)) {
          continue;
        }
        if (!both_made) {
          both = unpinned_strategies(graph, index, machine.devices);
          both_made = true;
        }
        bool possible = false;
        for (const Strategy& s : both) {
          possible = possible || same_layouts(s, s0);
        }
        if (!possible) {
          continue;
        }
      }
      Strategy s;
      s.role = s0.role;
      s.role_axis1 = s1.role;
      for (std::size_t k = 0; k < s0.inputs.size(); ++k) {
        s.inputs.push_back(on_two_axes(s0.inputs[k], s1.inputs[k]));
      }
      s.output = on_two_axes(s0.output, s1.output);
      const double divisor = (divides_work(s0) ? d0 : 1.0) * (divides_work(s1) ? d1 : 1.0);
      s.flops_per_device = divisor > 1 ? flops / divisor : flops;
      out.push_back(std::move(s));
    }
  }
  return out;
}

// Keeps the strategies producing the node's pinned layout; on one device every layout is the
// whole tensor, so a pin asks for nothing.
std::vector<Strategy> apply_pin(const Node& node, std::vector<Strategy> all, int devices,
                                int mesh_axes) {
  if (!node.pinned || devices <= 1) {
    return all;
  }
  std::vector<Strategy> kept;
  for (Strategy& s : all) {
    if (s.output == *node.pinned) {
      kept.push_back(std::move(s));
    }
  }
  if (kept.empty()) {
    std::string possible;
    for (const Strategy& s : all) {
      possible += (possible.empty() ? "" : ", ") + s.output.to_string(node.rank(), mesh_axes);
    }
    throw detail::node_error(node.id, node.op,
                             "pinned sharding " + node.pinned->to_string(node.rank(), mesh_axes) +
                                 " is not possible on " + std::to_string(devices) +
                                 " devices; possible: " + possible);
  }
  return kept;
}

}  // namespace

std::string describe(const Strategy& strategy, const Node& node) {
  if (strategy.role_axis1 == StrategyRole::replicated && !strategy.output.uses_axis(1)) {
    return describe_role(strategy.role, strategy, node, 0);
  }
  std::string text;
  for (int a = 0; a < 2; ++a) {
    const StrategyRole role = a == 0 ? strategy.role : strategy.role_axis1;
    if (role == StrategyRole::replicated) {
      continue;
    }
    text += (text.empty() ? "a" : ", a") + std::to_string(a) + " " +
            describe_role(role, strategy, node, a);
  }
  return text.empty() ? "replicated" : text;
}

std::vector<Strategy> strategies_for(const Graph& graph, int index, int devices) {
  return apply_pin(graph.node(index), unpinned_strategies(graph, index, devices), devices, 1);
}

std::vector<Strategy> strategies_for(const Graph& graph, int index, const Machine& machine) {
  if (machine.axis_count() == 1) {
    return strategies_for(graph, index, machine.devices);
  }
  return apply_pin(graph.node(index), mesh_strategies(graph, index, machine), machine.devices, 2);
}

std::vector<std::vector<Strategy>> all_strategies(const Graph& graph, int devices) {
  std::vector<std::vector<Strategy>> all(graph.size());
  for (std::size_t i = 0; i < graph.size(); ++i) {
    all[i] = strategies_for(graph, static_cast<int>(i), devices);
  }
  return all;
}

std::vector<std::vector<Strategy>> all_strategies(const Graph& graph, const Machine& machine) {
  // Computed once per class of nodes that look the same (the layers of a stack).
  const detail::StrategyClasses classes = detail::strategy_classes(graph);
  std::vector<std::vector<Strategy>> lists;
  for (const int v : classes.first_node) {
    lists.push_back(strategies_for(graph, v, machine));
  }
  std::vector<std::vector<Strategy>> all;
  all.reserve(graph.size());
  for (const int c : classes.of_node) {
    all.push_back(lists[static_cast<std::size_t>(c)]);
  }
  return all;
}

}  // namespace fsdp::solver
