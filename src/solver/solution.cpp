#include "fsdp/solver/solution.hpp"

#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>

#include "../core/json_input.hpp"
#include "checked_int.hpp"
#include "fsdp/core/error.hpp"
#include "step_model.hpp"

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

ParameterUse parse_use(const std::string& name) {
  for (ParameterUse use :
       {ParameterUse::replicated, ParameterUse::fsdp, ParameterUse::tensor_parallel}) {
    if (name == name_of(use)) {
      return use;
    }
  }
  throw Error("solution JSON: unknown parameter use '" + name +
              "'; expected replicated, fsdp or tensor_parallel");
}

// A whole number in [low, high]: a JSON float or an integer out of range is an error, never a
// conversion that overflows.
std::int64_t whole_value(const nlohmann::json& value, const std::string& what,
                         std::int64_t low = std::numeric_limits<std::int64_t>::min(),
                         std::int64_t high = std::numeric_limits<std::int64_t>::max()) {
  bool fits = value.is_number_integer();
  std::int64_t number = 0;
  if (value.is_number_unsigned()) {
    fits = value.get<std::uint64_t>() <=
           static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max());
  }
  if (fits) {
    number = value.get<std::int64_t>();
    fits = number >= low && number <= high;
  }
  require(fits, "solution JSON: " + what + " must be a whole number from " + std::to_string(low) +
                    " to " + std::to_string(high));
  return number;
}

std::int64_t whole(const nlohmann::json& j, const char* key) {
  return whole_value(j.at(key), std::string("\"") + key + "\"");
}

int whole_int(const nlohmann::json& j, const char* key) {
  return static_cast<int>(whole_value(j.at(key), std::string("\"") + key + "\"",
                                      std::numeric_limits<int>::min(),
                                      std::numeric_limits<int>::max()));
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

nlohmann::json axis_json(const ShardingSpec::AxisUse& use) {
  nlohmann::json j = {{"kind", kind_name(use.kind)}};
  if (use.kind == ShardingSpec::Kind::sharded) {
    j["dim"] = use.dim;
  }
  return j;
}

ShardingSpec::AxisUse axis_from(const nlohmann::json& j) {
  const std::string kind = j.at("kind").get<std::string>();
  if (kind == "replicated") {
    return {};
  }
  if (kind == "partial") {
    return {ShardingSpec::Kind::partial, -1};
  }
  require(kind == "sharded", "solution JSON: unknown sharding kind '" + kind + "'");
  return {ShardingSpec::Kind::sharded, whole_int(j, "dim")};
}

// A spec that uses axis 0 only is written as version 1 wrote it: {"kind", "dim"}.
nlohmann::json spec_json(const ShardingSpec& spec) {
  if (!spec.uses_axis(1)) {
    return axis_json(spec.axis(0));
  }
  return {{"axes", {axis_json(spec.axis(0)), axis_json(spec.axis(1))}}};
}

ShardingSpec spec_from(const nlohmann::json& j) {
  ShardingSpec spec;
  if (!j.contains("axes")) {
    spec.axes[0] = axis_from(j);
    return spec;
  }
  const auto& axes = j.at("axes");
  require(axes.is_array() && axes.size() <= ShardingSpec::kMaxAxes,
          "solution JSON: a spec's \"axes\" is a list of at most 2 axis uses");
  for (std::size_t a = 0; a < axes.size(); ++a) {
    spec.axes[a] = axis_from(axes[a]);
  }
  return spec;
}

nlohmann::json transfer_json(const InputTransfer& t) {
  nlohmann::json j = {{"producer", t.producer},
                      {"from", spec_json(t.from)},
                      {"to", spec_json(t.to)},
                      {"collective", name_of(t.transfer.collective)},
                      {"axis", t.transfer.axis},
                      {"buffer_bytes", t.transfer.buffer_bytes},
                      {"traffic_bytes", t.transfer.traffic_bytes},
                      {"seconds", t.transfer.seconds}};
  if (!t.then.empty()) {
    nlohmann::json then = nlohmann::json::array();
    for (const Transfer& step : t.then) {
      then.push_back({{"collective", name_of(step.collective)},
                      {"axis", step.axis},
                      {"buffer_bytes", step.buffer_bytes},
                      {"traffic_bytes", step.traffic_bytes},
                      {"seconds", step.seconds}});
    }
    j["then"] = std::move(then);
  }
  return j;
}

Transfer collective_from(const nlohmann::json& t) {
  Transfer transfer;
  transfer.collective = parse_collective(t.at("collective").get<std::string>());
  transfer.axis = t.contains("axis") ? whole_int(t, "axis") : 0;
  transfer.buffer_bytes = t.at("buffer_bytes").get<double>();
  transfer.traffic_bytes = t.at("traffic_bytes").get<double>();
  transfer.seconds = t.at("seconds").get<double>();
  return transfer;
}

InputTransfer transfer_from(const nlohmann::json& t) {
  InputTransfer transfer;
  transfer.producer = t.at("producer").get<std::string>();
  transfer.from = spec_from(t.at("from"));
  transfer.to = spec_from(t.at("to"));
  transfer.transfer = collective_from(t);
  if (t.contains("then")) {
    for (const auto& step : t.at("then")) {
      transfer.then.push_back(collective_from(step));
    }
  }
  return transfer;
}

InputTransfer input_transfer(const std::string& producer, const ShardingSpec& from,
                             const ShardingSpec& to, const Conversion& conversion) {
  InputTransfer transfer{producer, from, to, conversion.steps[0], {}};
  for (std::size_t i = 1; i < conversion.steps.size(); ++i) {
    if (conversion.steps[i].collective != LayoutCollective::none) {
      transfer.then.push_back(conversion.steps[i]);
    }
  }
  return transfer;
}

}  // namespace

double InputTransfer::seconds() const {
  double total = transfer.seconds;
  for (const Transfer& step : then) {
    total += step.seconds;
  }
  return total;
}

const char* name_of(ParameterUse use) {
  switch (use) {
    case ParameterUse::replicated:
      return "replicated";
    case ParameterUse::fsdp:
      return "fsdp";
    case ParameterUse::tensor_parallel:
      return "tensor_parallel";
  }
  return "?";
}

std::string ParameterOutcome::summary() const {
  const auto part = [&](int a) {
    return std::string(uses[static_cast<std::size_t>(a)] == ParameterUse::fsdp
                           ? "FSDP dim "
                           : "tensor-parallel dim ") +
           std::to_string(layout.axis(a).dim);
  };
  const bool both = uses[0] != ParameterUse::replicated && uses[1] != ParameterUse::replicated;
  if (both && uses[0] == uses[1] && layout.axis(0).dim == layout.axis(1).dim) {
    return part(0) + " along axes 0 and 1";
  }
  std::string text;
  for (int a = 0; a < ShardingSpec::kMaxAxes; ++a) {
    if (uses[static_cast<std::size_t>(a)] != ParameterUse::replicated) {
      text += (text.empty() ? "" : "; ") + part(a) + " along axis " + std::to_string(a);
    }
  }
  return text.empty() ? "replicated" : text;
}

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
  const int mesh_axes = machine.axis_count();
  nlohmann::json list = nlohmann::json::array();
  for (const NodeSolution& n : nodes) {
    nlohmann::json inputs = nlohmann::json::array();
    for (const auto& s : n.input_specs) {
      inputs.push_back(spec_json(s));
    }
    nlohmann::json transfers = nlohmann::json::array();
    for (const InputTransfer& t : n.transfers) {
      transfers.push_back(transfer_json(t));
    }
    nlohmann::json gradients = nlohmann::json::array();
    for (const InputTransfer& t : n.gradient_transfers) {
      gradients.push_back(transfer_json(t));
    }
    list.push_back(
        {{"id", n.id},
         {"op", n.op},
         {"shape", n.shape},
         {"strategy", n.strategy},
         {"inputs", std::move(inputs)},
         {"output", spec_json(n.output_spec)},
         {"output_layout", n.output_spec.to_string(static_cast<int>(n.shape.size()), mesh_axes)},
         {"flops_per_device", n.flops_per_device},
         {"compute_s", n.compute_s},
         {"communication_s", n.communication_s},
         {"resharding_s", n.resharding_s},
         {"backward_compute_s", n.backward_compute_s},
         {"backward_communication_s", n.backward_communication_s},
         {"gradient_sync_s", n.gradient_sync_s},
         {"optimizer_s", n.optimizer_s},
         {"total_s", n.total_s()},
         {"transfers", std::move(transfers)},
         {"gradient_transfers", std::move(gradients)},
         {"memory",
          {{"state_bytes", n.memory.state_bytes},
           {"activation_bytes", n.memory.activation_bytes},
           {"forward_bytes", n.memory.forward_bytes},
           {"backward_bytes", n.memory.backward_bytes}}}});
  }
  nlohmann::json outcomes = nlohmann::json::array();
  for (const ParameterOutcome& p : parameters) {
    const int rank = static_cast<int>(node(p.id).shape.size());
    outcomes.push_back({{"id", p.id},
                        {"layout", p.layout.to_string(rank, mesh_axes)},
                        {"spec", spec_json(p.layout)},
                        {"uses", {name_of(p.uses[0]), name_of(p.uses[1])}},
                        {"state_bytes", p.state_bytes},
                        {"summary", p.summary()}});
  }
  nlohmann::json machine_json = {{"devices", machine.devices},
                                 {"flops_per_s", machine.flops_per_s},
                                 {"link_bytes_per_s", machine.link_bytes_per_s},
                                 {"collective_latency_s", machine.collective_latency_s},
                                 {"memory_bytes_per_s", machine.memory_bytes_per_s}};
  if (!machine.mesh.empty()) {
    nlohmann::json axes = nlohmann::json::array();
    for (const MeshAxis& axis : machine.mesh) {
      axes.push_back({{"devices", axis.devices},
                      {"link_bytes_per_s", axis.link_bytes_per_s},
                      {"collective_latency_s", axis.collective_latency_s}});
    }
    machine_json["mesh"] = std::move(axes);
  }
  // Every list and object built above is moved in: an initializer list copies what it is given
  // as an lvalue, and copying the nodes' list was half of a 10,001-node solution's to_json.
  const nlohmann::json document = {{"format_version", kSolutionFormatVersion},
                                   {"solver", solver},
                                   {"machine", std::move(machine_json)},
                                   {"step",
                                    {{"kind", name_of(options.step)},
                                     {"optimizer", name_of(options.optimizer)},
                                     {"precision", name_of(options.precision)},
                                     {"memory_budget_bytes", options.memory_budget_bytes}}},
                                   {"fits_budget", fits_budget},
                                   {"totals",
                                    {{"compute_s", compute_s},
                                     {"communication_s", communication_s},
                                     {"resharding_s", resharding_s},
                                     {"backward_compute_s", backward_compute_s},
                                     {"backward_communication_s", backward_communication_s},
                                     {"gradient_sync_s", gradient_sync_s},
                                     {"optimizer_s", optimizer_s},
                                     {"total_s", total_s}}},
                                   {"memory",
                                    {{"peak_bytes", memory.peak_bytes},
                                     {"peak_node", memory.peak_node},
                                     {"peak_phase", memory.peak_phase},
                                     {"parameter_bytes", memory.parameter_bytes},
                                     {"gradient_bytes", memory.gradient_bytes},
                                     {"optimizer_bytes", memory.optimizer_bytes},
                                     {"input_bytes", memory.input_bytes}}},
                                   {"nodes", std::move(list)},
                                   {"parameters", std::move(outcomes)}};
  return document.dump();
}

Solution Solution::from_json(const std::string& text) {
  Solution s;
  try {
    const nlohmann::json document = parse_json_input(text, "solution JSON");
    // Version 1 had no "format_version": a forward plan on a 1-D mesh.
    const int version = document.is_object() && document.contains("format_version")
                            ? whole_int(document, "format_version")
                            : 1;
    require(version == 1 || version == kSolutionFormatVersion,
            "solution JSON has format_version " + std::to_string(version) +
                "; this fsdp reads versions 1 and " + std::to_string(kSolutionFormatVersion));
    s.solver = document.at("solver").get<std::string>();
    const auto& m = document.at("machine");
    s.machine.devices = whole_int(m, "devices");
    s.machine.flops_per_s = m.at("flops_per_s").get<double>();
    s.machine.link_bytes_per_s = m.at("link_bytes_per_s").get<double>();
    s.machine.collective_latency_s = m.at("collective_latency_s").get<double>();
    const auto& totals = document.at("totals");
    s.compute_s = totals.at("compute_s").get<double>();
    s.communication_s = totals.at("communication_s").get<double>();
    s.resharding_s = totals.at("resharding_s").get<double>();
    s.total_s = totals.at("total_s").get<double>();
    if (version >= 2) {
      s.machine.memory_bytes_per_s = m.at("memory_bytes_per_s").get<double>();
      if (m.contains("mesh")) {
        for (const auto& axis : m.at("mesh")) {
          s.machine.mesh.push_back(MeshAxis{whole_int(axis, "devices"),
                                            axis.at("link_bytes_per_s").get<double>(),
                                            axis.at("collective_latency_s").get<double>()});
        }
        require(s.machine.mesh.size() == 2, "solution JSON: a mesh has 2 axes");
      }
      const auto& step = document.at("step");
      s.options.step = parse_step_kind(step.at("kind").get<std::string>());
      s.options.optimizer = parse_optimizer(step.at("optimizer").get<std::string>());
      s.options.precision = parse_precision(step.at("precision").get<std::string>());
      s.options.memory_budget_bytes = whole(step, "memory_budget_bytes");
      s.fits_budget = document.at("fits_budget").get<bool>();
      s.backward_compute_s = totals.at("backward_compute_s").get<double>();
      s.backward_communication_s = totals.at("backward_communication_s").get<double>();
      s.gradient_sync_s = totals.at("gradient_sync_s").get<double>();
      s.optimizer_s = totals.at("optimizer_s").get<double>();
      const auto& memory = document.at("memory");
      s.memory.peak_bytes = whole(memory, "peak_bytes");
      s.memory.peak_node = memory.at("peak_node").get<std::string>();
      s.memory.peak_phase = memory.at("peak_phase").get<std::string>();
      s.memory.parameter_bytes = whole(memory, "parameter_bytes");
      s.memory.gradient_bytes = whole(memory, "gradient_bytes");
      s.memory.optimizer_bytes = whole(memory, "optimizer_bytes");
      s.memory.input_bytes = whole(memory, "input_bytes");
    }
    for (const auto& item : document.at("nodes")) {
      NodeSolution n;
      n.id = item.at("id").get<std::string>();
      n.op = item.at("op").get<std::string>();
      for (const auto& size : item.at("shape")) {
        n.shape.push_back(whole_value(size, "a shape's size"));
      }
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
        n.transfers.push_back(transfer_from(t));
      }
      if (version >= 2) {
        n.backward_compute_s = item.at("backward_compute_s").get<double>();
        n.backward_communication_s = item.at("backward_communication_s").get<double>();
        n.gradient_sync_s = item.at("gradient_sync_s").get<double>();
        n.optimizer_s = item.at("optimizer_s").get<double>();
        for (const auto& t : item.at("gradient_transfers")) {
          n.gradient_transfers.push_back(transfer_from(t));
        }
        const auto& memory = item.at("memory");
        n.memory.state_bytes = whole(memory, "state_bytes");
        n.memory.activation_bytes = whole(memory, "activation_bytes");
        n.memory.forward_bytes = whole(memory, "forward_bytes");
        n.memory.backward_bytes = whole(memory, "backward_bytes");
      }
      s.nodes.push_back(std::move(n));
    }
    s.index_nodes();
    if (version >= 2) {
      for (const auto& item : document.at("parameters")) {
        ParameterOutcome p;
        p.id = item.at("id").get<std::string>();
        (void)s.node(p.id);  // a parameter names a node
        p.layout = spec_from(item.at("spec"));
        const auto& uses = item.at("uses");
        require(uses.is_array() && uses.size() == ShardingSpec::kMaxAxes,
                "solution JSON: a parameter's \"uses\" lists one use per mesh axis (2)");
        for (std::size_t a = 0; a < uses.size(); ++a) {
          p.uses[a] = parse_use(uses[a].get<std::string>());
        }
        p.state_bytes = whole(item, "state_bytes");
        s.parameters.push_back(std::move(p));
      }
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
                  const std::string& solver_name, const StepOptions& options) {
  require(choice.size() == graph.size() && strategies.size() == graph.size(),
          "evaluate: one strategy choice per node is needed");
  return detail::evaluate(detail::StepModel(graph, strategies, machine, options), choice,
                          solver_name);
}

Solution detail::evaluate(const StepModel& model, const std::vector<int>& choice,
                          const std::string& solver_name) {
  const Graph& graph = model.graph();
  const Machine& machine = model.machine();
  const StepOptions& options = model.options();
  const detail::MemoryProfile profile = detail::memory_profile(model, choice);
  const auto at = [&](int v) { return choice[static_cast<std::size_t>(v)]; };
  Solution solution;
  solution.solver = solver_name;
  solution.machine = machine;
  solution.options = options;
  solution.nodes.reserve(graph.size());
  for (std::size_t i = 0; i < graph.size(); ++i) {
    const int v = static_cast<int>(i);
    const Node& node = graph.node(v);
    const detail::NodeFacts& facts = model.facts(v);
    const Strategy& s = model.strategy(v, at(v));
    NodeSolution n;
    n.id = node.id;
    n.op = node.op;
    n.shape = node.shape;
    n.strategy = describe(s, node);
    n.input_specs = s.inputs;
    n.output_spec = s.output;
    n.flops_per_device = s.flops_per_device;
    n.compute_s = model.forward_compute_s(v, at(v));
    n.backward_compute_s = model.backward_compute_s(v, at(v));
    n.optimizer_s = model.optimizer_s(v, at(v));
    for (std::size_t k = 0; k < node.inputs.size(); ++k) {
      const int ik = static_cast<int>(k);
      const int p = node.inputs[k];
      const Node& producer = graph.node(p);
      const ShardingSpec& from = model.strategy(p, at(p)).output;
      const Conversion forward = model.forward_conversion(v, ik, at(p), at(v));
      (completes_partial_sum(from) ? n.communication_s : n.resharding_s) += forward.seconds();
      n.transfers.push_back(input_transfer(producer.id, from, s.inputs[k], forward));
      if (facts.reads[k]) {
        n.backward_communication_s += forward.seconds();
      }
      if (facts.sends_gradient[k]) {
        const Conversion gradient = model.gradient_conversion(v, ik, at(p), at(v));
        n.gradient_transfers.push_back(input_transfer(
            producer.id, model.gradient_layout(v, ik, at(v)), from.without_partial(), gradient));
        (producer.kind == OpKind::parameter
             ? solution.nodes[static_cast<std::size_t>(p)].gradient_sync_s
             : n.backward_communication_s) += gradient.seconds();
      }
    }
    n.memory.state_bytes = model.state_bytes(v, at(v));
    n.memory.activation_bytes = model.activation_bytes(v, at(v));
    n.memory.forward_bytes = profile.forward_bytes[i];
    n.memory.backward_bytes = profile.backward_bytes[i];
    solution.nodes.push_back(std::move(n));
  }
  for (const NodeSolution& n : solution.nodes) {
    solution.compute_s += n.compute_s;
    solution.communication_s += n.communication_s;
    solution.resharding_s += n.resharding_s;
    solution.backward_compute_s += n.backward_compute_s;
    solution.backward_communication_s += n.backward_communication_s;
    solution.gradient_sync_s += n.gradient_sync_s;
    solution.optimizer_s += n.optimizer_s;
  }
  solution.total_s = solution.compute_s + solution.communication_s + solution.resharding_s +
                     solution.backward_compute_s + solution.backward_communication_s +
                     solution.gradient_sync_s + solution.optimizer_s;

  MemorySummary& memory = solution.memory;
  memory.peak_bytes = profile.peak_bytes;
  if (profile.peak_node >= 0) {
    memory.peak_node = graph.node(profile.peak_node).id;
    memory.peak_phase = profile.peak_in_backward ? "backward" : "forward";
  }
  const auto what = [] { return std::string("the persistent bytes of the plan"); };
  for (std::size_t i = 0; i < graph.size(); ++i) {
    const int v = static_cast<int>(i);
    const Node& node = graph.node(v);
    const ShardingSpec& layout = model.strategy(v, at(v)).output;
    if (node.kind == OpKind::input) {
      detail::add_to(memory.input_bytes, model.state_bytes(v, at(v)), what);
    }
    if (node.kind != OpKind::parameter) {
      continue;
    }
    const std::int64_t elements = model.layout_elements(v, layout);
    const ElementBytes per_element =
        element_bytes(node.dtype, EstimateOptions{options.optimizer, options.precision});
    const bool trained = model.facts(v).trained;
    detail::add_to(memory.parameter_bytes,
                   detail::checked_mul(elements, per_element.parameter, what), what);
    detail::add_to(memory.gradient_bytes,
                   trained ? detail::checked_mul(elements, per_element.gradient, what) : 0, what);
    detail::add_to(memory.optimizer_bytes,
                   trained ? detail::checked_mul(elements, per_element.optimizer, what) : 0, what);
    ParameterOutcome outcome;
    outcome.id = node.id;
    outcome.layout = layout;
    outcome.state_bytes = model.state_bytes(v, at(v));
    for (int a = 0; a < machine.axis_count(); ++a) {
      if (!layout.axis_sharded(a)) {
        continue;
      }
      // Tensor-parallel when some consumer uses it cut along this axis as stored; FSDP when every
      // consumer gathers it.
      ParameterUse use = ParameterUse::fsdp;
      for (int c : graph.consumers(v)) {
        const Node& consumer = graph.node(c);
        for (std::size_t k = 0; k < consumer.inputs.size(); ++k) {
          if (consumer.inputs[k] == v &&
              model.strategy(c, at(c)).inputs[k].axis(a) == layout.axis(a)) {
            use = ParameterUse::tensor_parallel;
          }
        }
      }
      outcome.uses[static_cast<std::size_t>(a)] = use;
    }
    solution.parameters.push_back(outcome);
  }
  solution.fits_budget =
      options.memory_budget_bytes <= 0 || memory.peak_bytes <= options.memory_budget_bytes;
  solution.index_nodes();
  return solution;
}

double total_cost(const Graph& graph, const std::vector<std::vector<Strategy>>& strategies,
                  const std::vector<int>& choice, const Machine& machine) {
  const detail::StepModel model(graph, strategies, machine, StepOptions());
  return detail::step_seconds(model, choice);
}

PlanCost measure(const Graph& graph, const std::vector<std::vector<Strategy>>& strategies,
                 const std::vector<int>& choice, const Machine& machine,
                 const StepOptions& options) {
  const detail::StepModel model(graph, strategies, machine, options);
  return PlanCost{detail::step_seconds(model, choice),
                  detail::memory_profile(model, choice).peak_bytes};
}

}  // namespace fsdp::solver

namespace fsdp::solver {

PlanMeter::PlanMeter(const Graph& graph, const Machine& machine, const StepOptions& options)
    : strategies_(all_strategies(graph, machine)),
      model_(std::make_unique<detail::StepModel>(graph, strategies_, machine, options)) {}

PlanMeter::~PlanMeter() = default;

PlanCost PlanMeter::measure(const std::vector<int>& choice) const {
  require(choice.size() == strategies_.size(), "PlanMeter: one strategy choice per node is needed");
  return PlanCost{detail::step_seconds(*model_, choice),
                  detail::memory_profile(*model_, choice).peak_bytes};
}

}  // namespace fsdp::solver
