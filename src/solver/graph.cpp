#include "fsdp/solver/graph.hpp"

#include <algorithm>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <queue>
#include <set>
#include <sstream>

#include "fsdp/core/error.hpp"

namespace fsdp::solver {
namespace {

struct OpInfo {
  const char* name;
  OpKind kind;
  bool linear;  // partial sums pass through it
};

// Aliases map to the first name of the same kind; the table is the list of known ops.
const OpInfo kOps[] = {
    {"input", OpKind::input, false},
    {"parameter", OpKind::parameter, false},
    {"output", OpKind::output, false},
    {"matmul", OpKind::matmul, false},
    {"batched_matmul", OpKind::batched_matmul, false},
    {"relu", OpKind::unary, false},
    {"gelu", OpKind::unary, false},
    {"silu", OpKind::unary, false},
    {"tanh", OpKind::unary, false},
    {"sigmoid", OpKind::unary, false},
    {"exp", OpKind::unary, false},
    {"log", OpKind::unary, false},
    {"sqrt", OpKind::unary, false},
    {"rsqrt", OpKind::unary, false},
    {"square", OpKind::unary, false},
    {"dropout", OpKind::unary, false},
    {"unary", OpKind::unary, false},
    {"neg", OpKind::unary, true},
    {"scale", OpKind::unary, true},
    {"identity", OpKind::unary, true},
    {"add", OpKind::binary, true},
    {"sub", OpKind::binary, true},
    {"mul", OpKind::binary, true},
    {"div", OpKind::binary, true},
    {"maximum", OpKind::binary, false},
    {"minimum", OpKind::binary, false},
    {"binary", OpKind::binary, false},
    {"reduce_sum", OpKind::reduce, true},
    {"reduce_mean", OpKind::reduce, true},
    {"reduce_max", OpKind::reduce, false},
    {"transpose", OpKind::transpose, true},
    {"reshape", OpKind::reshape, true},
    {"softmax", OpKind::softmax, false},
    {"layer_norm", OpKind::layer_norm, false},
};

const std::pair<const char*, const char*> kAliases[] = {
    {"param", "parameter"},     {"weight", "parameter"}, {"bmm", "batched_matmul"},
    {"sum", "reduce_sum"},      {"mean", "reduce_mean"}, {"max", "reduce_max"},
    {"layernorm", "layer_norm"}};

std::string known_ops() {
  std::string list;
  for (const OpInfo& op : kOps) {
    list += list.empty() ? "" : ", ";
    list += op.name;
  }
  return list;
}

std::string shape_text(const std::vector<std::int64_t>& shape) {
  std::string text = "(";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    text += (i ? ", " : "") + std::to_string(shape[i]);
  }
  return text + ")";
}

// An Error prefixed with the node it is about.
Error node_error(const std::string& id, const std::string& op, const std::string& what) {
  return Error("fsdp: graph node '" + id + "' (" + op + "): " + what);
}

std::vector<std::int64_t> broadcast_shapes(const std::vector<std::int64_t>& a,
                                           const std::vector<std::int64_t>& b, bool& ok) {
  const std::size_t rank = std::max(a.size(), b.size());
  std::vector<std::int64_t> out(rank);
  ok = true;
  for (std::size_t i = 0; i < rank; ++i) {
    const std::int64_t da = i < rank - a.size() ? 1 : a[i - (rank - a.size())];
    const std::int64_t db = i < rank - b.size() ? 1 : b[i - (rank - b.size())];
    if (da != db && da != 1 && db != 1) {
      ok = false;
    }
    out[i] = std::max(da, db);
  }
  return out;
}

int normalize_axis(int axis, int rank, const std::string& id, const std::string& op) {
  if (axis < -rank || axis >= rank) {
    throw node_error(id, op,
                     "axis " + std::to_string(axis) + " is out of range for an input of rank " +
                         std::to_string(rank));
  }
  return axis < 0 ? axis + rank : axis;
}

// The output shape of a computed node from its inputs, checking arity and attributes.
std::vector<std::int64_t> infer_shape(Node& node, const std::vector<const Node*>& in) {
  const std::string& id = node.id;
  const std::string& op = node.op;
  const auto arity = [&](std::size_t lo, std::size_t hi) {
    if (in.size() < lo || in.size() > hi) {
      throw node_error(
          id, op,
          "has " + std::to_string(in.size()) + " inputs; it takes " +
              (lo == hi ? std::to_string(lo) : std::to_string(lo) + " to " + std::to_string(hi)));
    }
  };
  switch (node.kind) {
    case OpKind::input:
    case OpKind::parameter:
      arity(0, 0);
      if (node.shape.empty()) {
        throw node_error(id, op, "needs a shape (a list of positive sizes)");
      }
      return node.shape;
    case OpKind::output:
    case OpKind::unary:
      arity(1, 1);
      return in[0]->shape;
    case OpKind::matmul: {
      arity(2, 2);
      const auto& a = in[0]->shape;
      const auto& b = in[1]->shape;
      if (a.size() < 2 || b.size() != 2) {
        throw node_error(id, op,
                         "takes A of rank >= 2 and B of rank 2 (use batched_matmul for batched "
                         "B); got " +
                             shape_text(a) + " @ " + shape_text(b));
      }
      if (a.back() != b[0]) {
        throw node_error(id, op,
                         "contracting sizes differ: " + shape_text(a) + " @ " + shape_text(b) +
                             " (A's last dimension must equal B's first)");
      }
      std::vector<std::int64_t> out(a.begin(), a.end() - 1);
      out.push_back(b[1]);
      return out;
    }
    case OpKind::batched_matmul: {
      arity(2, 2);
      const auto& a = in[0]->shape;
      const auto& b = in[1]->shape;
      const std::size_t r = a.size();
      if (r < 3 || b.size() != r || !std::equal(a.begin(), a.end() - 2, b.begin()) ||
          a[r - 1] != b[r - 2]) {
        throw node_error(id, op,
                         "takes A (b..., M, K) and B (b..., K, N) of the same rank >= 3 with "
                         "equal batch dimensions; got " +
                             shape_text(a) + " @ " + shape_text(b));
      }
      std::vector<std::int64_t> out(a.begin(), a.end() - 1);
      out.push_back(b[r - 1]);
      return out;
    }
    case OpKind::binary: {
      arity(2, 2);
      bool ok = true;
      auto out = broadcast_shapes(in[0]->shape, in[1]->shape, ok);
      if (!ok) {
        throw node_error(id, op,
                         "input shapes " + shape_text(in[0]->shape) + " and " +
                             shape_text(in[1]->shape) + " do not broadcast");
      }
      return out;
    }
    case OpKind::reduce: {
      arity(1, 1);
      const int rank = in[0]->rank();
      if (node.axes.empty()) {
        throw node_error(id, op, "needs \"axes\": the dimensions to reduce");
      }
      for (int& axis : node.axes) {
        axis = normalize_axis(axis, rank, id, op);
      }
      std::sort(node.axes.begin(), node.axes.end());
      if (std::adjacent_find(node.axes.begin(), node.axes.end()) != node.axes.end()) {
        throw node_error(id, op, "\"axes\" lists a dimension twice");
      }
      std::vector<std::int64_t> out;
      for (int d = 0; d < rank; ++d) {
        const bool reduced = std::binary_search(node.axes.begin(), node.axes.end(), d);
        if (!reduced) {
          out.push_back(in[0]->shape[static_cast<std::size_t>(d)]);
        } else if (node.keep_dims) {
          out.push_back(1);
        }
      }
      if (out.empty()) {
        out.push_back(1);  // a full reduction is a one-element tensor
      }
      return out;
    }
    case OpKind::transpose: {
      arity(1, 1);
      const int rank = in[0]->rank();
      std::vector<int> sorted = node.permutation;
      std::sort(sorted.begin(), sorted.end());
      bool ok = static_cast<int>(sorted.size()) == rank;
      for (int d = 0; ok && d < rank; ++d) {
        ok = sorted[static_cast<std::size_t>(d)] == d;
      }
      if (!ok) {
        throw node_error(id, op,
                         "\"permutation\" must list each of the input's " + std::to_string(rank) +
                             " dimensions once");
      }
      std::vector<std::int64_t> out;
      for (int d : node.permutation) {
        out.push_back(in[0]->shape[static_cast<std::size_t>(d)]);
      }
      return out;
    }
    case OpKind::reshape: {
      arity(1, 1);
      if (node.shape.empty()) {
        throw node_error(id, op, "needs the target \"shape\"");
      }
      std::int64_t numel = 1;
      for (auto size : node.shape) {
        numel *= size;
      }
      if (numel != in[0]->numel()) {
        throw node_error(id, op,
                         "shape " + shape_text(node.shape) + " has " + std::to_string(numel) +
                             " elements; the input " + shape_text(in[0]->shape) + " has " +
                             std::to_string(in[0]->numel()));
      }
      return node.shape;
    }
    case OpKind::softmax: {
      arity(1, 1);
      const int rank = in[0]->rank();
      if (node.axes.empty()) {
        node.axes.push_back(rank - 1);
      }
      if (node.axes.size() != 1) {
        throw node_error(id, op, "takes one axis");
      }
      node.axes[0] = normalize_axis(node.axes[0], rank, id, op);
      return in[0]->shape;
    }
    case OpKind::layer_norm: {
      arity(1, 3);
      const int rank = in[0]->rank();
      if (node.axes.empty()) {
        node.axes.push_back(rank - 1);
      }
      for (int& axis : node.axes) {
        axis = normalize_axis(axis, rank, id, op);
      }
      std::sort(node.axes.begin(), node.axes.end());
      for (std::size_t i = 0; i < node.axes.size(); ++i) {
        if (node.axes[i] != rank - static_cast<int>(node.axes.size()) + static_cast<int>(i)) {
          throw node_error(id, op,
                           "normalizes trailing dimensions only; \"axes\" must be the "
                           "last dimensions of the input, each once");
        }
      }
      const std::vector<std::int64_t> normalized(in[0]->shape.end() - node.axes.size(),
                                                 in[0]->shape.end());
      for (std::size_t k = 1; k < in.size(); ++k) {
        if (in[k]->shape != normalized) {
          throw node_error(id, op,
                           std::string(k == 1 ? "gamma" : "beta") + " '" + in[k]->id +
                               "' has shape " + shape_text(in[k]->shape) + "; it must be " +
                               shape_text(normalized) + ", the normalized dimensions");
        }
      }
      return in[0]->shape;
    }
  }
  return {};
}

const OpInfo* find_op(std::string name) {
  for (const auto& alias : kAliases) {
    if (name == alias.first) {
      name = alias.second;
    }
  }
  for (const OpInfo& op : kOps) {
    if (name == op.name) {
      return &op;
    }
  }
  return nullptr;
}

}  // namespace

const char* name_of(OpKind kind) {
  switch (kind) {
    case OpKind::input:
      return "input";
    case OpKind::parameter:
      return "parameter";
    case OpKind::matmul:
      return "matmul";
    case OpKind::batched_matmul:
      return "batched_matmul";
    case OpKind::unary:
      return "unary";
    case OpKind::binary:
      return "binary";
    case OpKind::reduce:
      return "reduce";
    case OpKind::transpose:
      return "transpose";
    case OpKind::reshape:
      return "reshape";
    case OpKind::softmax:
      return "softmax";
    case OpKind::layer_norm:
      return "layer_norm";
    case OpKind::output:
      return "output";
  }
  return "?";
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
  require(count > 0, "fsdp: graph has no nodes; give at least an input and an output");
  std::map<std::string, int> declared;
  std::vector<Node> raw(count);
  for (std::size_t i = 0; i < count; ++i) {
    const NodeDecl& decl = decls[i];
    require(!decl.id.empty(), "fsdp: graph node number " + std::to_string(i) + " has an empty id");
    const OpInfo* info = find_op(decl.op);
    if (info == nullptr) {
      throw node_error(decl.id, decl.op, "unknown op '" + decl.op + "'; known ops: " + known_ops());
    }
    if (!declared.emplace(decl.id, static_cast<int>(i)).second) {
      throw node_error(decl.id, decl.op, "the id is used by another node too; ids are unique");
    }
    Node& node = raw[i];
    node.id = decl.id;
    node.kind = info->kind;
    node.op = info->name;
    node.linear = info->linear;
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
    node.shape = infer_shape(node, in);
    if (!declared_shape.empty() && declared_shape != node.shape) {
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
  require(found != index_.end(), "fsdp: the graph has no node '" + id + "'");
  return found->second;
}

Graph Graph::from_json(const std::string& text) {
  nlohmann::json document;
  try {
    document = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& error) {
    throw Error(std::string("fsdp: graph JSON does not parse: ") + error.what());
  }
  const nlohmann::json* list = &document;
  if (document.is_object()) {
    require(document.contains("nodes"),
            "fsdp: graph JSON: expected {\"nodes\": [...]} or a list of nodes");
    list = &document["nodes"];
  }
  require(list->is_array(), "fsdp: graph JSON: \"nodes\" must be a list of node objects");
  static const std::set<std::string> known = {"id",    "op",        "inputs",   "shape",
                                              "dtype", "axes",      "axis",     "permutation",
                                              "perm",  "keep_dims", "keepdims", "sharding"};
  std::vector<NodeDecl> decls;
  for (std::size_t i = 0; i < list->size(); ++i) {
    const nlohmann::json& item = (*list)[i];
    const std::string where = "fsdp: graph JSON node number " + std::to_string(i);
    require(item.is_object(), where + " is not an object");
    require(item.contains("id") && item["id"].is_string(), where + " needs a string \"id\"");
    NodeDecl decl;
    decl.id = item["id"].get<std::string>();
    const std::string named = "fsdp: graph node '" + decl.id + "'";
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
        decl.shape = item["shape"].get<std::vector<std::int64_t>>();
      }
      if (item.contains("dtype")) {
        decl.dtype = parse_dtype(item["dtype"].get<std::string>());
      }
      if (item.contains("axes")) {
        decl.axes = item["axes"].get<std::vector<int>>();
      }
      if (item.contains("axis")) {
        decl.axes = {item["axis"].get<int>()};
      }
      const char* perm = item.contains("permutation") ? "permutation" : "perm";
      if (item.contains(perm)) {
        decl.permutation = item[perm].get<std::vector<int>>();
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
      throw Error(named + ": " + error.what());
    }
    decls.push_back(std::move(decl));
  }
  return Graph(decls);
}

Graph Graph::from_file(const std::string& path) {
  std::ifstream file(path);
  require(file.good(), "fsdp: cannot open graph file '" + path + "'");
  std::stringstream text;
  text << file.rdbuf();
  try {
    return from_json(text.str());
  } catch (const Error& error) {
    throw Error(std::string(error.what()) + " (in " + path + ")");
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
