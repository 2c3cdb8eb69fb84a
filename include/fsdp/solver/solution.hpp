// Solution: the layout the solver chose for every node, with the cost of each part.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "fsdp/solver/cost_model.hpp"
#include "fsdp/solver/graph.hpp"
#include "fsdp/solver/sharding_spec.hpp"
#include "fsdp/solver/strategy.hpp"

namespace fsdp::solver {

// The conversion on one input edge: the producer's output layout into the layout this node needs.
struct InputTransfer {
  std::string producer;
  ShardingSpec from;
  ShardingSpec to;
  Transfer transfer;  // collective none when from already suits
};

struct NodeSolution {
  std::string id;
  std::string op;
  std::vector<std::int64_t> shape;
  std::string strategy;  // describe(Strategy)
  std::vector<ShardingSpec> input_specs;
  ShardingSpec output_spec;
  double flops_per_device = 0;
  double compute_s = 0;
  double communication_s = 0;  // all-reduce / reduce-scatter completing a partial sum on an input
  double resharding_s = 0;     // all-gather / all-to-all moving an input to the needed layout
  std::vector<InputTransfer> transfers;  // one per input

  double total_s() const { return compute_s + communication_s + resharding_s; }
};

struct Solution {
  std::string solver;  // "simple" or "exact"
  Machine machine;
  std::vector<NodeSolution> nodes;  // the graph's (topological) order
  double compute_s = 0;
  double communication_s = 0;
  double resharding_s = 0;
  double total_s = 0;

  // Throws fsdp::Error when no node has this id.
  const NodeSolution& node(const std::string& id) const;

  std::string to_json() const;
  // Throws fsdp::Error when text is not a solution written by to_json.
  static Solution from_json(const std::string& text);

  // Rebuilds the id index; from_json and evaluate call it.
  void index_nodes();

 private:
  std::map<std::string, int> index_;
};

// The cost of running graph with choice[i] the index of node i's strategy in strategies[i]:
// sum over nodes of compute, plus every input edge's conversion.
Solution evaluate(const Graph& graph, const std::vector<std::vector<Strategy>>& strategies,
                  const std::vector<int>& choice, const Machine& machine,
                  const std::string& solver_name);

// Just the total of evaluate, without building the solution (the solvers' inner loop).
double total_cost(const Graph& graph, const std::vector<std::vector<Strategy>>& strategies,
                  const std::vector<int>& choice, const Machine& machine);

}  // namespace fsdp::solver
