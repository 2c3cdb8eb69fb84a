#include "fsdp/comm/transport.hpp"

#include <mpi.h>

#include <cstdlib>
#include <string>

#include "fsdp/core/error.hpp"

// Open MPI and MPICH declare MPIX_Query_cuda_support in mpi-ext.h when their CUDA extension is
// built (whether or not the library itself was built with CUDA: then it answers 0).
#if __has_include(<mpi-ext.h>)
#include <mpi-ext.h>
#endif

namespace fsdp {

const char* name_of(Transport transport) {
  switch (transport) {
    case Transport::mpi_host:
      return "MPI (host memory)";
    case Transport::mpi_device:
      return "CUDA-aware MPI (device memory)";
    case Transport::mpi_staged:
      return "MPI through pinned host staging buffers";
    case Transport::nccl:
      return "NCCL (device memory)";
  }
  return "unknown";
}

bool mpi_is_cuda_aware() {
  if (const char* forced = std::getenv("FSDP_MPI_CUDA_AWARE")) {
    const std::string value = forced;
    require(value == "0" || value == "1",
            "FSDP_MPI_CUDA_AWARE is '" + value +
                "'; it must be 1 (MPI moves device memory) or 0 (stage through host buffers)");
    return value == "1";
  }
#if defined(MPIX_CUDA_AWARE_SUPPORT)
  return MPIX_Query_cuda_support() == 1;
#else
  return false;
#endif
}

Transport choose_transport(MemoryKind backend, bool host_accessible, bool cuda_aware_mpi) {
  if (backend == MemoryKind::cuda_device) {
    require(!host_accessible,
            "this model's buffers are in host memory but its process group uses NCCL, "
            "which moves device memory only; make the group with ProcessGroup(comm) (MPI), or "
            "build fsdp against a Kokkos with its CUDA backend so that buffers live on the GPU");
    return Transport::nccl;
  }
  if (host_accessible) {
    return Transport::mpi_host;
  }
  return cuda_aware_mpi ? Transport::mpi_device : Transport::mpi_staged;
}

}  // namespace fsdp
