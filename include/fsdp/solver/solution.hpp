// Solution: the layout the solver chose for every node, with the cost of each part, the memory
// each device holds, and what becomes of every parameter.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "fsdp/solver/cost_model.hpp"
#include "fsdp/solver/graph.hpp"
#include "fsdp/solver/sharding_spec.hpp"
#include "fsdp/solver/step_options.hpp"
#include "fsdp/solver/strategy.hpp"

namespace fsdp::solver {

namespace detail {
class StepModel;
}

// The conversion on one edge: the producer's output layout into the layout this node needs (or,
// for a gradient, the gradient's layout into the producer's). On a 2-D mesh it may take more
// than one collective: `transfer` is the first, `then` the others in order (empty on 1-D meshes).
struct InputTransfer {
  std::string producer;
  ShardingSpec from;
  ShardingSpec to;
  Transfer transfer;  // collective none when from already suits
  std::vector<Transfer> then;
  double seconds() const;
};

// What one device holds, in bytes.
struct NodeMemory {
  // Through the whole step: a parameter's value (training: and its gradient and optimizer state),
  // an input's data. 0 for computed nodes.
  std::int64_t state_bytes = 0;
  // A computed node's result, held from its forward step until the backward pass last reads it
  // (forward-only: until its last consumer has run). 0 for inputs, parameters and outputs.
  std::int64_t activation_bytes = 0;
  // Everything a device holds while this node's forward step runs, and its backward step (0: the
  // node has no such step).
  std::int64_t forward_bytes = 0;
  std::int64_t backward_bytes = 0;
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
  // Training steps (0 otherwise):
  double backward_compute_s = 0;  // the gradient matmuls / element-wise gradients
  // The backward's conversions: inputs converted again for it (a gathered parameter is gathered
  // again), and gradients of computed inputs converted into their producers' layouts.
  double backward_communication_s = 0;
  // Parameters: their gradients converted into their own layouts (the all-reduce of a replicated
  // parameter, the reduce-scatter of a sharded one), summed over the parameter's consumers.
  double gradient_sync_s = 0;
  double optimizer_s = 0;  // parameters: the optimizer's element-wise step on this device's part
  // One per input whose gradient this node's backward computes.
  std::vector<InputTransfer> gradient_transfers;
  NodeMemory memory;

  double total_s() const {
    return compute_s + communication_s + resharding_s + backward_compute_s +
           backward_communication_s + gradient_sync_s + optimizer_s;
  }
};

// What becomes of a parameter along one mesh axis.
enum class ParameterUse : std::uint8_t {
  replicated,       // whole along the axis
  fsdp,             // stored cut along the axis, gathered whole for use (ZeRO-3)
  tensor_parallel,  // stored cut along the axis and used cut: each device computes its part
};
// "replicated", "fsdp", "tensor_parallel"
const char* name_of(ParameterUse use);

struct ParameterOutcome {
  std::string id;
  ShardingSpec layout;  // how it is stored
  std::array<ParameterUse, ShardingSpec::kMaxAxes> uses{};
  std::int64_t state_bytes = 0;  // on one device (value, gradient, optimizer state)
  // "replicated", "FSDP dim 0 along axis 0", "tensor-parallel dim 1 along axis 1", or both
  // joined by "; ".
  std::string summary() const;
};

// Totals of the memory at the peak step of one device.
struct MemorySummary {
  std::int64_t peak_bytes = 0;
  std::string peak_node;   // the node whose step is at the peak (empty: no step)
  std::string peak_phase;  // "forward" or "backward"
  // Persistent parts (the same at every step): parameters' values, gradients and optimizer
  // state, and the inputs' data.
  std::int64_t parameter_bytes = 0;
  std::int64_t gradient_bytes = 0;
  std::int64_t optimizer_bytes = 0;
  std::int64_t input_bytes = 0;
};

struct Solution {
  std::string solver;  // "simple" or "exact"
  Machine machine;
  StepOptions options;              // what was planned: the step, optimizer, precision, budget
  std::vector<NodeSolution> nodes;  // the graph's (topological) order
  double compute_s = 0;
  double communication_s = 0;
  double resharding_s = 0;
  double backward_compute_s = 0;
  double backward_communication_s = 0;
  double gradient_sync_s = 0;
  double optimizer_s = 0;
  double total_s = 0;
  MemorySummary memory;
  // False when options.memory_budget_bytes is set and no plan found fits it: the solution is
  // then the plan with the smallest peak the solver found.
  bool fits_budget = true;
  std::vector<ParameterOutcome> parameters;  // in the graph's order

  // Throws fsdp::Error when no node has this id.
  const NodeSolution& node(const std::string& id) const;

  // Format version 2 (kSolutionFormatVersion); from_json also reads version 1 (no
  // "format_version": a forward plan on a 1-D mesh, without memory).
  std::string to_json() const;
  // Throws fsdp::Error when text is not a solution written by to_json.
  static Solution from_json(const std::string& text);

  // Rebuilds the id index; from_json and evaluate call it.
  void index_nodes();

 private:
  std::map<std::string, int> index_;
};

inline constexpr int kSolutionFormatVersion = 2;

// The cost of running graph with choice[i] the index of node i's strategy in strategies[i]
// (all_strategies(graph, machine)): per node its compute, every input edge's conversion, and in
// training steps the backward, gradient synchronisation and optimizer; the memory per device at
// every step; each parameter's outcome. Without options: the forward pass.
Solution evaluate(const Graph& graph, const std::vector<std::vector<Strategy>>& strategies,
                  const std::vector<int>& choice, const Machine& machine,
                  const std::string& solver_name, const StepOptions& options = StepOptions());

// Just the forward total of evaluate, without building the solution.
double total_cost(const Graph& graph, const std::vector<std::vector<Strategy>>& strategies,
                  const std::vector<int>& choice, const Machine& machine);

// The total seconds and the peak bytes per device of a plan, without building the solution.
struct PlanCost {
  double seconds = 0;
  std::int64_t peak_bytes = 0;
};
PlanCost measure(const Graph& graph, const std::vector<std::vector<Strategy>>& strategies,
                 const std::vector<int>& choice, const Machine& machine,
                 const StepOptions& options);

// Measures many plans of one graph (checking solvers against enumeration): the cost and memory
// tables are built once. choice[i] indexes strategies()[i].
class PlanMeter {
 public:
  PlanMeter(const Graph& graph, const Machine& machine, const StepOptions& options = StepOptions());
  ~PlanMeter();
  PlanMeter(const PlanMeter&) = delete;
  PlanMeter& operator=(const PlanMeter&) = delete;

  const std::vector<std::vector<Strategy>>& strategies() const { return strategies_; }
  PlanCost measure(const std::vector<int>& choice) const;

 private:
  std::vector<std::vector<Strategy>> strategies_;
  std::unique_ptr<detail::StepModel> model_;
};

}  // namespace fsdp::solver
