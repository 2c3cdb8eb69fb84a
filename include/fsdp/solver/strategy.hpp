// Strategy: one way to run a node on the mesh, the input layouts it needs and the output it makes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "fsdp/solver/cost_model.hpp"
#include "fsdp/solver/graph.hpp"
#include "fsdp/solver/sharding_spec.hpp"

namespace fsdp::solver {

// What a strategy does, for tables and for the seed phase. For matmuls: split_batch cuts a row
// dimension of A (batch, sequence or M; `dim` says which), split_contracting cuts K (the output is
// a partial sum), split_output_features cuts N. For the other ops: follow_dim runs each device on
// its block of dimension `dim`, follow_partial runs on partial sums (linear ops), replicated runs
// the whole op on every device.
enum class StrategyRole : std::uint8_t {
  replicated,
  split_batch,
  split_contracting,
  split_output_features,
  follow_dim,
  follow_partial,
};

struct Strategy {
  StrategyRole role = StrategyRole::replicated;
  std::vector<ShardingSpec> inputs;  // required layout of each input, in the node's input order
  ShardingSpec output;
  double flops_per_device = 0;  // matmul 2MNK, other ops one per element, over the devices
};

std::string describe(const Strategy& strategy, const Node& node);

// Every strategy of node `index` on `devices` devices, sharded ones first, replicated last. A
// dimension is cut only if it has at least `devices` elements; a pinned node keeps only the
// strategies producing its pinned spec (fsdp::Error naming the node if there are none). On one
// device the only strategy is replicated (pins included: one device holds every layout whole).
std::vector<Strategy> strategies_for(const Graph& graph, int index, int devices);

// All nodes' strategies.
std::vector<std::vector<Strategy>> all_strategies(const Graph& graph, int devices);

}  // namespace fsdp::solver
