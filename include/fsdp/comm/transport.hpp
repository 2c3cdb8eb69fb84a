// Transport: what actually carries the bytes of fsdp's buffers for a process group. Chosen once,
// where the group is made, from the backend, the memory space of fsdp's buffers and what the MPI
// library says about itself at run time; reported by fsdp-train and fsdp-bench.
#pragma once

#include "fsdp/comm/backend.hpp"

namespace fsdp {

enum class Transport {
  mpi_host,    // MPI on host memory (a host build of Kokkos)
  mpi_device,  // CUDA-aware MPI: device pointers go to MPI as they are
  mpi_staged,  // MPI on pinned host copies of device buffers (MPI without CUDA support)
  nccl,        // NCCL on device memory, enqueued on the group's CUDA stream
};

const char* name_of(Transport transport);

// Whether the MPI library moves device memory itself: MPIX_Query_cuda_support() where the MPI
// library has that extension (Open MPI, MPICH 4), false otherwise. FSDP_MPI_CUDA_AWARE=0 or 1
// overrides it (for an MPI library that is CUDA-aware without saying so, or to force staging).
bool mpi_is_cuda_aware();

// The transport for buffers in a memory space (host_accessible: host code may read it) over a
// backend of the given kind. Throws fsdp::Error when they cannot meet: NCCL moves device memory
// only, so host buffers on an NCCL group are an error that says what to do.
Transport choose_transport(MemoryKind backend, bool host_accessible, bool cuda_aware_mpi);

}  // namespace fsdp
