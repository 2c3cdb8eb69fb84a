#include "fsdp/solver/strategy.hpp"

#include <algorithm>

#include "fsdp/core/error.hpp"

namespace fsdp::solver {
namespace {

using Spec = ShardingSpec;

bool can_cut(std::int64_t size, int devices) {
  return devices > 1 && size >= devices;
}

double as_double(std::int64_t value) {
  return static_cast<double>(value);
}

Strategy make(StrategyRole role, std::vector<Spec> inputs, Spec output, double flops, int devices) {
  Strategy strategy;
  strategy.role = role;
  strategy.inputs = std::move(inputs);
  strategy.output = output;
  // A partial or replicated output means every device did the whole op.
  strategy.flops_per_device =
      output.is_sharded() || role == StrategyRole::split_contracting ? flops / devices : flops;
  return strategy;
}

// For a reshape: the output dimension a cut of input dimension `dim` lands on, or -1. The cut
// survives when the dimension starts at the same element stride in both shapes and the smaller of
// the two sizes divides into the devices' blocks: then block k of one is block k of the other.
int reshape_target(const Node& in, const Node& out, int dim, int devices) {
  std::int64_t prefix_in = 1;
  for (int d = 0; d < dim; ++d) {
    prefix_in *= in.shape[static_cast<std::size_t>(d)];
  }
  std::int64_t prefix_out = 1;
  for (int j = 0; j < out.rank(); ++j) {
    const std::int64_t a = in.shape[static_cast<std::size_t>(dim)];
    const std::int64_t b = out.shape[static_cast<std::size_t>(j)];
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

void add_elementwise(std::vector<Strategy>& out, const Node& node, const Graph& graph, int devices,
                     double flops) {
  // Each input follows the output's cut on the dimension it is aligned with (right-aligned, as
  // broadcasting aligns), unless it is broadcast along it: then it must be whole.
  const int rank = node.rank();
  for (int d = 0; d < rank; ++d) {
    if (!can_cut(node.shape[static_cast<std::size_t>(d)], devices)) {
      continue;
    }
    std::vector<Spec> inputs;
    for (int p : node.inputs) {
      const Node& in = graph.node(p);
      const int di = d - (rank - in.rank());
      const bool aligned = di >= 0 && in.shape[static_cast<std::size_t>(di)] ==
                                          node.shape[static_cast<std::size_t>(d)];
      inputs.push_back(aligned ? Spec::sharded(di) : Spec::replicated());
    }
    out.push_back(make(StrategyRole::follow_dim, inputs, Spec::sharded(d), flops, devices));
  }
}

}  // namespace

std::string describe(const Strategy& strategy, const Node& node) {
  switch (strategy.role) {
    case StrategyRole::replicated:
      return "replicated";
    case StrategyRole::split_batch:
      return "split batch dim " + std::to_string(strategy.output.dim);
    case StrategyRole::split_contracting:
      return "split contracting (K)";
    case StrategyRole::split_output_features:
      return "split output features (N)";
    case StrategyRole::follow_dim:
      return "sharded dim " + std::to_string(strategy.output.dim);
    case StrategyRole::follow_partial:
      return node.kind == OpKind::reduce && !strategy.inputs.empty() &&
                     !strategy.inputs[0].is_partial()
                 ? "reduce over sharded dim (partial)"
                 : "on partial sums";
  }
  return "?";
}

std::vector<Strategy> strategies_for(const Graph& graph, int index, int devices) {
  const Node& node = graph.node(index);
  const int rank = node.rank();
  const std::size_t arity = node.inputs.size();
  std::vector<Strategy> out;
  const auto replicated_inputs = [&] { return std::vector<Spec>(arity, Spec::replicated()); };
  const double numel = as_double(node.numel());
  const auto input = [&](std::size_t k) -> const Node& { return graph.node(node.inputs[k]); };

  if (devices > 1) {
    switch (node.kind) {
      case OpKind::input:
      case OpKind::parameter:
      case OpKind::output:
        for (int d = 0; d < rank; ++d) {
          if (can_cut(node.shape[static_cast<std::size_t>(d)], devices)) {
            out.push_back(make(StrategyRole::follow_dim, std::vector<Spec>(arity, Spec::sharded(d)),
                               Spec::sharded(d), 0, devices));
          }
        }
        break;
      case OpKind::matmul: {
        const Node& a = input(0);
        const Node& b = input(1);
        const std::int64_t k = b.shape[0];
        const std::int64_t n = b.shape[1];
        const double flops = 2.0 * as_double(a.numel() / k) * as_double(k) * as_double(n);
        for (int d = 0; d + 1 < a.rank(); ++d) {
          if (can_cut(a.shape[static_cast<std::size_t>(d)], devices)) {
            out.push_back(make(StrategyRole::split_batch, {Spec::sharded(d), Spec::replicated()},
                               Spec::sharded(d), flops, devices));
          }
        }
        if (can_cut(n, devices)) {
          out.push_back(make(StrategyRole::split_output_features,
                             {Spec::replicated(), Spec::sharded(1)}, Spec::sharded(rank - 1), flops,
                             devices));
        }
        if (can_cut(k, devices)) {
          out.push_back(make(StrategyRole::split_contracting,
                             {Spec::sharded(a.rank() - 1), Spec::sharded(0)}, Spec::partial(),
                             flops, devices));
        }
        break;
      }
      case OpKind::batched_matmul: {
        const Node& a = input(0);
        const int r = a.rank();
        const std::int64_t k = a.shape[static_cast<std::size_t>(r - 1)];
        const double flops = 2.0 * numel * as_double(k);
        for (int d = 0; d + 2 < r; ++d) {
          if (can_cut(a.shape[static_cast<std::size_t>(d)], devices)) {
            out.push_back(make(StrategyRole::split_batch, {Spec::sharded(d), Spec::sharded(d)},
                               Spec::sharded(d), flops, devices));
          }
        }
        if (can_cut(a.shape[static_cast<std::size_t>(r - 2)], devices)) {
          out.push_back(make(StrategyRole::split_batch, {Spec::sharded(r - 2), Spec::replicated()},
                             Spec::sharded(r - 2), flops, devices));
        }
        if (can_cut(node.shape[static_cast<std::size_t>(r - 1)], devices)) {
          out.push_back(make(StrategyRole::split_output_features,
                             {Spec::replicated(), Spec::sharded(r - 1)}, Spec::sharded(r - 1),
                             flops, devices));
        }
        if (can_cut(k, devices)) {
          out.push_back(make(StrategyRole::split_contracting,
                             {Spec::sharded(r - 1), Spec::sharded(r - 2)}, Spec::partial(), flops,
                             devices));
        }
        break;
      }
      case OpKind::unary:
        add_elementwise(out, node, graph, devices, numel);
        if (node.linear) {
          out.push_back(make(StrategyRole::follow_partial, {Spec::partial()}, Spec::partial(),
                             numel, devices));
        }
        break;
      case OpKind::binary: {
        add_elementwise(out, node, graph, devices, numel);
        // Sums of partial sums are partial sums; so are partial sums times (or over) a whole
        // tensor.
        if (node.op == "add" || node.op == "sub") {
          out.push_back(make(StrategyRole::follow_partial, {Spec::partial(), Spec::partial()},
                             Spec::partial(), numel, devices));
        } else if (node.op == "mul") {
          out.push_back(make(StrategyRole::follow_partial, {Spec::partial(), Spec::replicated()},
                             Spec::partial(), numel, devices));
          out.push_back(make(StrategyRole::follow_partial, {Spec::replicated(), Spec::partial()},
                             Spec::partial(), numel, devices));
        } else if (node.op == "div") {
          out.push_back(make(StrategyRole::follow_partial, {Spec::partial(), Spec::replicated()},
                             Spec::partial(), numel, devices));
        }
        break;
      }
      case OpKind::reduce: {
        const Node& in = input(0);
        const double flops = as_double(in.numel());
        for (int d = 0; d < in.rank(); ++d) {
          if (!can_cut(in.shape[static_cast<std::size_t>(d)], devices)) {
            continue;
          }
          const bool reduced = std::binary_search(node.axes.begin(), node.axes.end(), d);
          if (!reduced) {
            const int below = static_cast<int>(
                std::lower_bound(node.axes.begin(), node.axes.end(), d) - node.axes.begin());
            const int target = node.keep_dims ? d : d - below;
            Strategy s = make(StrategyRole::follow_dim, {Spec::sharded(d)}, Spec::sharded(target),
                              flops, devices);
            out.push_back(s);
          } else if (node.linear) {
            // Each device sums its block: the output is a partial sum.
            Strategy s = make(StrategyRole::follow_partial, {Spec::sharded(d)}, Spec::partial(),
                              flops, devices);
            s.flops_per_device = flops / devices;
            out.push_back(s);
          }
        }
        if (node.linear) {
          out.push_back(make(StrategyRole::follow_partial, {Spec::partial()}, Spec::partial(),
                             flops, devices));
        }
        break;
      }
      case OpKind::transpose: {
        for (int j = 0; j < rank; ++j) {
          const int d = node.permutation[static_cast<std::size_t>(j)];
          if (can_cut(node.shape[static_cast<std::size_t>(j)], devices)) {
            out.push_back(make(StrategyRole::follow_dim, {Spec::sharded(d)}, Spec::sharded(j),
                               numel, devices));
          }
        }
        out.push_back(
            make(StrategyRole::follow_partial, {Spec::partial()}, Spec::partial(), numel, devices));
        break;
      }
      case OpKind::reshape: {
        const Node& in = input(0);
        for (int d = 0; d < in.rank(); ++d) {
          if (!can_cut(in.shape[static_cast<std::size_t>(d)], devices)) {
            continue;
          }
          const int j = reshape_target(in, node, d, devices);
          if (j >= 0 && can_cut(node.shape[static_cast<std::size_t>(j)], devices)) {
            out.push_back(
                make(StrategyRole::follow_dim, {Spec::sharded(d)}, Spec::sharded(j), 0, devices));
          }
        }
        out.push_back(
            make(StrategyRole::follow_partial, {Spec::partial()}, Spec::partial(), 0, devices));
        break;
      }
      case OpKind::softmax:
      case OpKind::layer_norm: {
        for (int d = 0; d < rank; ++d) {
          if (std::binary_search(node.axes.begin(), node.axes.end(), d) ||
              !can_cut(node.shape[static_cast<std::size_t>(d)], devices)) {
            continue;
          }
          std::vector<Spec> inputs(arity, Spec::replicated());
          inputs[0] = Spec::sharded(d);
          out.push_back(make(StrategyRole::follow_dim, inputs, Spec::sharded(d), numel, devices));
        }
        break;
      }
    }
  }
  {
    double flops = 0;
    if (node.kind == OpKind::matmul) {
      const Node& b = input(1);
      flops = 2.0 * as_double(input(0).numel() / b.shape[0]) * as_double(b.shape[0]) *
              as_double(b.shape[1]);
    } else if (node.kind == OpKind::batched_matmul) {
      flops = 2.0 * numel * as_double(input(0).shape.back());
    } else if (node.kind == OpKind::reduce) {
      flops = as_double(input(0).numel());
    } else if (node.kind != OpKind::input && node.kind != OpKind::parameter &&
               node.kind != OpKind::output && node.kind != OpKind::reshape) {
      flops = numel;
    }
    out.push_back(
        make(StrategyRole::replicated, replicated_inputs(), Spec::replicated(), flops, devices));
  }
  // On one device every layout is the whole tensor, so a pin asks for nothing.
  if (node.pinned && devices > 1) {
    std::vector<Strategy> kept;
    for (Strategy& s : out) {
      if (s.output == *node.pinned) {
        kept.push_back(std::move(s));
      }
    }
    if (kept.empty()) {
      std::string possible;
      for (const Strategy& s : out) {
        possible += (possible.empty() ? "" : ", ") + s.output.to_string(rank);
      }
      throw Error("fsdp: graph node '" + node.id + "' (" + node.op + "): pinned sharding " +
                  node.pinned->to_string(rank) + " is not possible on " + std::to_string(devices) +
                  " devices; possible: " + possible);
    }
    return kept;
  }
  return out;
}

std::vector<std::vector<Strategy>> all_strategies(const Graph& graph, int devices) {
  std::vector<std::vector<Strategy>> all(graph.size());
  for (std::size_t i = 0; i < graph.size(); ++i) {
    all[i] = strategies_for(graph, static_cast<int>(i), devices);
  }
  return all;
}

}  // namespace fsdp::solver
