#include "op_table.hpp"

#include <algorithm>
#include <initializer_list>
#include <stdexcept>

#include "node_error.hpp"

namespace fsdp::solver::detail {
namespace {

using Shape = std::vector<std::int64_t>;
using Spec = ShardingSpec;

// Short names for the table's partial-sum layouts and the rules' whole inputs.
constexpr Spec P = Spec::partial();
constexpr Spec R = Spec::replicated();
constexpr BackwardReads kReadsNone = BackwardReads::none;
constexpr BackwardReads kReadsOther = BackwardReads::other_factor;

// a * b * ..., checked: a node whose work overflows 64 bits is refused, naming it.
std::int64_t work(const Node& node, std::initializer_list<std::int64_t> factors) {
  std::int64_t product = 1;
  for (std::int64_t factor : factors) {
    if (__builtin_mul_overflow(product, factor, &product)) {
      throw node_error(node.id, node.op,
                       "its FLOPs overflow 64 bits (more than 9.2e18); the shapes are too large");
    }
  }
  return product;
}

std::int64_t size_at(const Node& node, int dim) {
  return node.shape[static_cast<std::size_t>(dim)];
}

int normalize_axis(int axis, int rank, const Node& node) {
  if (axis < -rank || axis >= rank) {
    throw node_error(node.id, node.op,
                     "axis " + std::to_string(axis) + " is out of range for an input of rank " +
                         std::to_string(rank));
  }
  return axis < 0 ? axis + rank : axis;
}

bool is_axis(const Node& node, int dim) {
  return std::binary_search(node.axes.begin(), node.axes.end(), dim);
}

// ---- Rules shared by several ops.

Shape same_as_first_input(Node&, const InputNodes& in) {
  return in[0]->shape;
}

std::int64_t no_work(const Node&, const InputNodes&) {
  return 0;
}

// One operation per output element.
std::int64_t per_element(const Node& node, const InputNodes&) {
  return node.numel();
}

// Input, parameter, output: a cut anywhere, the input (if any) cut the same way.
void cut_any_dim(const Node& node, const InputNodes& in, StrategyList& out) {
  for (int d = 0; d < node.rank(); ++d) {
    if (out.can_cut(size_at(node, d))) {
      out.add(StrategyRole::follow_dim, std::vector<Spec>(in.size(), Spec::sharded(d)),
              Spec::sharded(d));
    }
  }
}

// Elementwise: each input follows the output's cut on the dimension it is aligned with
// (right-aligned, as broadcasting aligns), unless it is broadcast along it: then it must be whole.
void cut_elementwise(const Node& node, const InputNodes& in, StrategyList& out) {
  const int rank = node.rank();
  for (int d = 0; d < rank; ++d) {
    if (!out.can_cut(size_at(node, d))) {
      continue;
    }
    std::vector<Spec> inputs;
    for (const Node* input : in) {
      const int di = d - (rank - input->rank());
      const bool aligned = di >= 0 && size_at(*input, di) == size_at(node, d);
      inputs.push_back(aligned ? Spec::sharded(di) : R);
    }
    out.add(StrategyRole::follow_dim, inputs, Spec::sharded(d));
  }
}

// Softmax, layer_norm: a cut of any dimension the op does not work along; the other inputs
// (gamma, beta) whole.
void cut_outside_axes(const Node& node, const InputNodes& in, StrategyList& out) {
  for (int d = 0; d < node.rank(); ++d) {
    if (is_axis(node, d) || !out.can_cut(size_at(node, d))) {
      continue;
    }
    std::vector<Spec> inputs(in.size(), R);
    inputs[0] = Spec::sharded(d);
    out.add(StrategyRole::follow_dim, inputs, Spec::sharded(d));
  }
}

// ---- input, parameter

Shape declared_shape(Node& node, const InputNodes&) {
  if (node.shape.empty()) {
    throw node_error(node.id, node.op, "needs a shape (a list of positive sizes)");
  }
  return node.shape;
}

// ---- matmul: A (..., M, K) @ B (K, N)

Shape matmul_shape(Node& node, const InputNodes& in) {
  const auto& a = in[0]->shape;
  const auto& b = in[1]->shape;
  if (a.size() < 2 || b.size() != 2) {
    throw node_error(node.id, node.op,
                     "takes A of rank >= 2 and B of rank 2 (use batched_matmul for batched "
                     "B); got " +
                         shape_text(a) + " @ " + shape_text(b));
  }
  if (a.back() != b[0]) {
    throw node_error(node.id, node.op,
                     "contracting sizes differ: " + shape_text(a) + " @ " + shape_text(b) +
                         " (A's last dimension must equal B's first)");
  }
  Shape out(a.begin(), a.end() - 1);
  out.push_back(b[1]);
  return out;
}

// 2MNK, M all rows of A: 2 x (A's elements) x N.
std::int64_t matmul_flops(const Node& node, const InputNodes& in) {
  return work(node, {2, in[0]->numel(), in[1]->shape[1]});
}

void matmul_strategies(const Node& node, const InputNodes& in, StrategyList& out) {
  const Node& a = *in[0];
  const Node& b = *in[1];
  for (int d = 0; d + 1 < a.rank(); ++d) {
    if (out.can_cut(size_at(a, d))) {
      out.add(StrategyRole::split_batch, {Spec::sharded(d), R}, Spec::sharded(d));
    }
  }
  if (out.can_cut(b.shape[1])) {
    out.add(StrategyRole::split_output_features, {R, Spec::sharded(1)},
            Spec::sharded(node.rank() - 1));
  }
  if (out.can_cut(b.shape[0])) {
    out.add(StrategyRole::split_contracting, {Spec::sharded(a.rank() - 1), Spec::sharded(0)}, P);
  }
}

// ---- batched_matmul: A (b..., M, K) @ B (b..., K, N)

Shape batched_matmul_shape(Node& node, const InputNodes& in) {
  const auto& a = in[0]->shape;
  const auto& b = in[1]->shape;
  const std::size_t r = a.size();
  if (r < 3 || b.size() != r || !std::equal(a.begin(), a.end() - 2, b.begin()) ||
      a[r - 1] != b[r - 2]) {
    throw node_error(node.id, node.op,
                     "takes A (b..., M, K) and B (b..., K, N) of the same rank >= 3 with "
                     "equal batch dimensions; got " +
                         shape_text(a) + " @ " + shape_text(b));
  }
  Shape out(a.begin(), a.end() - 1);
  out.push_back(b[r - 1]);
  return out;
}

std::int64_t batched_matmul_flops(const Node& node, const InputNodes& in) {
  return work(node, {2, node.numel(), in[0]->shape.back()});
}

void batched_matmul_strategies(const Node& node, const InputNodes& in, StrategyList& out) {
  const Node& a = *in[0];
  const int r = a.rank();
  for (int d = 0; d + 2 < r; ++d) {
    if (out.can_cut(size_at(a, d))) {
      out.add(StrategyRole::split_batch, {Spec::sharded(d), Spec::sharded(d)}, Spec::sharded(d));
    }
  }
  if (out.can_cut(size_at(a, r - 2))) {
    out.add(StrategyRole::split_batch, {Spec::sharded(r - 2), R}, Spec::sharded(r - 2));
  }
  if (out.can_cut(size_at(node, r - 1))) {
    out.add(StrategyRole::split_output_features, {R, Spec::sharded(r - 1)}, Spec::sharded(r - 1));
  }
  if (out.can_cut(size_at(a, r - 1))) {
    out.add(StrategyRole::split_contracting, {Spec::sharded(r - 1), Spec::sharded(r - 2)}, P);
  }
}

// ---- binary: numpy broadcasting

Shape broadcast_shape(Node& node, const InputNodes& in) {
  const Shape& a = in[0]->shape;
  const Shape& b = in[1]->shape;
  const std::size_t rank = std::max(a.size(), b.size());
  Shape out(rank);
  for (std::size_t i = 0; i < rank; ++i) {
    const std::int64_t da = i < rank - a.size() ? 1 : a[i - (rank - a.size())];
    const std::int64_t db = i < rank - b.size() ? 1 : b[i - (rank - b.size())];
    if (da != db && da != 1 && db != 1) {
      throw node_error(
          node.id, node.op,
          "input shapes " + shape_text(a) + " and " + shape_text(b) + " do not broadcast");
    }
    out[i] = std::max(da, db);
  }
  return out;
}

// ---- reduce over `axes`

Shape reduce_shape(Node& node, const InputNodes& in) {
  const int rank = in[0]->rank();
  if (node.axes.empty()) {
    throw node_error(node.id, node.op, "needs \"axes\": the dimensions to reduce");
  }
  for (int& axis : node.axes) {
    axis = normalize_axis(axis, rank, node);
  }
  std::sort(node.axes.begin(), node.axes.end());
  if (std::adjacent_find(node.axes.begin(), node.axes.end()) != node.axes.end()) {
    throw node_error(node.id, node.op, "\"axes\" lists a dimension twice");
  }
  Shape out;
  for (int d = 0; d < rank; ++d) {
    if (!is_axis(node, d)) {
      out.push_back(size_at(*in[0], d));
    } else if (node.keep_dims) {
      out.push_back(1);
    }
  }
  if (out.empty()) {
    out.push_back(1);  // a full reduction is a one-element tensor
  }
  return out;
}

// One operation per input element.
std::int64_t reduce_flops(const Node&, const InputNodes& in) {
  return in[0]->numel();
}

void reduce_strategies(const Node& node, const InputNodes& in, StrategyList& out) {
  for (int d = 0; d < in[0]->rank(); ++d) {
    if (!out.can_cut(size_at(*in[0], d))) {
      continue;
    }
    if (!is_axis(node, d)) {
      const int below = static_cast<int>(std::lower_bound(node.axes.begin(), node.axes.end(), d) -
                                         node.axes.begin());
      out.add(StrategyRole::follow_dim, {Spec::sharded(d)},
              Spec::sharded(node.keep_dims ? d : d - below));
    } else if (node.linear) {
      // Each device sums its block: the output is a partial sum, each device did 1/N of the work.
      out.add(StrategyRole::follow_partial, {Spec::sharded(d)}, P).flops_per_device =
          out.flops() / out.devices();
    }
  }
}

// ---- transpose by `permutation`

Shape transpose_shape(Node& node, const InputNodes& in) {
  const int rank = in[0]->rank();
  std::vector<int> sorted = node.permutation;
  std::sort(sorted.begin(), sorted.end());
  bool ok = static_cast<int>(sorted.size()) == rank;
  for (int d = 0; ok && d < rank; ++d) {
    ok = sorted[static_cast<std::size_t>(d)] == d;
  }
  if (!ok) {
    throw node_error(node.id, node.op,
                     "\"permutation\" must list each of the input's " + std::to_string(rank) +
                         " dimensions once");
  }
  Shape out;
  for (int d : node.permutation) {
    out.push_back(size_at(*in[0], d));
  }
  return out;
}

void transpose_strategies(const Node& node, const InputNodes&, StrategyList& out) {
  for (int j = 0; j < node.rank(); ++j) {
    if (out.can_cut(size_at(node, j))) {
      out.add(StrategyRole::follow_dim,
              {Spec::sharded(node.permutation[static_cast<std::size_t>(j)])}, Spec::sharded(j));
    }
  }
}

// ---- reshape to `shape`

Shape reshape_shape(Node& node, const InputNodes& in) {
  if (node.shape.empty()) {
    throw node_error(node.id, node.op, "needs the target \"shape\"");
  }
  std::int64_t numel = 1;
  for (auto size : node.shape) {
    if (__builtin_mul_overflow(numel, size, &numel)) {
      throw node_error(node.id, node.op,
                       "shape " + shape_text(node.shape) +
                           " has more elements than 64 bits count; the input " +
                           shape_text(in[0]->shape) + " has " + std::to_string(in[0]->numel()));
    }
  }
  if (numel != in[0]->numel()) {
    throw node_error(node.id, node.op,
                     "shape " + shape_text(node.shape) + " has " + std::to_string(numel) +
                         " elements; the input " + shape_text(in[0]->shape) + " has " +
                         std::to_string(in[0]->numel()));
  }
  return node.shape;
}

// The output dimension a cut of input dimension `dim` lands on, or -1. The cut survives when the
// dimension starts at the same element stride in both shapes and the smaller of the two sizes
// divides into the devices' blocks: then block k of one is block k of the other.
int reshape_target(const Node& in, const Node& out, int dim, int devices) {
  std::int64_t prefix_in = 1;
  for (int d = 0; d < dim; ++d) {
    prefix_in *= size_at(in, d);
  }
  std::int64_t prefix_out = 1;
  for (int j = 0; j < out.rank(); ++j) {
    const std::int64_t a = size_at(in, dim);
    const std::int64_t b = size_at(out, j);
    if (prefix_out == prefix_in) {
      if (a == b) {
        return j;
      }
      if ((a % b == 0 || b % a == 0) && std::min(a, b) % devices == 0) {
        return j;
      }
    }
    if (prefix_out > prefix_in) {
      return -1;
    }
    prefix_out *= b;
  }
  return -1;
}

void reshape_strategies(const Node& node, const InputNodes& in, StrategyList& out) {
  for (int d = 0; d < in[0]->rank(); ++d) {
    if (!out.can_cut(size_at(*in[0], d))) {
      continue;
    }
    const int j = reshape_target(*in[0], node, d, out.devices());
    if (j >= 0 && out.can_cut(size_at(node, j))) {
      out.add(StrategyRole::follow_dim, {Spec::sharded(d)}, Spec::sharded(j));
    }
  }
}

// ---- softmax along one axis (default: the last)

Shape softmax_shape(Node& node, const InputNodes& in) {
  const int rank = in[0]->rank();
  if (node.axes.empty()) {
    node.axes.push_back(rank - 1);
  }
  if (node.axes.size() != 1) {
    throw node_error(node.id, node.op, "takes one axis");
  }
  node.axes[0] = normalize_axis(node.axes[0], rank, node);
  return in[0]->shape;
}

// ---- layer_norm over trailing axes (default: the last), optional gamma and beta

Shape layer_norm_shape(Node& node, const InputNodes& in) {
  const int rank = in[0]->rank();
  if (node.axes.empty()) {
    node.axes.push_back(rank - 1);
  }
  for (int& axis : node.axes) {
    axis = normalize_axis(axis, rank, node);
  }
  std::sort(node.axes.begin(), node.axes.end());
  for (std::size_t i = 0; i < node.axes.size(); ++i) {
    if (node.axes[i] != rank - static_cast<int>(node.axes.size()) + static_cast<int>(i)) {
      throw node_error(node.id, node.op,
                       "normalizes trailing dimensions only; \"axes\" must be the "
                       "last dimensions of the input, each once");
    }
  }
  const Shape normalized(in[0]->shape.end() - node.axes.size(), in[0]->shape.end());
  for (std::size_t k = 1; k < in.size(); ++k) {
    if (in[k]->shape != normalized) {
      throw node_error(node.id, node.op,
                       std::string(k == 1 ? "gamma" : "beta") + " '" + in[k]->id + "' has shape " +
                           shape_text(in[k]->shape) + "; it must be " + shape_text(normalized) +
                           ", the normalized dimensions");
    }
  }
  return in[0]->shape;
}

// Indexed by OpKind. Spellings are listed in the order "unknown op" errors name them.
const std::vector<OpProperties>& table() {
  static const std::vector<OpProperties> ops = [] {
    // clang-format off
    std::vector<OpProperties> t = {
        // {kind, name_of(kind), spellings {name, aliases, partial-sum inputs, backward reads},
        //  inputs min, max, shape, work, strategies that cut a dimension}
        {OpKind::input, "input", {{"input"}},
         0, 0, declared_shape, no_work, cut_any_dim},
        {OpKind::parameter, "parameter", {{"parameter", {"param", "weight"}}},
         0, 0, declared_shape, no_work, cut_any_dim},
        {OpKind::output, "output", {{"output", {}, {}, kReadsNone}},
         1, 1, same_as_first_input, no_work, cut_any_dim},
        {OpKind::matmul, "matmul", {{"matmul", {}, {}, kReadsOther}},
         2, 2, matmul_shape, matmul_flops, matmul_strategies},
        {OpKind::batched_matmul, "batched_matmul", {{"batched_matmul", {"bmm"}, {}, kReadsOther}},
         2, 2, batched_matmul_shape, batched_matmul_flops, batched_matmul_strategies},
        {OpKind::unary, "unary",
         {{"relu"}, {"gelu"}, {"silu"}, {"tanh"}, {"sigmoid"}, {"exp"}, {"log"}, {"sqrt"},
          {"rsqrt"}, {"square"}, {"dropout"}, {"unary"},
          {"neg", {}, {{P}}, kReadsNone}, {"scale", {}, {{P}}, kReadsNone},
          {"identity", {}, {{P}}, kReadsNone}},
         1, 1, same_as_first_input, per_element, cut_elementwise},
        // Sums of partial sums are partial sums; so are partial sums times (or over) a whole
        // tensor.
        {OpKind::binary, "binary",
         {{"add", {}, {{P, P}}, kReadsNone}, {"sub", {}, {{P, P}}, kReadsNone},
          {"mul", {}, {{P, R}, {R, P}}, kReadsOther}, {"div", {}, {{P, R}}},
          {"maximum"}, {"minimum"}, {"binary"}},
         2, 2, broadcast_shape, per_element, cut_elementwise},
        {OpKind::reduce, "reduce",
         {{"reduce_sum", {"sum"}, {{P}}, kReadsNone}, {"reduce_mean", {"mean"}, {{P}}, kReadsNone},
          {"reduce_max", {"max"}}},
         1, 1, reduce_shape, reduce_flops, reduce_strategies},
        {OpKind::transpose, "transpose", {{"transpose", {}, {{P}}, kReadsNone}},
         1, 1, transpose_shape, per_element, transpose_strategies},
        // A view: no work.
        {OpKind::reshape, "reshape", {{"reshape", {}, {{P}}, kReadsNone}},
         1, 1, reshape_shape, no_work, reshape_strategies},
        {OpKind::softmax, "softmax", {{"softmax"}},
         1, 1, softmax_shape, per_element, cut_outside_axes},
        {OpKind::layer_norm, "layer_norm", {{"layer_norm", {"layernorm"}}},
         1, 3, layer_norm_shape, per_element, cut_outside_axes},
    };
    // clang-format on
    for (std::size_t i = 0; i < t.size(); ++i) {
      if (static_cast<std::size_t>(t[i].kind) != i) {
        throw std::logic_error("fsdp: the solver's op table is not in OpKind order");
      }
    }
    return t;
  }();
  return ops;
}

}  // namespace

const OpProperties& properties_of(OpKind kind) {
  const auto& ops = table();
  const auto index = static_cast<std::size_t>(kind);
  if (index >= ops.size()) {
    throw std::logic_error("fsdp: the solver's op table has no entry for OpKind " +
                           std::to_string(index));
  }
  return ops[index];
}

FoundOp find_op(const std::string& name) {
  for (const OpProperties& op : table()) {
    for (const OpSpelling& spelling : op.spellings) {
      if (name == spelling.name || std::find(spelling.aliases.begin(), spelling.aliases.end(),
                                             name) != spelling.aliases.end()) {
        return {&op, &spelling};
      }
    }
  }
  return {};
}

std::string known_ops() {
  std::string list;
  for (const OpProperties& op : table()) {
    for (const OpSpelling& spelling : op.spellings) {
      list += list.empty() ? "" : ", ";
      list += spelling.name;
    }
  }
  return list;
}

}  // namespace fsdp::solver::detail
