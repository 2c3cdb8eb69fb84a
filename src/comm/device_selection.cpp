#include "fsdp/comm/device_selection.hpp"

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <string>
#include <vector>

#include "fsdp/core/error.hpp"
#include "mpi_types.hpp"

#ifdef KOKKOS_ENABLE_CUDA
#include <cuda_runtime.h>
#endif

namespace fsdp {
namespace {

// The ranks of comm on this node, ordered as in comm; freed when it goes out of scope.
class NodeComm {
 public:
  explicit NodeComm(MPI_Comm comm) {
    int rank = 0;
    mpi::check(MPI_Comm_rank(comm, &rank), "MPI_Comm_rank in device selection");
    mpi::check(MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &comm_),
               "MPI_Comm_split_type(MPI_COMM_TYPE_SHARED) in device selection", rank);
  }
  ~NodeComm() {
    if (comm_ != MPI_COMM_NULL) {
      MPI_Comm_free(&comm_);
    }
  }
  NodeComm(const NodeComm&) = delete;
  NodeComm& operator=(const NodeComm&) = delete;

  MPI_Comm get() const { return comm_; }
  int rank() const {
    int rank = 0;
    mpi::check(MPI_Comm_rank(comm_, &rank), "MPI_Comm_rank on the node communicator");
    return rank;
  }
  int size() const {
    int size = 0;
    mpi::check(MPI_Comm_size(comm_, &size), "MPI_Comm_size on the node communicator");
    return size;
  }

 private:
  MPI_Comm comm_ = MPI_COMM_NULL;
};

// SLURM_LOCALID as a number >= 0, or -1 when it is unset or not a number.
int slurm_local_id() {
  const char* value = std::getenv("SLURM_LOCALID");
  if (value == nullptr || *value == '\0') {
    return -1;
  }
  char* end = nullptr;
  errno = 0;
  const long id = std::strtol(value, &end, 10);
  if (*end != '\0' || errno != 0 || id < 0 || id > INT_MAX) {
    return -1;
  }
  return static_cast<int>(id);
}

}  // namespace

int local_rank(MPI_Comm comm) {
  return NodeComm(comm).rank();
}

NodeLocalRank node_local_rank(MPI_Comm comm) {
  const NodeComm node(comm);
  NodeLocalRank result;
  result.rank = node.rank();
  result.size = node.size();

  // Every rank of the node sees every SLURM_LOCALID, so all of them make the same choice.
  const int own_id = slurm_local_id();
  std::vector<int> ids(static_cast<std::size_t>(result.size));
  mpi::check(MPI_Allgather(&own_id, 1, MPI_INT, ids.data(), 1, MPI_INT, node.get()),
             "MPI_Allgather of SLURM_LOCALID on the node communicator", result.rank);
  std::sort(ids.begin(), ids.end());
  bool permutation = true;
  for (int i = 0; i < result.size; ++i) {
    permutation = permutation && ids[static_cast<std::size_t>(i)] == i;
  }
  if (permutation) {
    result.rank = own_id;
    result.source = LocalRankSource::slurm;
  }
  return result;
}

int select_device(MPI_Comm comm, int device_count, const DeviceSelectionOptions& options) {
  const NodeLocalRank local = node_local_rank(comm);
  int rank = 0;
  mpi::check(MPI_Comm_rank(comm, &rank), "MPI_Comm_rank in select_device");

  // Reduced over all of comm so that every rank throws, not only those on the offending node:
  // {most ranks beyond the devices on any node, fewest devices any rank sees (negated)}.
  const int excess = options.allow_sharing ? 0 : std::max(0, local.size - device_count);
  int local_worst[2] = {excess, -device_count};
  int worst[2] = {0, 0};
  mpi::check(MPI_Allreduce(local_worst, worst, 2, MPI_INT, MPI_MAX, comm),
             "MPI_Allreduce of device counts in select_device", rank);
  if (-worst[1] <= 0) {
    throw Error("select_device: a rank sees no GPU device (this rank: device_count " +
                std::to_string(device_count) +
                "); run on nodes with GPUs, check CUDA_VISIBLE_DEVICES and the job's --gpus, "
                "or use a host-only build");
  }
  if (worst[0] > 0) {
    throw Error("select_device: a node runs up to " + std::to_string(worst[0]) +
                " more ranks than it has GPU devices (this rank's node: " +
                std::to_string(local.size) + " ranks, " + std::to_string(device_count) +
                " devices); start one rank per GPU (srun --ntasks-per-node=<GPUs per node>) or "
                "set DeviceSelectionOptions::allow_sharing");
  }
  return local.rank % device_count;
}

int visible_device_count() {
#ifdef KOKKOS_ENABLE_CUDA
  int count = 0;
  const cudaError_t rc = cudaGetDeviceCount(&count);
  if (rc == cudaErrorNoDevice) {
    return 0;
  }
  if (rc != cudaSuccess) {
    throw Error(std::string("cudaGetDeviceCount failed: ") + cudaGetErrorString(rc));
  }
  return count;
#else
  return 0;
#endif
}

KokkosInitSettings with_device_id(KokkosInitSettings settings, int device_id) {
  require(device_id >= 0, "with_device_id: device id " + std::to_string(device_id) +
                              " is negative; use a device from select_device");
#if KOKKOS_VERSION >= 30700
  settings.set_device_id(device_id);
#else
  settings.device_id = device_id;
#endif
  return settings;
}

KokkosInitSettings kokkos_settings_for_local_device(MPI_Comm comm,
                                                    const DeviceSelectionOptions& options,
                                                    KokkosInitSettings settings) {
#ifdef KOKKOS_ENABLE_CUDA
  return with_device_id(settings, select_device(comm, visible_device_count(), options));
#else
  // No GPU backend: nothing to choose, and no collective, so that host builds need no MPI here.
  (void)comm;
  (void)options;
  return settings;
#endif
}

}  // namespace fsdp
