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
  StrategyRole role = StrategyRole::replicated;        // what the strategy does along mesh axis 0
  StrategyRole role_axis1 = StrategyRole::replicated;  // ... and along axis 1 (2-D meshes)
  std::vector<ShardingSpec> inputs;  // required layout of each input, in the node's input order
  ShardingSpec output;
  double flops_per_device = 0;  // matmul 2MNK, other ops one per element, over the devices
};

// "split batch dim 0"; on a 2-D mesh each axis's part: "a0 split batch dim 0, a1 split output
// features (N)" (axes that do nothing are left out; "replicated" when none does anything).
std::string describe(const Strategy& strategy, const Node& node);

// Every strategy of node `index` on `devices` devices (a 1-D mesh), sharded ones first,
// replicated last. A dimension is cut only if it has at least `devices` elements; a pinned node
// keeps only the strategies producing its pinned spec (fsdp::Error naming the node if there are
// none). On one device the only strategy is replicated (pins included: one device holds every
// layout whole).
std::vector<Strategy> strategies_for(const Graph& graph, int index, int devices);

// The same on the machine's mesh. On a 2-D mesh a strategy does one of the node's 1-D strategies
// along each axis; the two cut different dimensions, or the same strategy runs along both axes
// with its dimensions cut into (axis 0) x (axis 1) blocks when they are that long. The work is
// divided by the devices of every axis along which some input or the output is cut. The
// replicated strategy is last.
std::vector<Strategy> strategies_for(const Graph& graph, int index, const Machine& machine);

// All nodes' strategies.
std::vector<std::vector<Strategy>> all_strategies(const Graph& graph, int devices);
std::vector<std::vector<Strategy>> all_strategies(const Graph& graph, const Machine& machine);

}  // namespace fsdp::solver
