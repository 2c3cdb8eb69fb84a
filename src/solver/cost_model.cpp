#include "fsdp/solver/cost_model.hpp"

#include <cmath>
#include <limits>

#include "fsdp/core/error.hpp"

namespace fsdp::solver {
namespace {

bool positive(double value) {
  return std::isfinite(value) && value > 0;
}

// The conversion of one axis's use, with buffer_bytes the tensor as the other axes cut it then.
Transfer axis_step(const ShardingSpec::AxisUse& from, const ShardingSpec::AxisUse& to,
                   double buffer_bytes, const Machine& machine, int axis) {
  using Kind = ShardingSpec::Kind;
  if (from == to || from.kind == Kind::replicated) {
    Transfer none;
    none.axis = axis;
    return none;
  }
  if (from.kind == Kind::partial) {
    return collective_cost(to.kind == Kind::replicated ? LayoutCollective::all_reduce
                                                       : LayoutCollective::reduce_scatter,
                           buffer_bytes, machine, axis);
  }
  // from is sharded
  if (to.kind == Kind::replicated) {
    return collective_cost(LayoutCollective::all_gather, buffer_bytes, machine, axis);
  }
  if (to.kind == Kind::sharded) {
    return collective_cost(LayoutCollective::all_to_all, buffer_bytes / machine.axis(axis).devices,
                           machine, axis);
  }
  Transfer none;  // sharded -> partial: keep the block, zeros elsewhere
  none.axis = axis;
  return none;
}

}  // namespace

MeshAxis Machine::axis(int a) const {
  if (a < 0 || a >= axis_count()) {
    throw Error("solver machine: the mesh has no axis " + std::to_string(a) + " (it has " +
                std::to_string(axis_count()) + ")");
  }
  if (mesh.empty()) {
    return MeshAxis{devices, link_bytes_per_s, collective_latency_s};
  }
  return mesh[static_cast<std::size_t>(a)];
}

void Machine::set_mesh(const std::vector<MeshAxis>& axes) {
  require(axes.size() == 1 || axes.size() == 2,
          "solver machine: a mesh has 1 or 2 axes; got " + std::to_string(axes.size()));
  mesh.clear();
  devices = axes[0].devices;
  link_bytes_per_s = axes[0].link_bytes_per_s;
  collective_latency_s = axes[0].collective_latency_s;
  if (axes.size() == 2) {
    mesh = axes;
    std::int64_t product = std::int64_t{axes[0].devices} * axes[1].devices;
    require(product <= std::numeric_limits<int>::max(),
            "solver machine: the mesh has more than 2^31 devices");
    devices = static_cast<int>(product);
  }
}

std::string Machine::mesh_text() const {
  if (mesh.empty()) {
    return std::to_string(devices) + (devices == 1 ? " device" : " devices");
  }
  return std::to_string(mesh[0].devices) + "x" + std::to_string(mesh[1].devices) + " mesh (" +
         std::to_string(devices) + " devices)";
}

void Machine::validate() const {
  require(devices >= 1,
          "solver machine: devices is " + std::to_string(devices) + "; it must be at least 1");
  require(positive(flops_per_s),
          "solver machine: flops_per_s must be a positive number of FLOP/s per device");
  require(positive(link_bytes_per_s),
          "solver machine: link_bytes_per_s must be a positive number of bytes/s");
  require(std::isfinite(collective_latency_s) && collective_latency_s >= 0,
          "solver machine: collective_latency_s must be >= 0 seconds");
  require(positive(memory_bytes_per_s),
          "solver machine: memory_bytes_per_s must be a positive number of bytes/s");
  if (mesh.empty()) {
    return;
  }
  require(mesh.size() == 2, "solver machine: a 2-D mesh has 2 axes; got " +
                                std::to_string(mesh.size()) + " (leave it empty for 1-D)");
  std::int64_t product = 1;
  for (std::size_t a = 0; a < mesh.size(); ++a) {
    const MeshAxis& axis = mesh[a];
    const std::string name = "solver machine: mesh axis " + std::to_string(a);
    require(axis.devices >= 1,
            name + " has " + std::to_string(axis.devices) + " devices; it must have at least 1");
    require(positive(axis.link_bytes_per_s),
            name + ": link_bytes_per_s must be a positive number of bytes/s");
    require(std::isfinite(axis.collective_latency_s) && axis.collective_latency_s >= 0,
            name + ": collective_latency_s must be >= 0 seconds");
    product *= axis.devices;
  }
  require(product == devices, "solver machine: devices is " + std::to_string(devices) +
                                  " but the mesh's axes make " + std::to_string(product) +
                                  " (set the mesh with set_mesh)");
}

const char* name_of(LayoutCollective collective) {
  switch (collective) {
    case LayoutCollective::none:
      return "none";
    case LayoutCollective::all_reduce:
      return "all-reduce";
    case LayoutCollective::all_gather:
      return "all-gather";
    case LayoutCollective::reduce_scatter:
      return "reduce-scatter";
    case LayoutCollective::all_to_all:
      return "all-to-all";
  }
  return "?";
}

Transfer collective_cost(LayoutCollective collective, double buffer_bytes, const Machine& machine,
                         int axis) {
  const MeshAxis along = machine.axis(axis);
  Transfer transfer;
  transfer.collective = collective;
  transfer.buffer_bytes = buffer_bytes;
  transfer.axis = axis;
  const double n = along.devices;
  if (collective == LayoutCollective::none || along.devices <= 1) {
    transfer.collective = LayoutCollective::none;
    return transfer;
  }
  const double ring = (n - 1) / n;
  transfer.traffic_bytes =
      (collective == LayoutCollective::all_reduce ? 2 * ring : ring) * buffer_bytes;
  transfer.seconds = transfer.traffic_bytes / along.link_bytes_per_s + along.collective_latency_s;
  return transfer;
}

Conversion convert(const ShardingSpec& from, const ShardingSpec& to, double tensor_bytes,
                   const Machine& machine) {
  Conversion best;
  if (from == to) {
    return best;
  }
  if (machine.axis_count() == 1) {
    best.steps[0] = axis_step(from.axis(0), to.axis(0), tensor_bytes, machine, 0);
    return best;
  }
  double lowest = std::numeric_limits<double>::infinity();
  const auto keep = [&](const Conversion& c) {
    if (c.seconds() < lowest) {
      lowest = c.seconds();
      best = c;
    }
  };
  for (const int first : {0, 1}) {
    Conversion c;
    ShardingSpec now = from;
    int k = 0;
    for (const int a : {first, 1 - first}) {
      const int other = 1 - a;
      const double buffer =
          now.axis_sharded(other) ? tensor_bytes / machine.axis(other).devices : tensor_bytes;
      const Transfer step = axis_step(now.axis(a), to.axis(a), buffer, machine, a);
      now.axes[static_cast<std::size_t>(a)] = to.axis(a);
      if (step.collective != LayoutCollective::none) {
        c.steps[static_cast<std::size_t>(k++)] = step;
      }
    }
    keep(c);
  }
  if (from.axis_partial(0) && from.axis_partial(1) && to.is_replicated()) {
    for (const int a : {0, 1}) {
      const int b = 1 - a;
      Conversion c;
      c.steps[0] = collective_cost(LayoutCollective::reduce_scatter, tensor_bytes, machine, a);
      c.steps[1] = collective_cost(LayoutCollective::all_reduce,
                                   tensor_bytes / machine.axis(a).devices, machine, b);
      c.steps[2] = collective_cost(LayoutCollective::all_gather, tensor_bytes, machine, a);
      keep(c);
    }
  }
  return best;
}

Transfer reshard_cost(const ShardingSpec& from, const ShardingSpec& to, double tensor_bytes,
                      const Machine& machine) {
  const Conversion c = convert(from, to, tensor_bytes, machine);
  Transfer t = c.steps[0];
  for (std::size_t i = 1; i < c.steps.size(); ++i) {
    t.buffer_bytes += c.steps[i].buffer_bytes;
    t.traffic_bytes += c.steps[i].traffic_bytes;
    t.seconds += c.steps[i].seconds;
  }
  return t;
}

}  // namespace fsdp::solver
