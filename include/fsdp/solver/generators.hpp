// Standard graphs for trying the solver without writing JSON: an MLP block, a transformer layer,
// a stack of layers.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "fsdp/core/dtype.hpp"
#include "fsdp/solver/graph.hpp"

namespace fsdp::solver {

struct ModelShape {
  std::int64_t batch = 8;
  std::int64_t sequence = 1024;
  std::int64_t hidden = 4096;
  std::int64_t heads = 32;
  std::int64_t ffn = 16384;  // the MLP's inner width
  DType dtype = DType::bf16;
  // Pin every parameter to dimension 0 sharded, the way FSDP stores it: using a weight whole then
  // costs its all-gather. Off: parameters start in whatever layout suits (free).
  bool fsdp_parameters = false;
};

// x (batch, sequence, hidden) -> matmul W1 -> gelu -> matmul W2 -> output: 7 nodes.
Graph mlp_block(const ModelShape& shape);

// Pre-norm transformer layer: layer norm, Q/K/V projections, heads by reshape and transpose,
// scores, scale, softmax, context, output projection, residual, layer norm, MLP, residual.
Graph transformer_layer(const ModelShape& shape);

// The most layers transformer_stack builds (33,794 nodes), far beyond any real model's: the
// graph and its solve grow with the nodes (fsdp-solve's simple solve of 4096 layers took 2.3 GiB
// and 104 s; 100,000 layers ran past 6 GiB, and 2^31 - 1 would have asked for 14.7 TB).
constexpr int kMostStackLayers = 1024;

// `layers` transformer layers one after the other (35 nodes for one, 33 more per layer), from 1
// to kMostStackLayers (else Error, kind usage).
Graph transformer_stack(const ModelShape& shape, int layers);

// The number of layers whose stack has about `nodes` nodes (at least 1).
int layers_for_nodes(std::int64_t nodes);

}  // namespace fsdp::solver

namespace fsdp::solver {

// A random connected DAG of at most max_nodes nodes (inputs, parameters, matmuls, elementwise,
// reductions, transposes, softmax, layer norms, outputs) with sizes between 4 and 4096, the same
// for the same seed on every machine (splitmix64, no std:: distributions).
Graph random_graph(std::uint64_t seed, int max_nodes);

struct NamedGraph {
  std::string name;
  Graph graph;
  int devices;
};

// The graphs of the optimality report (fsdp-bench solver, tests): the seed's worked example, MLP
// blocks with many and with few tokens, conflicts between pinned layouts, and `random` random
// graphs of up to 12 nodes on 2, 4 or 8 devices.
std::vector<NamedGraph> reference_graphs(int random);

}  // namespace fsdp::solver
