// MPI_Init_thread for the tools, checked, and quicker when a tool runs without a launcher.
#pragma once

#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>

namespace fsdp_apps {

// Run without mpiexec or srun (a singleton), Open MPI starts an orted daemon for the process;
// ess_singleton_isolated leaves it out, at the cost of MPI_Comm_spawn, which fsdp never calls:
// `fsdp-solve --version` took 0.58-0.69 s here and takes 0.34-0.37 s without it. A value the user
// set wins; other MPIs ignore the variable.
inline void isolate_singleton() {
  const bool launched = std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr ||
                        std::getenv("PMIX_RANK") != nullptr || std::getenv("PMI_RANK") != nullptr;
  if (!launched) {
    setenv("OMPI_MCA_ess_singleton_isolated", "1", 0);
  }
}

// On a machine without an InfiniBand or Omni-Path device, Open MPI's ofi and psm2 components
// cannot move a byte, yet opening them loads libpsm2, whose initialisation sleeps about 0.1 s in
// every process: `fsdp-solve --version` took 0.22 s here and takes 0.02 s without them (0.31 and
// 0.12 s on 2 ranks under mpiexec). pml ob1 (which never opens the mtl components) and no ofi btl
// leave them out; ob1 over shared memory and TCP is what Open MPI picks there anyway. A value the
// user set wins. scripts/mpi-env.sh applies the same rule to everything a shell starts.
inline void leave_out_fabric_components() {
  const bool has_fabric = std::filesystem::exists("/dev/infiniband") ||
                          std::filesystem::exists("/dev/hfi1_0") ||
                          std::filesystem::exists("/dev/ipath0");
  if (!has_fabric) {
    setenv("OMPI_MCA_pml", "ob1", 0);
    setenv("OMPI_MCA_btl", "^ofi", 0);
  }
}

// MPI_Init_thread (funneled); false, after saying so on stderr, when it fails.
inline bool start_mpi(int* argc, char*** argv, const char* program) {
  isolate_singleton();
  leave_out_fabric_components();
  int provided = 0;
  if (MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS) {
    std::fprintf(stderr, "%s: MPI_Init_thread failed\n", program);
    return false;
  }
  return true;
}

}  // namespace fsdp_apps
