// fsdp's phases as named Kokkos Tools regions (Kokkos::Profiling::pushRegion/popRegion), so that
// any Kokkos Tools profiler (the Kokkos Tools timers, space-time-stack, the NVTX and rocTX
// connectors) shows them without a rebuild: load one with KOKKOS_TOOLS_LIBS (Kokkos 3.x also
// reads KOKKOS_PROFILE_LIBRARY) or --kokkos-tools-library. Names are "fsdp::<phase>" or
// "fsdp::<phase> <unit>". Without a tool loaded a region costs one check and builds no name.
#pragma once

#include <Kokkos_Core.hpp>
#include <string>

namespace fsdp {

// Pushes region "<phase>" or "<phase> <unit>" when a Kokkos Tools library is loaded; returns
// whether it did (pass that to pop_profiling_region).
inline bool push_profiling_region(const char* phase, const std::string& unit = std::string()) {
  if (!Kokkos::Profiling::profileLibraryLoaded()) {
    return false;
  }
  Kokkos::Profiling::pushRegion(unit.empty() ? std::string(phase) : phase + (" " + unit));
  return true;
}

inline void pop_profiling_region(bool pushed) {
  if (pushed) {
    Kokkos::Profiling::popRegion();
  }
}

// The region for the life of the object.
class ProfilingRegion {
 public:
  explicit ProfilingRegion(const char* phase, const std::string& unit = std::string())
      : pushed_(push_profiling_region(phase, unit)) {}
  ~ProfilingRegion() { pop_profiling_region(pushed_); }
  ProfilingRegion(const ProfilingRegion&) = delete;
  ProfilingRegion& operator=(const ProfilingRegion&) = delete;

 private:
  bool pushed_;
};

}  // namespace fsdp
