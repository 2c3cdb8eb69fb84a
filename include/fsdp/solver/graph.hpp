// Graph: a computation graph for the auto-sharding solver, read from JSON or built in code.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "fsdp/core/dtype.hpp"
#include "fsdp/solver/sharding_spec.hpp"

namespace fsdp::solver {

// The kinds of op the solver knows, in the order of its op table (src/solver/op_table.cpp), which
// holds each kind's names, input count, shape, work and strategies.
enum class OpKind : std::uint8_t {
  input,           // data entering the graph (activations); no inputs
  parameter,       // weights; no inputs
  output,          // the graph's result; one input
  matmul,          // A (..., M, K) @ B (K, N) -> (..., M, N)
  batched_matmul,  // A (b..., M, K) @ B (b..., K, N) -> (b..., M, N)
  unary,           // elementwise, one input (relu, gelu, exp, scale, ...)
  binary,          // elementwise, two inputs, numpy broadcasting (add, sub, mul, div, ...)
  reduce,          // reduce_sum / reduce_mean / reduce_max over `axes`
  transpose,       // permutes dimensions by `permutation`
  reshape,         // same element count; the solver moves a sharded axis only where it survives
  softmax,         // along `axes[0]` (default: the last)
  layer_norm,      // over trailing `axes` (default: the last), optional gamma and beta inputs
};

const char* name_of(OpKind kind);

// A node as written by the user: inputs by id. Graph resolves and checks it.
struct NodeDecl {
  std::string id;
  std::string op;  // "matmul", "gelu", "add", "reduce_sum", ... (see docs/solver.md)
  std::vector<std::string> inputs;
  std::vector<std::int64_t> shape;  // may be left empty for computed nodes: inferred
  bool shape_given = false;         // shape was written, even as [] (a scalar): it is checked
  std::optional<DType> dtype;       // default: the first input's, or fp32
  std::vector<int> axes;            // reduce, softmax, layer_norm
  std::vector<int> permutation;     // transpose
  bool keep_dims = false;           // reduce
  std::string sharding;             // optional pin of the output spec, e.g. "S0" or "[R,S]"
};

// An fp32 node in one line, for graphs written in code (generators, tests).
NodeDecl fp32_node(const std::string& id, const std::string& op, std::vector<std::string> inputs,
                   std::vector<std::int64_t> shape = {}, const std::string& sharding = "");

struct Node {
  std::string id;
  OpKind kind = OpKind::input;
  std::string op;           // the name as written, canonical (e.g. "reduce_sum")
  std::vector<int> inputs;  // indices of producer nodes (always smaller than this node's)
  std::vector<std::int64_t> shape;
  DType dtype = DType::f32;
  std::vector<int> axes;  // non-negative, sorted
  std::vector<int> permutation;
  bool keep_dims = false;
  bool linear = false;  // partial sums pass through (scale, neg, add, sum, ...)
  std::optional<ShardingSpec> pinned;

  int rank() const { return static_cast<int>(shape.size()); }
  std::int64_t numel() const;
  double bytes() const;  // numel * size_of(dtype)
};

// Nodes are stored in a topological order (producers before consumers; among ready nodes, the
// order of declaration), so a node index is also a position in that order. Construction checks
// everything the solver relies on and throws fsdp::Error naming the node: unknown op, duplicate
// id, dangling input, cycle, wrong input count, shape or attribute mismatch.
class Graph {
 public:
  Graph() = default;
  explicit Graph(const std::vector<NodeDecl>& decls);

  // {"nodes": [{"id": "x", "op": "input", "shape": [1024, 512], "dtype": "fp32"}, ...]}
  static Graph from_json(const std::string& text);
  static Graph from_file(const std::string& path);
  std::string to_json() const;

  std::size_t size() const { return nodes_.size(); }
  const Node& node(int index) const { return nodes_[static_cast<std::size_t>(index)]; }
  const std::vector<Node>& nodes() const { return nodes_; }
  // The nodes that use node `index`, each once, in order.
  const std::vector<int>& consumers(int index) const {
    return consumers_[static_cast<std::size_t>(index)];
  }
  // Throws fsdp::Error when no node has this id.
  int index_of(const std::string& id) const;

 private:
  std::vector<Node> nodes_;
  std::vector<std::vector<int>> consumers_;
  std::map<std::string, int> index_;
};

}  // namespace fsdp::solver
