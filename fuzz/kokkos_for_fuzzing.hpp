// verify_checkpoint reads tensors into Kokkos host Views: the checkpoint targets initialize
// Kokkos once per process (no arguments: libFuzzer's own are not Kokkos') and finalize it at exit.
#pragma once

#include <Kokkos_Core.hpp>
#include <cstdlib>

namespace fsdp_fuzz {

inline void initialize_kokkos() {
  if (!Kokkos::is_initialized()) {
    Kokkos::initialize();
    std::atexit([] { Kokkos::finalize(); });
  }
}

}  // namespace fsdp_fuzz
