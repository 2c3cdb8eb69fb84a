#include "fsdp/solver/solution.hpp"

#include <nlohmann/json.hpp>

#include "../core/json_input.hpp"
#include "fsdp/core/error.hpp"

namespace fsdp::solver {
namespace {

LayoutCollective parse_collective(const std::string& name) {
  for (LayoutCollective c :
       {LayoutCollective::none, LayoutCollective::all_reduce, LayoutCollective::all_gather,
        LayoutCollective::reduce_scatter, LayoutCollective::all_to_all}) {
    if (name == name_of(c)) {
      return c;
    }
  }
  throw Error("solution JSON: unknown collective '" + name + "'");
}

const char* kind_name(ShardingSpec::Kind kind) {
  switch (kind) {
    case ShardingSpec::Kind::replicated:
      return "replicated";
    case ShardingSpec::Kind::sharded:
      return "sharded";
    case ShardingSpec::Kind::partial:
      return "partial";
  }
  return "?";
}

nlohmann::json spec_json(const ShardingSpec& spec) {
  nlohmann::json j = {{"kind", kind_name(spec.kind)}};
  if (spec.is_sharded()) {
    j["dim"] = spec.dim;
  }
  return j;
}

ShardingSpec spec_from(const nlohmann::json& j) {
  const std::string kind = j.at("kind").get<std::string>();
  if (kind == "replicated") {
    return ShardingSpec::replicated();
  }
  if (kind == "partial") {
    return ShardingSpec::partial();
  }
  require(kind == "sharded", "solution JSON: unknown sharding kind '" + kind + "'");
  return ShardingSpec::sharded(j.at("dim").get<int>());
}

}  // namespace

const NodeSolution& Solution::node(const std::string& id) const {
  const auto found = index_.find(id);
  require(found != index_.end(), "the solution has no node '" + id + "'");
  return nodes[static_cast<std::size_t>(found->second)];
}

void Solution::index_nodes() {
  index_.clear();
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    index_[nodes[i].id] = static_cast<int>(i);
  }
}

// Doubles are written by nlohmann as the shortest text that reads back to the same bits, so a
// solution survives the round trip exactly.
std::string Solution::to_json() const {
  nlohmann::json list = nlohmann::json::array();
  for (const NodeSolution& n : nodes) {
    nlohmann::json inputs = nlohmann::json::array();
    for (const auto& s : n.input_specs) {
      inputs.push_back(spec_json(s));
    }
    nlohmann::json transfers = nlohmann::json::array();
    for (const InputTransfer& t : n.transfers) {
      transfers.push_back({{"producer", t.producer},
                           {"from", spec_json(t.from)},
                           {"to", spec_json(t.to)},
                           {"collective", name_of(t.transfer.collective)},
                           {"buffer_bytes", t.transfer.buffer_bytes},
                           {"traffic_bytes", t.transfer.traffic_bytes},
                           {"seconds", t.transfer.seconds}});
    }
    list.push_back({{"id", n.id},
                    {"op", n.op},
                    {"shape", n.shape},
                    {"strategy", n.strategy},
                    {"inputs", inputs},
                    {"output", spec_json(n.output_spec)},
                    {"output_layout", n.output_spec.to_string(static_cast<int>(n.shape.size()))},
                    {"flops_per_device", n.flops_per_device},
                    {"compute_s", n.compute_s},
                    {"communication_s", n.communication_s},
                    {"resharding_s", n.resharding_s},
                    {"total_s", n.total_s()},
                    {"transfers", transfers}});
  }
  const nlohmann::json document = {{"solver", solver},
                                   {"machine",
                                    {{"devices", machine.devices},
                                     {"flops_per_s", machine.flops_per_s},
                                     {"link_bytes_per_s", machine.link_bytes_per_s},
                                     {"collective_latency_s", machine.collective_latency_s}}},
                                   {"totals",
                                    {{"compute_s", compute_s},
                                     {"communication_s", communication_s},
                                     {"resharding_s", resharding_s},
                                     {"total_s", total_s}}},
                                   {"nodes", list}};
  return document.dump();
}

Solution Solution::from_json(const std::string& text) {
  Solution s;
  try {
    const nlohmann::json document = parse_json_input(text, "solution JSON");
    s.solver = document.at("solver").get<std::string>();
    const auto& m = document.at("machine");
    s.machine.devices = m.at("devices").get<int>();
    s.machine.flops_per_s = m.at("flops_per_s").get<double>();
    s.machine.link_bytes_per_s = m.at("link_bytes_per_s").get<double>();
    s.machine.collective_latency_s = m.at("collective_latency_s").get<double>();
    const auto& totals = document.at("totals");
    s.compute_s = totals.at("compute_s").get<double>();
    s.communication_s = totals.at("communication_s").get<double>();
    s.resharding_s = totals.at("resharding_s").get<double>();
    s.total_s = totals.at("total_s").get<double>();
    for (const auto& item : document.at("nodes")) {
      NodeSolution n;
      n.id = item.at("id").get<std::string>();
      n.op = item.at("op").get<std::string>();
      n.shape = item.at("shape").get<std::vector<std::int64_t>>();
      n.strategy = item.at("strategy").get<std::string>();
      for (const auto& spec : item.at("inputs")) {
        n.input_specs.push_back(spec_from(spec));
      }
      n.output_spec = spec_from(item.at("output"));
      n.flops_per_device = item.at("flops_per_device").get<double>();
      n.compute_s = item.at("compute_s").get<double>();
      n.communication_s = item.at("communication_s").get<double>();
      n.resharding_s = item.at("resharding_s").get<double>();
      for (const auto& t : item.at("transfers")) {
        InputTransfer transfer;
        transfer.producer = t.at("producer").get<std::string>();
        transfer.from = spec_from(t.at("from"));
        transfer.to = spec_from(t.at("to"));
        transfer.transfer.collective = parse_collective(t.at("collective").get<std::string>());
        transfer.transfer.buffer_bytes = t.at("buffer_bytes").get<double>();
        transfer.transfer.traffic_bytes = t.at("traffic_bytes").get<double>();
        transfer.transfer.seconds = t.at("seconds").get<double>();
        n.transfers.push_back(transfer);
      }
      s.nodes.push_back(std::move(n));
    }
  } catch (const nlohmann::json::exception& error) {
    throw Error(std::string("solution JSON is not one written by Solution::to_json: ") +
                error.what());
  }
  s.index_nodes();
  return s;
}

Solution evaluate(const Graph& graph, const std::vector<std::vector<Strategy>>& strategies,
                  const std::vector<int>& choice, const Machine& machine,
                  const std::string& solver_name) {
  require(choice.size() == graph.size() && strategies.size() == graph.size(),
          "evaluate: one strategy choice per node is needed");
  Solution solution;
  solution.solver = solver_name;
  solution.machine = machine;
  solution.nodes.reserve(graph.size());
  for (std::size_t i = 0; i < graph.size(); ++i) {
    const Node& node = graph.node(static_cast<int>(i));
    const Strategy& s = strategies[i][static_cast<std::size_t>(choice[i])];
    NodeSolution n;
    n.id = node.id;
    n.op = node.op;
    n.shape = node.shape;
    n.strategy = describe(s, node);
    n.input_specs = s.inputs;
    n.output_spec = s.output;
    n.flops_per_device = s.flops_per_device;
    n.compute_s = s.flops_per_device / machine.flops_per_s;
    for (std::size_t k = 0; k < node.inputs.size(); ++k) {
      const int p = node.inputs[k];
      const Node& producer = graph.node(p);
      const ShardingSpec& from =
          strategies[static_cast<std::size_t>(p)][static_cast<std::size_t>(choice[p])].output;
      InputTransfer t{producer.id, from, s.inputs[k],
                      reshard_cost(from, s.inputs[k], producer.bytes(), machine)};
      (completes_partial_sum(from) ? n.communication_s : n.resharding_s) += t.transfer.seconds;
      n.transfers.push_back(t);
    }
    solution.compute_s += n.compute_s;
    solution.communication_s += n.communication_s;
    solution.resharding_s += n.resharding_s;
    solution.nodes.push_back(std::move(n));
  }
  solution.total_s = solution.compute_s + solution.communication_s + solution.resharding_s;
  solution.index_nodes();
  return solution;
}

double total_cost(const Graph& graph, const std::vector<std::vector<Strategy>>& strategies,
                  const std::vector<int>& choice, const Machine& machine) {
  double total = 0;
  for (std::size_t i = 0; i < graph.size(); ++i) {
    const Node& node = graph.node(static_cast<int>(i));
    const Strategy& s = strategies[i][static_cast<std::size_t>(choice[i])];
    total += s.flops_per_device / machine.flops_per_s;
    for (std::size_t k = 0; k < node.inputs.size(); ++k) {
      const int p = node.inputs[k];
      const ShardingSpec& from =
          strategies[static_cast<std::size_t>(p)][static_cast<std::size_t>(choice[p])].output;
      total += reshard_cost(from, s.inputs[k], graph.node(p).bytes(), machine).seconds;
    }
  }
  return total;
}

}  // namespace fsdp::solver
