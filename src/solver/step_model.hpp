// Internal: the one home of the cost and memory rules of a step (forward only, or a training step
// with its backward pass, gradient synchronisation and optimizer). evaluate() and both solvers
// ask it; docs/solver.md states the rules.
//
// Nodes that look the same to the rules (the same op, attributes, shape, pin and input shapes:
// the layers of a stack) share one strategy list, one row of node costs and, edge by edge, one
// table of edge costs, computed once: a 10,000-node stack has a few dozen of each.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "fsdp/solver/cost_model.hpp"
#include "fsdp/solver/graph.hpp"
#include "fsdp/solver/solution.hpp"
#include "fsdp/solver/step_options.hpp"
#include "fsdp/solver/strategy.hpp"

namespace fsdp::solver::detail {

// Nodes whose strategies are the same: the same op and attributes, shape, pin, and input shapes.
struct StrategyClasses {
  std::vector<int> of_node;     // node -> its class
  std::vector<int> first_node;  // class -> its first node
};
StrategyClasses strategy_classes(const Graph& graph);

// What a node does in the step, whatever the plan.
struct NodeFacts {
  bool computed = false;             // has inputs: runs a forward step
  bool holds_activation = false;     // computed and not an output: its result is kept in memory
  bool trained = false;              // a parameter whose gradient and optimizer state exist
  bool requires_grad = false;        // a trained parameter or a node that depends on one
  bool has_backward = false;         // training, computed and requires_grad: runs a backward step
  std::vector<char> reads;           // per input: the backward reads it (converts it again)
  std::vector<char> sends_gradient;  // per input: the backward computes its gradient
  // The first consumer (in order) whose backward reads this node's result; -1: none does.
  int first_reader = -1;
  int last_consumer = -1;  // -1: no consumer
};

// The seconds of one input edge under a pair of strategies.
struct EdgeSeconds {
  double forward = 0;   // converting the producer's output into the layout the consumer needs
  double backward = 0;  // the same again in the consumer's backward, when it reads the input
  double gradient = 0;  // converting the input's gradient into the producer's gradient layout
  double total() const { return forward + backward + gradient; }
};

// One edge's costs for every pair of strategies, at [producer's * consumer's count + consumer's].
struct EdgeTable {
  int producer_count = 0;
  int consumer_count = 0;
  std::vector<double> seconds;               // EdgeSeconds::total
  std::vector<std::int64_t> forward_bytes;   // buffers at the consumer's forward step
  std::vector<std::int64_t> backward_bytes;  // ... and at its backward step
  std::size_t at(int sp, int st) const {
    return static_cast<std::size_t>(sp) * static_cast<std::size_t>(consumer_count) +
           static_cast<std::size_t>(st);
  }
};

class StepModel {
 public:
  // The strategies of all_strategies(graph, machine), shared by class.
  StepModel(const Graph& graph, const Machine& machine, const StepOptions& options);
  // The given strategies, which must be all_strategies(graph, machine); they must outlive the
  // model.
  StepModel(const Graph& graph, const std::vector<std::vector<Strategy>>& strategies,
            const Machine& machine, const StepOptions& options);

  const Graph& graph() const { return graph_; }
  const Machine& machine() const { return machine_; }
  const StepOptions& options() const { return options_; }
  const std::vector<Strategy>& strategies(int v) const {
    return *lists_[static_cast<std::size_t>(v)];
  }
  const Strategy& strategy(int v, int s) const {
    return strategies(v)[static_cast<std::size_t>(s)];
  }
  int count(int v) const { return static_cast<int>(strategies(v).size()); }
  const NodeFacts& facts(int v) const { return facts_[static_cast<std::size_t>(v)]; }
  // Every node's strategies, copied (for a Solution or a caller that wants them).
  std::vector<std::vector<Strategy>> all_strategies() const;

  // Seconds that depend on node v's strategy alone.
  double forward_compute_s(int v, int s) const;
  double backward_compute_s(int v, int s) const;  // 0 without a backward step
  double optimizer_s(int v, int s) const;         // trained parameters in training steps
  double node_seconds(int v, int s) const { return row(v).seconds[static_cast<std::size_t>(s)]; }

  // Input k of node t, its producer p = graph.node(t).inputs[k] at strategy sp, t at st.
  EdgeSeconds edge_seconds(int t, int k, int sp, int st) const;
  Conversion forward_conversion(int t, int k, int sp, int st) const;
  // The layout the gradient of input k leaves t's backward in: the input's layout, with the
  // axes t's strategy uses and the input does not turned into partial sums, and partial inputs'
  // axes replicated (the gradient of a partial sum is whole).
  ShardingSpec gradient_layout(int t, int k, int st) const;
  Conversion gradient_conversion(int t, int k, int sp, int st) const;
  // The table of input k of node t (edge_seconds(...).total() and the buffers, precomputed).
  const EdgeTable& edge_table(int t, int k) const {
    return edge_tables_[static_cast<std::size_t>(
        edge_class_[edge_first_[static_cast<std::size_t>(t)] + static_cast<std::size_t>(k)])];
  }
  double edge_cost(int t, int k, int sp, int st) const {
    const EdgeTable& table = edge_table(t, k);
    return table.seconds[table.at(sp, st)];
  }

  // Bytes on one device.
  // Persistent through the step: a parameter's value (training: and gradient and optimizer
  // state), an input's data. 0 for computed nodes.
  std::int64_t state_bytes(int v, int s) const { return row(v).state[static_cast<std::size_t>(s)]; }
  // A computed node's result (0 for outputs, inputs and parameters).
  std::int64_t activation_bytes(int v, int s) const {
    return row(v).activation[static_cast<std::size_t>(s)];
  }
  // The gradient of a computed node's result in the backward pass (in its layout, partial axes
  // whole); 0 when it has none.
  std::int64_t gradient_bytes(int v, int s) const {
    return row(v).gradient[static_cast<std::size_t>(s)];
  }
  // Buffers that exist only during t's forward step / backward step because of input k: its
  // converted copy (forward, and again when the backward reads it) and its gradient before
  // conversion into the producer's gradient layout.
  std::int64_t forward_buffer_bytes(int t, int k, int sp, int st) const {
    const EdgeTable& table = edge_table(t, k);
    return table.forward_bytes[table.at(sp, st)];
  }
  std::int64_t backward_buffer_bytes(int t, int k, int sp, int st) const {
    const EdgeTable& table = edge_table(t, k);
    return table.backward_bytes[table.at(sp, st)];
  }
  // The elements and bytes of node v's tensor laid out as `spec` on one device (the largest
  // piece: each cut dimension rounded up).
  std::int64_t layout_elements(int v, const ShardingSpec& spec) const;
  std::int64_t layout_bytes(int v, const ShardingSpec& spec) const;

 private:
  // The node costs of one class of nodes, per strategy.
  struct NodeRow {
    std::vector<double> seconds;
    std::vector<std::int64_t> state;
    std::vector<std::int64_t> activation;
    std::vector<std::int64_t> gradient;
  };
  const NodeRow& row(int v) const {
    return rows_[static_cast<std::size_t>(node_class_[static_cast<std::size_t>(v)])];
  }
  void build(const StrategyClasses& classes);
  std::int64_t element_size(int v) const;
  std::int64_t forward_buffer(int t, int k, int sp, int st) const;
  std::int64_t backward_buffer(int t, int k, int sp, int st) const;

  const Graph& graph_;
  Machine machine_;
  StepOptions options_;
  std::vector<std::vector<Strategy>> owned_;         // per strategy class, when the model made them
  std::vector<const std::vector<Strategy>*> lists_;  // per node
  std::vector<NodeFacts> facts_;
  std::vector<int> node_class_;  // node -> its row
  std::vector<NodeRow> rows_;
  std::vector<std::size_t> edge_first_;  // node -> its first edge's place in edge_class_
  std::vector<int> edge_class_;          // edge -> its table
  std::vector<EdgeTable> edge_tables_;
};

// The memory of one plan at every step (docs/solver.md, "Memory"): forward steps in the graph's
// order, then backward steps in reverse.
struct MemoryProfile {
  std::int64_t state_bytes = 0;  // persistent: parameters (with gradients, optimizer state), inputs
  std::vector<std::int64_t> forward_bytes;   // per node: everything held during its forward step
  std::vector<std::int64_t> backward_bytes;  // per node: ... its backward step (0: none)
  std::int64_t peak_bytes = 0;
  int peak_node = -1;  // -1: no step (a graph of inputs and parameters only)
  bool peak_in_backward = false;
};

MemoryProfile memory_profile(const StepModel& model, const std::vector<int>& choice);

// The total seconds of a plan.
double step_seconds(const StepModel& model, const std::vector<int>& choice);

// The solution of a plan (fsdp::solver::evaluate on the model's strategies).
Solution evaluate(const StepModel& model, const std::vector<int>& choice,
                  const std::string& solver_name);

}  // namespace fsdp::solver::detail
