// Internal: the op table. Everything the solver knows about a kind of op (its names, input
// count, output shape, work and sharded strategies) is one entry, so a new op is one entry.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "fsdp/solver/graph.hpp"
#include "fsdp/solver/sharding_spec.hpp"
#include "strategy_list.hpp"

namespace fsdp::solver::detail {

using InputNodes = std::vector<const Node*>;  // a node's producers, in its input order

// Which inputs an op's backward reads (and so keeps alive until then, and converts again).
enum class BackwardReads : std::uint8_t {
  all,           // nonlinear ops: relu, softmax, layer_norm, div, ...
  none,          // linear in every input: add, scale, transpose, reduce_sum, ...; needs dy only
  other_factor,  // products (matmul, mul): input k only when the other input needs a gradient
};

// One name an op of a kind is written with in graph JSON.
struct OpSpelling {
  const char* name;                       // canonical: what Node::op holds
  std::vector<const char*> aliases = {};  // accepted too
  // The op is linear (partial sums pass through it) when this is not empty: each entry is the
  // input layouts of one strategy that turns partial sums into a partial sum, tried in this order.
  std::vector<std::vector<ShardingSpec>> partial_inputs = {};
  BackwardReads backward_reads = BackwardReads::all;
};

struct OpProperties {
  OpKind kind;
  const char* name;  // name_of(kind)
  std::vector<OpSpelling> spellings;
  std::size_t min_inputs;
  std::size_t max_inputs;
  // The output shape from the inputs (the input count is checked before); checks the node's
  // attributes and puts them in canonical form (e.g. axes non-negative and sorted). Throws
  // node_error.
  std::vector<std::int64_t> (*shape)(Node& node, const InputNodes& inputs);
  // The whole op's FLOPs, what one device does when it runs the op alone. Checked: throws
  // node_error when the count overflows 64 bits.
  std::int64_t (*flops)(const Node& node, const InputNodes& inputs);
  // Adds the strategies that cut a dimension (devices > 1), best first; the partial-sum strategies
  // of the spelling and the replicated one come after them (strategies_for).
  void (*sharded_strategies)(const Node& node, const InputNodes& inputs, StrategyList& out);
};

// The entry of `kind`.
const OpProperties& properties_of(OpKind kind);

struct FoundOp {
  const OpProperties* op = nullptr;  // null when the name is not known
  const OpSpelling* spelling = nullptr;
};
// The op written `name` (a canonical name or an alias).
FoundOp find_op(const std::string& name);

// Every canonical name, in table order, comma-separated (for "unknown op" errors).
std::string known_ops();

}  // namespace fsdp::solver::detail
