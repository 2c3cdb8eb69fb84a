#include "fsdp/comm/version.hpp"

#include <mpi.h>

#include <Kokkos_Core.hpp>
#include <algorithm>
#include <string>

#include "fsdp/comm/backend.hpp"
#include "fsdp/comm/transport.hpp"
#include "fsdp/config.hpp"
#include "fsdp/core/memory_space.hpp"
#include "mpi_types.hpp"

namespace fsdp {

const char* version() {
  return FSDP_VERSION_STRING;
}

std::string build_description() {
  std::string text = std::string("fsdp: ") + FSDP_VERSION_STRING + "\n";
  text += "Kokkos: " + std::to_string(KOKKOS_VERSION / 10000) + "." +
          std::to_string(KOKKOS_VERSION / 100 % 100) + "." + std::to_string(KOKKOS_VERSION % 100) +
          " (devices " FSDP_KOKKOS_DEVICES "; fsdp's buffers in " + MemorySpace::name() +
          ", kernels on " + ExecutionSpace::name() + ")\n";
#ifdef FSDP_HAVE_NCCL
  text += "NCCL: built in\n";
#else
  text += "NCCL: not built in\n";
#endif
  char library[MPI_MAX_LIBRARY_VERSION_STRING] = {};
  int length = 0;
  mpi::check(MPI_Get_library_version(library, &length), "MPI_Get_library_version");
  // Up to its first line end (Open MPI's length counts the terminating NUL too).
  std::string mpi(library, static_cast<std::size_t>(std::max(length, 0)));
  mpi = mpi.substr(0, mpi.find_first_of(std::string("\r\n\0", 3)));
  text += "MPI: " + mpi + "\n";
  // What ProcessGroup(comm) picks for fsdp's buffers (ProcessGroup::transport), as that does.
  text += std::string("transport (MPI group): ") +
          name_of(choose_transport(MemoryKind::host, kHostAccessible, mpi_is_cuda_aware())) + "\n";
  return text;
}

}  // namespace fsdp
