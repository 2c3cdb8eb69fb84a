// The solver's cost model: a machine (a 1-D or 2-D mesh of devices), what a collective costs on
// one of its axes, and what converting a tensor from one layout to another costs.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "fsdp/solver/sharding_spec.hpp"

namespace fsdp::solver {

// One axis of a device mesh: its devices and the link its collectives run over.
struct MeshAxis {
  int devices = 8;
  double link_bytes_per_s = 450e9;
  double collective_latency_s = 5e-6;
};

// Defaults: one H100 SXM node. 989e12 FLOP/s is the dense BF16 tensor-core peak; 450e9 B/s is
// NVLink 4 in one direction (900 GB/s bidirectional per GPU), which is what a ring step uses;
// 5 us is a typical launch + synchronization latency of one NCCL collective inside a node;
// 3.35e12 B/s is the HBM3 bandwidth the optimizer's element-wise step is bound by.
struct Machine {
  // The 1-D mesh (and axis 0 of a 2-D one): its devices, link and latency. On a 2-D mesh
  // `devices` is the product of the axes' devices (set_mesh sets it).
  int devices = 8;
  double flops_per_s = 989e12;
  double link_bytes_per_s = 450e9;
  double collective_latency_s = 5e-6;
  double memory_bytes_per_s = 3.35e12;
  // A 2-D mesh: its two axes in order, device (i, j) being rank i * mesh[1].devices + j. Empty:
  // the 1-D mesh above.
  std::vector<MeshAxis> mesh;

  int axis_count() const { return mesh.empty() ? 1 : static_cast<int>(mesh.size()); }
  // Axis a; on a 1-D mesh axis 0 is {devices, link_bytes_per_s, collective_latency_s}.
  MeshAxis axis(int a) const;
  // One axis: the 1-D mesh of it. Two: a 2-D mesh, devices their product, and the 1-D fields
  // axis 0's. Checked by validate().
  void set_mesh(const std::vector<MeshAxis>& axes);
  // "8 devices" or "2x4 mesh (8 devices)".
  std::string mesh_text() const;

  // Throws fsdp::Error unless devices >= 1, the mesh has 0 or 2 axes of >= 1 device each whose
  // product is `devices`, the rates are positive and the latencies >= 0.
  void validate() const;
};

// The collective the cost model charges for changing a tensor's layout (none: the change is local).
// It names a costed step of a plan, never an operation that runs: the collectives a ProcessGroup
// issues are fsdp::Collective (src/comm), a different enum.
enum class LayoutCollective : std::uint8_t {
  none,
  all_reduce,
  all_gather,
  reduce_scatter,
  all_to_all
};
const char* name_of(LayoutCollective collective);

// One collective's cost along one mesh axis of N devices. buffer_bytes is the buffer the
// collective is named after (the full tensor along that axis for all-reduce, all-gather and
// reduce-scatter; one device's shard for all-to-all); traffic_bytes is what each device sends by
// the ring formulas:
//   all-reduce     2 (N-1)/N x buffer     all-gather   (N-1)/N x buffer (the gathered tensor)
//   reduce-scatter   (N-1)/N x buffer     all-to-all   (N-1)/N x buffer (the local shard)
// seconds = traffic_bytes / the axis's link_bytes_per_s + its collective_latency_s (0 for none).
struct Transfer {
  LayoutCollective collective = LayoutCollective::none;
  double buffer_bytes = 0;
  double traffic_bytes = 0;
  double seconds = 0;
  int axis = 0;
};

Transfer collective_cost(LayoutCollective collective, double buffer_bytes, const Machine& machine,
                         int axis = 0);

// Converting a tensor between two layouts: at most one collective along each mesh axis, in the
// cheaper of the two orders (a collective along one axis moves the tensor as the other axis then
// cuts it); from partial sums along both axes to a whole tensor also the hierarchical all-reduce
// (reduce-scatter along one axis, all-reduce of the pieces along the other, all-gather back), when
// cheaper. Steps run in order; unused ones are none (steps[1] and steps[2] on a 1-D mesh).
struct Conversion {
  std::array<Transfer, 3> steps{};
  double seconds() const { return steps[0].seconds + steps[1].seconds + steps[2].seconds; }
  bool moves() const { return steps[0].collective != LayoutCollective::none; }
};

// Along one axis: partial -> replicated is an all-reduce, partial -> sharded a reduce-scatter,
// sharded -> replicated an all-gather, sharded -> sharded on another dimension an all-to-all.
// Replicated -> anything and sharded -> partial are local (slice, or keep the shard and zero the
// rest), so cost nothing. tensor_bytes is the unsharded size.
Conversion convert(const ShardingSpec& from, const ShardingSpec& to, double tensor_bytes,
                   const Machine& machine);

// The 1-D form: the conversion's one collective (on a 2-D mesh its first, with the seconds,
// buffer and traffic of all its steps).
Transfer reshard_cost(const ShardingSpec& from, const ShardingSpec& to, double tensor_bytes,
                      const Machine& machine);

// True for transfers that complete a pending partial sum (all-reduce, reduce-scatter): the
// solution reports them as communication; the others (all-gather, all-to-all) as resharding.
inline bool completes_partial_sum(const ShardingSpec& from) {
  return from.is_partial();
}

}  // namespace fsdp::solver
