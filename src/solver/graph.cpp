#include "fsdp/solver/graph.hpp"

#include <algorithm>
#include <fstream>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>
#include <queue>
#include <set>
#include <sstream>

#include "../core/json_input.hpp"
#include "fsdp/core/error.hpp"
#include "fsdp/core/text.hpp"
#include "node_error.hpp"
#include "op_table.hpp"

namespace fsdp::solver {
namespace {

using detail::node_error;
using detail::shape_text;

void check_input_count(const Node& node, std::size_t count, const detail::OpProperties& op) {
  const std::size_t lo = op.min_inputs;
  const std::size_t hi = op.max_inputs;
  if (count < lo || count > hi) {
    throw node_error(
        node.id, node.op,
        "has " + std::to_string(count) + " inputs; it takes " +
            (lo == hi ? std::to_string(lo) : std::to_string(lo) + " to " + std::to_string(hi)));
  }
}

}  // namespace

const char* name_of(OpKind kind) {
  return detail::properties_of(kind).name;
}

std::int64_t Node::numel() const {
  std::int64_t n = 1;
  for (auto size : shape) {
    n *= size;
  }
  return n;
}

double Node::bytes() const {
  return static_cast<double>(numel()) * static_cast<double>(size_of(dtype));
}

Graph::Graph(const std::vector<NodeDecl>& decls) {
  const std::size_t count = decls.size();
  require(count > 0, "graph has no nodes; give at least an input and an output");
  std::map<std::string, int> declared;
  std::vector<Node> raw(count);
  for (std::size_t i = 0; i < count; ++i) {
    const NodeDecl& decl = decls[i];
    require(!decl.id.empty(), "graph node number " + std::to_string(i) + " has an empty id");
    const detail::FoundOp found = detail::find_op(decl.op);
    if (found.op == nullptr) {
      throw node_error(decl.id, decl.op,
                       "unknown op '" + decl.op + "'; known ops: " + detail::known_ops());
    }
    if (!declared.emplace(decl.id, static_cast<int>(i)).second) {
      throw node_error(decl.id, decl.op, "the id is used by another node too; ids are unique");
    }
    Node& node = raw[i];
    node.id = decl.id;
    node.kind = found.op->kind;
    node.op = found.spelling->name;
    node.linear = !found.spelling->partial_inputs.empty();
    node.shape = decl.shape;
    node.axes = decl.axes;
    node.permutation = decl.permutation;
    node.keep_dims = decl.keep_dims;
    for (auto size : node.shape) {
      if (size <= 0) {
        throw node_error(decl.id, node.op,
                         "shape " + shape_text(node.shape) +
                             " has a size <= 0; sizes are "
                             "positive");
      }
    }
  }
  // Resolve inputs by id.
  std::vector<std::vector<int>> inputs(count);
  for (std::size_t i = 0; i < count; ++i) {
    for (const std::string& name : decls[i].inputs) {
      const auto found = declared.find(name);
      if (found == declared.end()) {
        throw node_error(raw[i].id, raw[i].op,
                         "input '" + name + "' is not a node of the graph (dangling input)");
      }
      inputs[i].push_back(found->second);
    }
  }
  // Kahn's algorithm; among ready nodes the earliest declared goes first, so the order depends on
  // the file only.
  std::vector<int> pending(count, 0);
  std::vector<std::vector<int>> users(count);
  for (std::size_t i = 0; i < count; ++i) {
    pending[i] = static_cast<int>(inputs[i].size());
    for (int p : inputs[i]) {
      users[static_cast<std::size_t>(p)].push_back(static_cast<int>(i));
    }
  }
  std::priority_queue<int, std::vector<int>, std::greater<int>> ready;
  for (std::size_t i = 0; i < count; ++i) {
    if (pending[i] == 0) {
      ready.push(static_cast<int>(i));
    }
  }
  std::vector<int> order;
  while (!ready.empty()) {
    const int i = ready.top();
    ready.pop();
    order.push_back(i);
    for (int u : users[static_cast<std::size_t>(i)]) {
      if (--pending[static_cast<std::size_t>(u)] == 0) {
        ready.push(u);
      }
    }
  }
  if (order.size() != count) {
    // Every left-over node waits on another left-over node: walking inputs among them must come
    // back to a node already seen, which closes a cycle.
    int start = -1;
    for (std::size_t i = 0; i < count && start < 0; ++i) {
      if (pending[i] > 0) {
        start = static_cast<int>(i);
      }
    }
    std::vector<int> walk;
    std::vector<int> seen_at(count, -1);
    int at = start;
    while (seen_at[static_cast<std::size_t>(at)] < 0) {
      seen_at[static_cast<std::size_t>(at)] = static_cast<int>(walk.size());
      walk.push_back(at);
      for (int p : inputs[static_cast<std::size_t>(at)]) {
        if (pending[static_cast<std::size_t>(p)] > 0) {
          at = p;
          break;
        }
      }
    }
    std::string cycle;
    for (std::size_t k = walk.size(); k-- > static_cast<std::size_t>(seen_at[at]);) {
      cycle += raw[static_cast<std::size_t>(walk[k])].id + " -> ";
    }
    cycle += raw[static_cast<std::size_t>(walk.back())].id;  // data flows this way round
    throw node_error(raw[static_cast<std::size_t>(at)].id, raw[static_cast<std::size_t>(at)].op,
                     "is on a cycle: " + cycle + "; a computation graph must be acyclic");
  }
  // Store in topological order, then check shapes producer-first.
  std::vector<int> position(count);
  for (std::size_t k = 0; k < count; ++k) {
    position[static_cast<std::size_t>(order[k])] = static_cast<int>(k);
  }
  nodes_.resize(count);
  consumers_.assign(count, {});
  for (std::size_t k = 0; k < count; ++k) {
    const int original = order[k];
    Node node = std::move(raw[static_cast<std::size_t>(original)]);
    for (int p : inputs[static_cast<std::size_t>(original)]) {
      node.inputs.push_back(position[static_cast<std::size_t>(p)]);
    }
    std::vector<const Node*> in;
    for (int p : node.inputs) {
      in.push_back(&nodes_[static_cast<std::size_t>(p)]);
      auto& users_of_p = consumers_[static_cast<std::size_t>(p)];
      if (users_of_p.empty() || users_of_p.back() != static_cast<int>(k)) {
        users_of_p.push_back(static_cast<int>(k));  // once, even if it uses p twice
      }
    }
    const NodeDecl& decl = decls[static_cast<std::size_t>(original)];
    node.dtype = decl.dtype ? *decl.dtype : (in.empty() ? DType::f32 : in[0]->dtype);
    const std::vector<std::int64_t> declared_shape = node.shape;
    const detail::OpProperties& op = detail::properties_of(node.kind);
    check_input_count(node, in.size(), op);
    node.shape = op.shape(node, in);
    // Element counts and bytes are 64-bit integers: a shape (declared or implied by the inputs)
    // whose bytes at 8 per element, the widest dtype, would overflow is refused here, not turned
    // into negative costs later.
    constexpr std::int64_t kMostElements = std::numeric_limits<std::int64_t>::max() / 8;
    std::int64_t elements = 1;
    for (auto size : node.shape) {
      if (size > 0 && elements > kMostElements / size) {
        throw node_error(node.id, node.op,
                         "shape " + shape_text(node.shape) +
                             " has more than 2^60 elements: its size in bytes overflows 64 bits");
      }
      elements *= size;
    }
    // Its work too: a node whose FLOPs overflow 64 bits is refused here (node_error).
    (void)op.flops(node, in);
    if ((decl.shape_given || !declared_shape.empty()) && declared_shape != node.shape) {
      throw node_error(node.id, node.op,
                       "declared shape " + shape_text(declared_shape) +
                           " does not match the shape its inputs give, " + shape_text(node.shape));
    }
    if (!decl.sharding.empty()) {
      try {
        node.pinned = ShardingSpec::parse(decl.sharding, node.rank());
      } catch (const Error& error) {
        throw node_error(node.id, node.op, error.what());
      }
    }
    index_[node.id] = static_cast<int>(k);
    nodes_[k] = std::move(node);
  }
}

int Graph::index_of(const std::string& id) const {
  const auto found = index_.find(id);
  require(found != index_.end(), "the graph has no node '" + id + "'");
  return found->second;
}

Graph Graph::from_json(const std::string& text) {
  const nlohmann::json document = parse_json_input(text, "graph JSON");
  const nlohmann::json* list = &document;
  if (document.is_object()) {
    require(document.contains("nodes"),
            "graph JSON: expected {\"nodes\": [...]} or a list of nodes");
    list = &document["nodes"];
    for (const auto& item : document.items()) {
      require(item.key() == "nodes", "graph JSON: unknown top-level field \"" + item.key() +
                                         "\"; a graph has only \"nodes\" (or is a list of nodes)");
    }
  }
  require(list->is_array(), "graph JSON: \"nodes\" must be a list of node objects");
  static const std::set<std::string> known = {"id",    "op",        "inputs",   "shape",
                                              "dtype", "axes",      "axis",     "permutation",
                                              "perm",  "keep_dims", "keepdims", "sharding"};
  std::vector<NodeDecl> decls;
  for (std::size_t i = 0; i < list->size(); ++i) {
    const nlohmann::json& item = (*list)[i];
    const std::string where = "graph JSON node number " + std::to_string(i);
    require(item.is_object(), where + " is not an object");
    require(item.contains("id") && item["id"].is_string(), where + " needs a string \"id\"");
    NodeDecl decl;
    decl.id = item["id"].get<std::string>();
    const std::string named = "graph node '" + decl.id + "'";
    require(item.contains("op") && item["op"].is_string(), named + " needs a string \"op\"");
    decl.op = item["op"].get<std::string>();
    for (auto field = item.begin(); field != item.end(); ++field) {
      require(known.count(field.key()) == 1,
              named + ": unknown field \"" + field.key() +
                  "\"; fields are id, op, inputs, shape, dtype, axes (or axis), permutation, "
                  "keep_dims, sharding");
    }
    try {
      if (item.contains("inputs")) {
        decl.inputs = item["inputs"].get<std::vector<std::string>>();
      }
      if (item.contains("shape")) {
        decl.shape = json_integers<std::int64_t>(item["shape"], "\"shape\"");
        decl.shape_given = true;
      }
      if (item.contains("dtype")) {
        decl.dtype = parse_dtype(item["dtype"].get<std::string>());
      }
      if (item.contains("axes")) {
        decl.axes = json_integers<int>(item["axes"], "\"axes\"");
      }
      if (item.contains("axis")) {
        decl.axes = {json_integer<int>(item["axis"], "\"axis\"")};
      }
      const char* perm = item.contains("permutation") ? "permutation" : "perm";
      if (item.contains(perm)) {
        decl.permutation = json_integers<int>(item[perm], std::string("\"") + perm + "\"");
      }
      const char* keep = item.contains("keep_dims") ? "keep_dims" : "keepdims";
      if (item.contains(keep)) {
        decl.keep_dims = item[keep].get<bool>();
      }
      if (item.contains("sharding")) {
        decl.sharding = item["sharding"].get<std::string>();
      }
    } catch (const nlohmann::json::exception& error) {
      throw Error(named + ": a field has the wrong type (inputs: list of ids, shape/axes/" +
                  "permutation: lists of integers, dtype/sharding: strings, keep_dims: bool): " +
                  error.what());
    } catch (const Error& error) {
      throw Error(named + ": " + message_of(error));
    }
    decls.push_back(std::move(decl));
  }
  return Graph(decls);
}

Graph Graph::from_file(const std::string& path) {
  const std::string text = read_text_file(path, "graph file");
  try {
    return from_json(text);
  } catch (const Error& error) {
    throw Error(error.kind(), message_of(error) + " (in " + path + ")");
  }
}

std::string Graph::to_json() const {
  nlohmann::json list = nlohmann::json::array();
  for (const Node& node : nodes_) {
    nlohmann::json item = {{"id", node.id}, {"op", node.op}};
    if (!node.inputs.empty()) {
      std::vector<std::string> names;
      for (int p : node.inputs) {
        names.push_back(nodes_[static_cast<std::size_t>(p)].id);
      }
      item["inputs"] = names;
    }
    item["shape"] = node.shape;
    item["dtype"] = name_of(node.dtype);
    if (!node.axes.empty()) {
      item["axes"] = node.axes;
    }
    if (!node.permutation.empty()) {
      item["permutation"] = node.permutation;
    }
    if (node.keep_dims) {
      item["keep_dims"] = true;
    }
    if (node.pinned) {
      item["sharding"] = node.pinned->to_string(node.rank());
    }
    list.push_back(std::move(item));
  }
  return nlohmann::json{{"nodes", list}}.dump(1);
}

NodeDecl fp32_node(const std::string& id, const std::string& op, std::vector<std::string> inputs,
                   std::vector<std::int64_t> shape, const std::string& sharding) {
  NodeDecl node;
  node.id = id;
  node.op = op;
  node.inputs = std::move(inputs);
  node.shape = std::move(shape);
  node.dtype = DType::f32;
  node.sharding = sharding;
  return node;
}

}  // namespace fsdp::solver
