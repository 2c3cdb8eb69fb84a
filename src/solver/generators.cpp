#include "fsdp/solver/generators.hpp"

#include <algorithm>
#include <string>
#include <vector>

#include "fsdp/core/error.hpp"

namespace fsdp::solver {
namespace {

void check(const ModelShape& s) {
  require(s.batch > 0 && s.sequence > 0 && s.hidden > 0 && s.heads > 0 && s.ffn > 0,
          "graph generator: batch, sequence, hidden, heads and ffn must be positive");
  require(s.hidden % s.heads == 0, "graph generator: hidden (" + std::to_string(s.hidden) +
                                       ") must be a multiple of heads (" + std::to_string(s.heads) +
                                       ")");
}

// Appends nodes with a common prefix, so that a stack's layers have distinct ids.
class Builder {
 public:
  Builder(std::vector<NodeDecl>& nodes, std::string prefix, const ModelShape& shape)
      : nodes_(nodes),
        prefix_(std::move(prefix)),
        dtype_(shape.dtype),
        fsdp_parameters_(shape.fsdp_parameters) {}

  std::string add(const std::string& name, const std::string& op,
                  const std::vector<std::string>& inputs, std::vector<std::int64_t> shape = {}) {
    NodeDecl decl;
    decl.id = prefix_ + name;
    decl.op = op;
    decl.inputs = inputs;
    decl.shape = std::move(shape);
    decl.dtype = dtype_;
    if (op == "parameter" && fsdp_parameters_) {
      decl.sharding = "S0";
    }
    nodes_.push_back(decl);
    return decl.id;
  }
  NodeDecl& last() { return nodes_.back(); }

 private:
  std::vector<NodeDecl>& nodes_;
  std::string prefix_;
  DType dtype_;
  bool fsdp_parameters_;
};

// One pre-norm transformer layer on x (batch, sequence, hidden); returns the id of its result.
std::string add_layer(std::vector<NodeDecl>& nodes, const std::string& prefix, const std::string& x,
                      const ModelShape& s) {
  Builder b(nodes, prefix, s);
  const std::int64_t B = s.batch, S = s.sequence, H = s.hidden, nh = s.heads, hd = H / nh;
  const auto ln1 =
      b.add("ln1", "layer_norm",
            {x, b.add("ln1_gamma", "parameter", {}, {H}), b.add("ln1_beta", "parameter", {}, {H})});
  const auto q = b.add("q", "matmul", {ln1, b.add("wq", "parameter", {}, {H, H})});
  const auto k = b.add("k", "matmul", {ln1, b.add("wk", "parameter", {}, {H, H})});
  const auto v = b.add("v", "matmul", {ln1, b.add("wv", "parameter", {}, {H, H})});
  const auto heads = [&](const std::string& name, const std::string& t,
                         std::vector<int> permutation) {
    const auto split = b.add(name + "_heads", "reshape", {t}, {B, S, nh, hd});
    const auto moved = b.add(name + "_t", "transpose", {split});
    b.last().permutation = std::move(permutation);
    return moved;
  };
  const auto qt = heads("q", q, {0, 2, 1, 3});  // (B, nh, S, hd)
  const auto kt = heads("k", k, {0, 2, 3, 1});  // (B, nh, hd, S)
  const auto vt = heads("v", v, {0, 2, 1, 3});  // (B, nh, S, hd)
  const auto scores = b.add("scores", "batched_matmul", {qt, kt});
  const auto scaled = b.add("scaled", "scale", {scores});
  const auto probs = b.add("probs", "softmax", {scaled});
  const auto context = b.add("context", "batched_matmul", {probs, vt});
  const auto context_t = b.add("context_t", "transpose", {context});
  b.last().permutation = {0, 2, 1, 3};
  const auto merged = b.add("context_merged", "reshape", {context_t}, {B, S, H});
  const auto attn = b.add("attn_out", "matmul", {merged, b.add("wo", "parameter", {}, {H, H})});
  const auto h = b.add("residual1", "add", {x, attn});
  const auto ln2 =
      b.add("ln2", "layer_norm",
            {h, b.add("ln2_gamma", "parameter", {}, {H}), b.add("ln2_beta", "parameter", {}, {H})});
  const auto up = b.add("mlp_up", "matmul", {ln2, b.add("w1", "parameter", {}, {H, s.ffn})});
  const auto act = b.add("mlp_gelu", "gelu", {up});
  const auto down = b.add("mlp_down", "matmul", {act, b.add("w2", "parameter", {}, {s.ffn, H})});
  return b.add("residual2", "add", {h, down});
}

}  // namespace

Graph mlp_block(const ModelShape& s) {
  check(s);
  std::vector<NodeDecl> nodes;
  Builder b(nodes, "", s);
  const auto x = b.add("x", "input", {}, {s.batch, s.sequence, s.hidden});
  const auto up = b.add("mlp_up", "matmul", {x, b.add("w1", "parameter", {}, {s.hidden, s.ffn})});
  const auto act = b.add("mlp_gelu", "gelu", {up});
  const auto down =
      b.add("mlp_down", "matmul", {act, b.add("w2", "parameter", {}, {s.ffn, s.hidden})});
  b.add("y", "output", {down});
  return Graph(nodes);
}

Graph transformer_layer(const ModelShape& s) {
  return transformer_stack(s, 1);
}

Graph transformer_stack(const ModelShape& s, int layers) {
  check(s);
  require(layers >= 1 && layers <= kMostStackLayers,
          "graph generator: layers must be from 1 to " + std::to_string(kMostStackLayers) +
              " (the solver's memory grows with the graph's nodes, 33 per layer), got " +
              std::to_string(layers));
  std::vector<NodeDecl> nodes;
  nodes.reserve(static_cast<std::size_t>(layers) * 33 + 2);
  Builder b(nodes, "", s);
  std::string x = b.add("x", "input", {}, {s.batch, s.sequence, s.hidden});
  for (int layer = 0; layer < layers; ++layer) {
    const std::string prefix = layers == 1 ? "" : "l" + std::to_string(layer) + ".";
    x = add_layer(nodes, prefix, x, s);
  }
  Builder(nodes, "", s).add("y", "output", {x});
  return Graph(nodes);
}

int layers_for_nodes(std::int64_t nodes) {
  return static_cast<int>(std::max<std::int64_t>(1, (nodes - 2 + 16) / 33));
}

}  // namespace fsdp::solver

namespace fsdp::solver {
namespace {

// splitmix64: the same numbers on every platform.
class Random {
 public:
  explicit Random(std::uint64_t seed) : state_(seed) {}
  std::uint64_t next() {
    std::uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  int below(int n) { return static_cast<int>(next() % static_cast<std::uint64_t>(n)); }
  template <class T>
  const T& pick(const std::vector<T>& items) {
    return items[static_cast<std::size_t>(below(static_cast<int>(items.size())))];
  }

 private:
  std::uint64_t state_;
};

}  // namespace

Graph random_graph(std::uint64_t seed, int max_nodes) {
  require(max_nodes >= 3, "random_graph: max_nodes must be at least 3");
  Random rng(seed);
  const std::vector<std::int64_t> sizes = {4, 16, 64, 256, 1024, 4096};
  std::vector<NodeDecl> nodes;
  std::vector<std::pair<std::string, std::vector<std::int64_t>>> tensors;  // usable values
  int counter = 0;
  const auto add = [&](const std::string& op, std::vector<std::string> inputs,
                       std::vector<std::int64_t> shape) {
    NodeDecl decl;
    decl.id = op + std::to_string(counter++);
    decl.op = op;
    decl.inputs = std::move(inputs);
    decl.shape = std::move(shape);
    decl.dtype = DType::f32;
    nodes.push_back(decl);
    return decl.id;
  };
  const auto x = add("input", {}, {rng.pick(sizes), rng.pick(sizes)});
  tensors.push_back({x, nodes.back().shape});
  // Leave room for the output node.
  while (static_cast<int>(nodes.size()) < max_nodes - 1) {
    const auto& [id, shape] = tensors[static_cast<std::size_t>(
        rng.below(static_cast<int>(tensors.size())) / 2 + static_cast<int>(tensors.size()) / 2)];
    const std::string in = id;
    const std::vector<std::int64_t> in_shape = shape;
    const int room = max_nodes - 1 - static_cast<int>(nodes.size());
    const int kind = rng.below(8);
    std::string out;
    std::vector<std::int64_t> out_shape = in_shape;
    if (kind <= 2 && room >= 2) {
      const std::int64_t n = rng.pick(sizes);
      const auto w = add("parameter", {}, {in_shape[1], n});
      out = add("matmul", {in, w}, {});
      out_shape = {in_shape[0], n};
    } else if (kind == 3) {
      out = add(rng.below(2) ? "gelu" : "scale", {in}, {});
    } else if (kind == 4) {
      // A second use of an earlier value of the same shape (a residual), else a bias parameter.
      std::string other;
      for (const auto& t : tensors) {
        if (t.second == in_shape && t.first != in) {
          other = t.first;
        }
      }
      if (other.empty() && room >= 2) {
        other = add("parameter", {}, {in_shape[1]});
      }
      if (other.empty()) {
        continue;
      }
      out = add(rng.below(2) ? "add" : "mul", {in, other}, {});
    } else if (kind == 5) {
      out = add("transpose", {in}, {});
      nodes.back().permutation = {1, 0};
      out_shape = {in_shape[1], in_shape[0]};
    } else if (kind == 6) {
      out = add(rng.below(2) ? "softmax" : "layer_norm", {in}, {});
    } else {
      out = add("reduce_sum", {in}, {});
      nodes.back().axes = {1};
      nodes.back().keep_dims = true;
      out_shape = {in_shape[0], 1};
    }
    tensors.push_back({out, out_shape});
  }
  add("output", {tensors.back().first}, {});
  return Graph(nodes);
}

std::vector<NamedGraph> reference_graphs(int random) {
  std::vector<NamedGraph> graphs;
  graphs.push_back({"worked example (1024,512)@(512,2048)",
                    Graph({fp32_node("A", "input", {}, {1024, 512}),
                           fp32_node("B", "parameter", {}, {512, 2048}),
                           fp32_node("C", "matmul", {"A", "B"}, {1024, 2048}),
                           fp32_node("out", "output", {"C"}, {})}),
                    8});
  ModelShape many;
  many.batch = 8;
  many.sequence = 512;
  many.hidden = 1024;
  many.ffn = 4096;
  many.heads = 16;
  graphs.push_back({"mlp block, 4096 tokens", mlp_block(many), 8});
  ModelShape few = many;
  few.batch = 1;
  few.sequence = 4;
  graphs.push_back({"mlp block, 4 tokens (decode)", mlp_block(few), 8});
  graphs.push_back(
      {"pinned conflict: add of [S,R] and [R,S]",
       Graph({fp32_node("p", "input", {}, {64, 4096}, "[S,R]"),
              fp32_node("q", "input", {}, {1, 4096}, "[R,S]"),
              fp32_node("sum", "add", {"p", "q"}, {}), fp32_node("out", "output", {"sum"}, {})}),
       8});
  graphs.push_back(
      {"pinned: batch-sharded input into a pinned column-sharded weight",
       Graph({fp32_node("x", "input", {}, {4096, 1024}, "S0"),
              fp32_node("w", "parameter", {}, {1024, 4096}, "S1"),
              fp32_node("h", "matmul", {"x", "w"}, {}), fp32_node("a", "relu", {"h"}, {}),
              fp32_node("w2", "parameter", {}, {4096, 1024}, "S0"),
              fp32_node("y", "matmul", {"a", "w2"}, {}), fp32_node("out", "output", {"y"}, {})}),
       8});
  for (int i = 0; i < random; ++i) {
    const int devices = 2 << (i % 3);
    graphs.push_back({"random #" + std::to_string(i),
                      random_graph(static_cast<std::uint64_t>(i) * 7919 + 1, 6 + i % 7), devices});
  }
  return graphs;
}

}  // namespace fsdp::solver
