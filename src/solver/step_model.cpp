#include "step_model.hpp"

#include <algorithm>
#include <map>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "checked_int.hpp"
#include "fsdp/core/ceil_div.hpp"
#include "fsdp/core/error.hpp"
#include "op_table.hpp"

namespace fsdp::solver::detail {
namespace {

bool is_product(const Node& node) {
  return node.kind == OpKind::matmul || node.kind == OpKind::batched_matmul;
}

// True when turning `from` into `to` only slices what each device already holds (or changes
// nothing): every axis either stays or goes from replicated to sharded. Anything else makes a
// new buffer (gathered, reduced, exchanged, or zero-padded into a partial sum).
bool only_slices(const ShardingSpec& from, const ShardingSpec& to) {
  for (int a = 0; a < ShardingSpec::kMaxAxes; ++a) {
    if (!(from.axis(a) == to.axis(a)) && !(!from.uses_axis(a) && to.axis_sharded(a))) {
      return false;
    }
  }
  return true;
}

}  // namespace

StrategyClasses strategy_classes(const Graph& graph) {
  StrategyClasses classes;
  // The op as written, then every number the strategies depend on, each list after its length.
  // Ordered: nothing depends on a hash.
  std::map<std::pair<std::string, std::vector<std::int64_t>>, int> seen;
  std::vector<std::int64_t> key;
  for (std::size_t v = 0; v < graph.size(); ++v) {
    const Node& node = graph.node(static_cast<int>(v));
    key.clear();
    const auto add = [&key](const auto& list) {
      key.push_back(static_cast<std::int64_t>(list.size()));
      key.insert(key.end(), list.begin(), list.end());
    };
    add(node.shape);
    add(node.axes);
    add(node.permutation);
    key.push_back(node.keep_dims ? 1 : 0);
    key.push_back(node.pinned ? 1 : 0);
    for (int a = 0; node.pinned && a < ShardingSpec::kMaxAxes; ++a) {
      key.push_back(static_cast<std::int64_t>(node.pinned->axis(a).kind));
      key.push_back(node.pinned->axis(a).dim);
    }
    for (int p : node.inputs) {
      add(graph.node(p).shape);
    }
    const auto [where, added] =
        seen.emplace(std::make_pair(node.op, key), static_cast<int>(seen.size()));
    if (added) {
      classes.first_node.push_back(static_cast<int>(v));
    }
    classes.of_node.push_back(where->second);
  }
  return classes;
}

StepModel::StepModel(const Graph& graph, const Machine& machine, const StepOptions& options)
    : graph_(graph), machine_(machine), options_(options) {
  const StrategyClasses classes = strategy_classes(graph);
  for (const int v : classes.first_node) {
    owned_.push_back(strategies_for(graph, v, machine));
  }
  for (const int c : classes.of_node) {
    lists_.push_back(&owned_[static_cast<std::size_t>(c)]);
  }
  build(classes);
}

StepModel::StepModel(const Graph& graph, const std::vector<std::vector<Strategy>>& strategies,
                     const Machine& machine, const StepOptions& options)
    : graph_(graph), machine_(machine), options_(options) {
  require(strategies.size() == graph.size(), "step model: one strategy list per node is needed");
  for (const auto& list : strategies) {
    lists_.push_back(&list);
  }
  build(strategy_classes(graph));
}

std::vector<std::vector<Strategy>> StepModel::all_strategies() const {
  std::vector<std::vector<Strategy>> all;
  for (const auto* list : lists_) {
    all.push_back(*list);
  }
  return all;
}

void StepModel::build(const StrategyClasses& classes) {
  const Graph& graph = graph_;
  const std::size_t n = graph.size();
  const bool training = options_.training();
  facts_.resize(n);
  for (std::size_t v = 0; v < n; ++v) {
    const Node& node = graph.node(static_cast<int>(v));
    NodeFacts& f = facts_[v];
    f.computed = !node.inputs.empty();
    f.holds_activation = f.computed && node.kind != OpKind::output;
    f.trained = training && node.kind == OpKind::parameter && is_floating(node.dtype);
    f.requires_grad = f.trained;
    for (int p : node.inputs) {
      f.requires_grad = f.requires_grad || facts_[static_cast<std::size_t>(p)].requires_grad;
    }
    f.has_backward = training && f.computed && f.requires_grad;
    const BackwardReads reads = find_op(node.op).spelling->backward_reads;
    for (std::size_t k = 0; k < node.inputs.size(); ++k) {
      const int p = node.inputs[k];
      f.sends_gradient.push_back(f.has_backward &&
                                 facts_[static_cast<std::size_t>(p)].requires_grad);
      bool read = f.has_backward && reads == BackwardReads::all;
      if (f.has_backward && reads == BackwardReads::other_factor) {
        // d(a b)/da reads b: input k is read when the other factor needs its gradient.
        const int other = node.inputs[node.inputs.size() == 2 ? 1 - k : k];
        read = facts_[static_cast<std::size_t>(other)].requires_grad;
      }
      f.reads.push_back(read ? 1 : 0);
    }
  }
  for (std::size_t t = 0; t < n; ++t) {
    const Node& node = graph.node(static_cast<int>(t));
    for (std::size_t k = 0; k < node.inputs.size(); ++k) {
      NodeFacts& producer = facts_[static_cast<std::size_t>(node.inputs[k])];
      producer.last_consumer = static_cast<int>(t);
      if (facts_[t].reads[k] && producer.first_reader < 0) {
        producer.first_reader = static_cast<int>(t);
      }
    }
  }

  // One row of node costs per class of nodes that look the same to the rules: the strategy
  // class, the dtype, and the facts the costs read.
  std::map<std::vector<int>, int> row_of;
  node_class_.resize(n);
  std::vector<int> key;
  for (std::size_t v = 0; v < n; ++v) {
    const int iv = static_cast<int>(v);
    const Node& node = graph.node(iv);
    const NodeFacts& f = facts_[v];
    key.assign({classes.of_node[v], static_cast<int>(node.dtype), f.holds_activation, f.trained,
                f.has_backward, f.last_consumer >= 0});
    for (std::size_t k = 0; k < f.reads.size(); ++k) {
      key.push_back(f.reads[k] + 2 * f.sends_gradient[k]);
    }
    const auto [where, added] = row_of.emplace(key, static_cast<int>(rows_.size()));
    node_class_[v] = where->second;
    if (!added) {
      continue;
    }
    NodeRow row;
    const ElementBytes per_element =
        element_bytes(node.dtype, EstimateOptions{options_.optimizer, options_.precision});
    for (int s = 0; s < count(iv); ++s) {
      const ShardingSpec& output = strategy(iv, s).output;
      row.seconds.push_back(forward_compute_s(iv, s) + backward_compute_s(iv, s) +
                            optimizer_s(iv, s));
      std::int64_t state = 0;
      if (node.kind == OpKind::parameter) {
        std::int64_t bytes = per_element.parameter;
        if (f.trained) {
          const auto what = [] { return std::string("bytes per element"); };
          bytes = checked_add(checked_add(bytes, per_element.gradient, what), per_element.optimizer,
                              what);
        }
        state = checked_mul(layout_elements(iv, output), bytes,
                            [&] { return "the state of '" + node.id + "'"; });
      } else if (node.kind == OpKind::input) {
        state = layout_bytes(iv, output);
      }
      row.state.push_back(state);
      row.activation.push_back(f.holds_activation ? layout_bytes(iv, output) : 0);
      row.gradient.push_back(f.has_backward && f.holds_activation && f.last_consumer >= 0
                                 ? layout_bytes(iv, output.without_partial())
                                 : 0);
    }
    rows_.push_back(std::move(row));
  }

  // One table per class of edges: the producer's and the consumer's rows and the input's place.
  std::map<std::tuple<int, int, std::size_t>, int> table_of;
  edge_first_.resize(n + 1, 0);
  for (std::size_t t = 0; t < n; ++t) {
    const int it = static_cast<int>(t);
    const Node& node = graph.node(it);
    edge_first_[t + 1] = edge_first_[t] + node.inputs.size();
    for (std::size_t k = 0; k < node.inputs.size(); ++k) {
      const int p = node.inputs[k];
      const auto key = std::make_tuple(node_class_[static_cast<std::size_t>(p)], node_class_[t], k);
      const auto [where, added] = table_of.emplace(key, static_cast<int>(edge_tables_.size()));
      edge_class_.push_back(where->second);
      if (!added) {
        continue;
      }
      const int ik = static_cast<int>(k);
      EdgeTable table;
      table.producer_count = count(p);
      table.consumer_count = count(it);
      for (int sp = 0; sp < count(p); ++sp) {
        for (int st = 0; st < count(it); ++st) {
          table.seconds.push_back(edge_seconds(it, ik, sp, st).total());
          table.forward_bytes.push_back(forward_buffer(it, ik, sp, st));
          table.backward_bytes.push_back(backward_buffer(it, ik, sp, st));
        }
      }
      edge_tables_.push_back(std::move(table));
    }
  }
}

std::int64_t StepModel::element_size(int v) const {
  return static_cast<std::int64_t>(size_of(graph_.node(v).dtype));
}

std::int64_t StepModel::layout_elements(int v, const ShardingSpec& spec) const {
  const Node& node = graph_.node(v);
  std::int64_t elements = 1;
  for (int d = 0; d < node.rank(); ++d) {
    std::int64_t cuts = 1;
    for (int a = 0; a < machine_.axis_count(); ++a) {
      if (spec.axis_sharded(a) && spec.axis(a).dim == d) {
        cuts *= machine_.axis(a).devices;  // at most 2^31 x 2^31: fits
      }
    }
    const std::int64_t size = node.shape[static_cast<std::size_t>(d)];
    elements = checked_mul(elements, ceil_div(size, cuts),
                           [&] { return "the elements of '" + node.id + "' on one device"; });
  }
  return elements;
}

std::int64_t StepModel::layout_bytes(int v, const ShardingSpec& spec) const {
  return checked_mul(layout_elements(v, spec), element_size(v),
                     [&] { return "the bytes of '" + graph_.node(v).id + "' on one device"; });
}

double StepModel::forward_compute_s(int v, int s) const {
  return strategy(v, s).flops_per_device / machine_.flops_per_s;
}

double StepModel::backward_compute_s(int v, int s) const {
  const NodeFacts& f = facts(v);
  if (!f.has_backward) {
    return 0;
  }
  // A product's backward runs one gradient matmul per factor that needs a gradient, each the
  // forward's work; any other op one pass of the forward's work.
  int gradients = 0;
  for (char sends : f.sends_gradient) {
    gradients += sends;
  }
  const double passes = is_product(graph_.node(v)) ? gradients : (gradients > 0 ? 1 : 0);
  return passes * strategy(v, s).flops_per_device / machine_.flops_per_s;
}

double StepModel::optimizer_s(int v, int s) const {
  const NodeFacts& f = facts(v);
  if (!f.trained) {
    return 0;
  }
  const Node& node = graph_.node(v);
  const ElementBytes per_element =
      element_bytes(node.dtype, EstimateOptions{options_.optimizer, options_.precision});
  // Element-wise and bound by memory: read the parameter, its gradient and optimizer state,
  // write the parameter and the state.
  const double touched = 2.0 * static_cast<double>(per_element.parameter + per_element.optimizer) +
                         static_cast<double>(per_element.gradient);
  const double elements = static_cast<double>(layout_elements(v, strategy(v, s).output));
  return elements * touched / machine_.memory_bytes_per_s;
}

Conversion StepModel::forward_conversion(int t, int k, int sp, int st) const {
  const int p = graph_.node(t).inputs[static_cast<std::size_t>(k)];
  return convert(strategy(p, sp).output, strategy(t, st).inputs[static_cast<std::size_t>(k)],
                 graph_.node(p).bytes(), machine_);
}

ShardingSpec StepModel::gradient_layout(int t, int k, int st) const {
  const Strategy& s = strategy(t, st);
  ShardingSpec gradient = s.inputs[static_cast<std::size_t>(k)];
  for (int a = 0; a < ShardingSpec::kMaxAxes; ++a) {
    const ShardingSpec::AxisUse use = gradient.axis(a);
    if (use.kind == ShardingSpec::Kind::partial) {
      gradient.axes[static_cast<std::size_t>(a)] = ShardingSpec::AxisUse{};
      continue;
    }
    if (use.kind == ShardingSpec::Kind::sharded) {
      continue;
    }
    // A whole input of a strategy that divides the work along axis a: each device's gradient
    // holds the contributions of its own part only.
    bool used = s.output.uses_axis(a);
    for (const ShardingSpec& input : s.inputs) {
      used = used || input.uses_axis(a);
    }
    if (used) {
      gradient.axes[static_cast<std::size_t>(a)] =
          ShardingSpec::AxisUse{ShardingSpec::Kind::partial, -1};
    }
  }
  return gradient;
}

Conversion StepModel::gradient_conversion(int t, int k, int sp, int st) const {
  const int p = graph_.node(t).inputs[static_cast<std::size_t>(k)];
  return convert(gradient_layout(t, k, st), strategy(p, sp).output.without_partial(),
                 graph_.node(p).bytes(), machine_);
}

EdgeSeconds StepModel::edge_seconds(int t, int k, int sp, int st) const {
  const NodeFacts& f = facts(t);
  EdgeSeconds e;
  e.forward = forward_conversion(t, k, sp, st).seconds();
  if (f.reads[static_cast<std::size_t>(k)]) {
    e.backward = e.forward;
  }
  if (f.sends_gradient[static_cast<std::size_t>(k)]) {
    e.gradient = gradient_conversion(t, k, sp, st).seconds();
  }
  return e;
}

std::int64_t StepModel::forward_buffer(int t, int k, int sp, int st) const {
  const int p = graph_.node(t).inputs[static_cast<std::size_t>(k)];
  const ShardingSpec& from = strategy(p, sp).output;
  const ShardingSpec& to = strategy(t, st).inputs[static_cast<std::size_t>(k)];
  return only_slices(from, to) ? 0 : layout_bytes(p, to);
}

std::int64_t StepModel::backward_buffer(int t, int k, int sp, int st) const {
  const NodeFacts& f = facts(t);
  const int p = graph_.node(t).inputs[static_cast<std::size_t>(k)];
  std::int64_t bytes = f.reads[static_cast<std::size_t>(k)] ? forward_buffer(t, k, sp, st) : 0;
  if (f.sends_gradient[static_cast<std::size_t>(k)]) {
    const ShardingSpec gradient = gradient_layout(t, k, st);
    if (gradient != strategy(p, sp).output.without_partial()) {
      bytes = checked_add(bytes, layout_bytes(p, gradient), "a backward buffer");
    }
  }
  return bytes;
}

MemoryProfile memory_profile(const StepModel& model, const std::vector<int>& choice) {
  const Graph& graph = model.graph();
  const int n = static_cast<int>(graph.size());
  const auto what = [] { return std::string("the memory of the plan on one device"); };
  const auto at = [&](int v) { return choice[static_cast<std::size_t>(v)]; };
  MemoryProfile profile;
  // Differences along the forward steps (in order) and the backward steps (indexed by node).
  std::vector<std::int64_t> forward(static_cast<std::size_t>(n) + 1, 0);
  std::vector<std::int64_t> backward(static_cast<std::size_t>(n) + 1, 0);
  const auto add_range = [&](std::vector<std::int64_t>& steps, int from, int to,
                             std::int64_t bytes) {
    add_to(steps[static_cast<std::size_t>(from)], bytes, what);
    add_to(steps[static_cast<std::size_t>(to) + 1], -bytes, what);
  };
  const bool training = model.options().training();
  for (int v = 0; v < n; ++v) {
    const NodeFacts& f = model.facts(v);
    add_to(profile.state_bytes, model.state_bytes(v, at(v)), what);
    const std::int64_t activation = model.activation_bytes(v, at(v));
    if (activation > 0) {
      if (training && f.first_reader >= 0) {
        add_range(forward, v, n - 1, activation);
        add_range(backward, f.first_reader, n - 1, activation);
      } else {
        add_range(forward, v, std::max(v, f.last_consumer), activation);
      }
    }
    const std::int64_t gradient = model.gradient_bytes(v, at(v));
    if (gradient > 0) {
      add_range(backward, v, f.last_consumer, gradient);
    }
    const Node& node = graph.node(v);
    for (std::size_t k = 0; k < node.inputs.size(); ++k) {
      const int ik = static_cast<int>(k);
      const int p = node.inputs[k];
      add_range(forward, v, v, model.forward_buffer_bytes(v, ik, at(p), at(v)));
      if (f.has_backward) {
        add_range(backward, v, v, model.backward_buffer_bytes(v, ik, at(p), at(v)));
      }
    }
  }
  profile.forward_bytes.assign(static_cast<std::size_t>(n), 0);
  profile.backward_bytes.assign(static_cast<std::size_t>(n), 0);
  std::int64_t running_forward = 0, running_backward = 0;
  for (int v = 0; v < n; ++v) {
    add_to(running_forward, forward[static_cast<std::size_t>(v)], what);
    add_to(running_backward, backward[static_cast<std::size_t>(v)], what);
    const NodeFacts& f = model.facts(v);
    if (f.computed) {
      profile.forward_bytes[static_cast<std::size_t>(v)] =
          checked_add(profile.state_bytes, running_forward, what);
    }
    if (f.has_backward) {
      profile.backward_bytes[static_cast<std::size_t>(v)] =
          checked_add(profile.state_bytes, running_backward, what);
    }
  }
  // The first step at the peak, in the order the steps run.
  profile.peak_bytes = profile.state_bytes;
  for (int v = 0; v < n; ++v) {
    const std::int64_t bytes = profile.forward_bytes[static_cast<std::size_t>(v)];
    if (model.facts(v).computed && (profile.peak_node < 0 || bytes > profile.peak_bytes)) {
      profile.peak_bytes = bytes;
      profile.peak_node = v;
    }
  }
  for (int v = n - 1; v >= 0; --v) {
    const std::int64_t bytes = profile.backward_bytes[static_cast<std::size_t>(v)];
    if (model.facts(v).has_backward && bytes > profile.peak_bytes) {
      profile.peak_bytes = bytes;
      profile.peak_node = v;
      profile.peak_in_backward = true;
    }
  }
  return profile;
}

double step_seconds(const StepModel& model, const std::vector<int>& choice) {
  const Graph& graph = model.graph();
  double total = 0;
  for (std::size_t v = 0; v < graph.size(); ++v) {
    const int iv = static_cast<int>(v);
    total += model.node_seconds(iv, choice[v]);
    const Node& node = graph.node(iv);
    for (std::size_t k = 0; k < node.inputs.size(); ++k) {
      const int p = node.inputs[k];
      total +=
          model.edge_cost(iv, static_cast<int>(k), choice[static_cast<std::size_t>(p)], choice[v]);
    }
  }
  return total;
}

}  // namespace fsdp::solver::detail
