// Device selection: which GPU each rank of a multi-GPU node uses, decided before Kokkos and NCCL
// initialize. Call these after MPI_Init and before Kokkos::initialize (docs/gpu.md has an example).
#pragma once

#include <mpi.h>

#include <Kokkos_Core.hpp>

namespace fsdp {

// Where a node-local rank came from.
enum class LocalRankSource { mpi, slurm };

// This rank's place among the ranks of comm that share its node.
struct NodeLocalRank {
  int rank = 0;  // 0 .. size-1
  int size = 1;  // ranks of comm on this node
  LocalRankSource source = LocalRankSource::mpi;
};

// The rank among the ranks of comm on this node (MPI_Comm_split_type with MPI_COMM_TYPE_SHARED),
// ordered as in comm. Collective over comm.
int local_rank(MPI_Comm comm);

// As local_rank, but SLURM_LOCALID wins when every rank of comm on this node has it set and the
// values are 0 .. size-1 in some order: then the rank matches Slurm's own task numbering, which
// --gpu-bind and the per-task GPU lists follow. Otherwise (mpirun, or SLURM_LOCALID inherited from
// an enclosing step) MPI's numbering is used. Every rank of a node decides the same way.
// Collective over comm.
NodeLocalRank node_local_rank(MPI_Comm comm);

struct DeviceSelectionOptions {
  // More ranks on a node than devices: by default an error, because ranks sharing a GPU each
  // allocate a full working set on it and NCCL refuses two ranks of one communicator on one GPU.
  // With sharing allowed, rank r of a node gets device r % device_count.
  bool allow_sharing = false;
};

// The device this rank should use: node_local_rank(comm).rank % device_count. device_count is the
// number of devices this process sees (visible_device_count()). Throws fsdp::Error on every rank
// of comm when some rank sees no device, or, unless options.allow_sharing, when some node runs
// more ranks than it has devices. Collective over comm.
int select_device(MPI_Comm comm, int device_count, const DeviceSelectionOptions& options = {});

// The GPU devices this process sees (cudaGetDeviceCount; CUDA_VISIBLE_DEVICES applies), or 0 when
// Kokkos has no GPU backend. Needs no Kokkos initialization.
int visible_device_count();

// What Kokkos::initialize takes: InitializationSettings since Kokkos 3.7, InitArguments before.
#if KOKKOS_VERSION >= 30700
using KokkosInitSettings = Kokkos::InitializationSettings;
#else
using KokkosInitSettings = Kokkos::InitArguments;
#endif

// settings with the device id set to device_id (>= 0).
KokkosInitSettings with_device_id(KokkosInitSettings settings, int device_id);

// Kokkos settings for this rank: with a GPU backend, settings with the device
// select_device(comm, visible_device_count(), options) picks (collective over comm); without one,
// settings unchanged. Call it on every rank of comm either way.
KokkosInitSettings kokkos_settings_for_local_device(MPI_Comm comm,
                                                    const DeviceSelectionOptions& options = {},
                                                    KokkosInitSettings settings = {});

}  // namespace fsdp
