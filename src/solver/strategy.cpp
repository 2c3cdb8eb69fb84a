#include "fsdp/solver/strategy.hpp"

#include "node_error.hpp"
#include "op_table.hpp"
#include "strategy_list.hpp"

namespace fsdp::solver {

std::string describe(const Strategy& strategy, const Node& node) {
  switch (strategy.role) {
    case StrategyRole::replicated:
      return "replicated";
    case StrategyRole::split_batch:
      return "split batch dim " + std::to_string(strategy.output.dim);
    case StrategyRole::split_contracting:
      return "split contracting (K)";
    case StrategyRole::split_output_features:
      return "split output features (N)";
    case StrategyRole::follow_dim:
      return "sharded dim " + std::to_string(strategy.output.dim);
    case StrategyRole::follow_partial:
      return node.kind == OpKind::reduce && !strategy.inputs.empty() &&
                     !strategy.inputs[0].is_partial()
                 ? "reduce over sharded dim (partial)"
                 : "on partial sums";
  }
  return "?";
}

std::vector<Strategy> strategies_for(const Graph& graph, int index, int devices) {
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
  std::vector<Strategy> out = list.take();
  // On one device every layout is the whole tensor, so a pin asks for nothing.
  if (node.pinned && devices > 1) {
    std::vector<Strategy> kept;
    for (Strategy& s : out) {
      if (s.output == *node.pinned) {
        kept.push_back(std::move(s));
      }
    }
    if (kept.empty()) {
      std::string possible;
      for (const Strategy& s : out) {
        possible += (possible.empty() ? "" : ", ") + s.output.to_string(node.rank());
      }
      throw detail::node_error(node.id, node.op,
                               "pinned sharding " + node.pinned->to_string(node.rank()) +
                                   " is not possible on " + std::to_string(devices) +
                                   " devices; possible: " + possible);
    }
    return kept;
  }
  return out;
}

std::vector<std::vector<Strategy>> all_strategies(const Graph& graph, int devices) {
  std::vector<std::vector<Strategy>> all(graph.size());
  for (std::size_t i = 0; i < graph.size(); ++i) {
    all[i] = strategies_for(graph, static_cast<int>(i), devices);
  }
  return all;
}

}  // namespace fsdp::solver
