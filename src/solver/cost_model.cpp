#include "fsdp/solver/cost_model.hpp"

#include <cmath>

#include "fsdp/core/error.hpp"

namespace fsdp::solver {

void Machine::validate() const {
  require(devices >= 1,
          "solver machine: devices is " + std::to_string(devices) + "; it must be at least 1");
  require(std::isfinite(flops_per_s) && flops_per_s > 0,
          "solver machine: flops_per_s must be a positive number of FLOP/s per device");
  require(std::isfinite(link_bytes_per_s) && link_bytes_per_s > 0,
          "solver machine: link_bytes_per_s must be a positive number of bytes/s");
  require(std::isfinite(collective_latency_s) && collective_latency_s >= 0,
          "solver machine: collective_latency_s must be >= 0 seconds");
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

Transfer collective_cost(LayoutCollective collective, double buffer_bytes, const Machine& machine) {
  Transfer transfer;
  transfer.collective = collective;
  transfer.buffer_bytes = buffer_bytes;
  const double n = machine.devices;
  if (collective == LayoutCollective::none || machine.devices <= 1) {
    transfer.collective = LayoutCollective::none;
    return transfer;
  }
  const double ring = (n - 1) / n;
  transfer.traffic_bytes =
      (collective == LayoutCollective::all_reduce ? 2 * ring : ring) * buffer_bytes;
  transfer.seconds =
      transfer.traffic_bytes / machine.link_bytes_per_s + machine.collective_latency_s;
  return transfer;
}

Transfer reshard_cost(const ShardingSpec& from, const ShardingSpec& to, double tensor_bytes,
                      const Machine& machine) {
  if (from == to || from.is_replicated()) {
    return Transfer{};
  }
  if (from.is_partial()) {
    return collective_cost(
        to.is_replicated() ? LayoutCollective::all_reduce : LayoutCollective::reduce_scatter,
        tensor_bytes, machine);
  }
  // from is sharded
  if (to.is_replicated()) {
    return collective_cost(LayoutCollective::all_gather, tensor_bytes, machine);
  }
  if (to.is_sharded()) {
    return collective_cost(LayoutCollective::all_to_all, tensor_bytes / machine.devices, machine);
  }
  return Transfer{};  // sharded -> partial: keep the block, zeros elsewhere
}

}  // namespace fsdp::solver
