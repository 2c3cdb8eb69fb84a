// Where fsdp's buffers live and where its kernels run: the Kokkos build's default execution
// space and its memory space. Shards, gradients, optimizer state, gathered parameters, the buffer
// pool and staging buffers all live in MemorySpace; every element-wise loop on them is a Kokkos
// kernel in ExecutionSpace.
//
// One space for the whole build, not a template parameter: the library is compiled once with
// its float and double instantiations, a training run uses one device per rank, and a Kokkos
// user's own Views land in the same default space, so the Views a user hands fsdp (gradients,
// inputs) and the ones fsdp hands back (full parameters) need no conversion. A CUDA build of
// Kokkos puts everything on the GPU; a host build (Serial, OpenMP) keeps it in host memory.
#pragma once

#include <Kokkos_Core.hpp>
#include <cstddef>
#include <cstdint>

namespace fsdp {

using ExecutionSpace = Kokkos::DefaultExecutionSpace;
using MemorySpace = ExecutionSpace::memory_space;

// A flat buffer of fsdp's: contiguous, in MemorySpace.
template <class T>
using DeviceView = Kokkos::View<T*, MemorySpace>;

// Kernels over [begin, end) on ExecutionSpace (an instance, so that fences stay local to it).
inline Kokkos::RangePolicy<ExecutionSpace> device_range(const ExecutionSpace& space,
                                                        std::int64_t begin, std::int64_t end) {
  return Kokkos::RangePolicy<ExecutionSpace>(space, static_cast<std::size_t>(begin),
                                             static_cast<std::size_t>(end));
}

// count elements of host memory at data as an unmanaged View, e.g. for a collective:
// group.all_reduce(Kokkos::DefaultHostExecutionSpace(), host_view(&x, 1), ReduceOp::max).
template <class T>
Kokkos::View<T*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>> host_view(
    T* data, std::size_t count) {
  return Kokkos::View<T*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>(data, count);
}

// True when host code may read and write MemorySpace directly (no mirror copy needed).
inline constexpr bool kHostAccessible =
    Kokkos::SpaceAccessibility<Kokkos::HostSpace, MemorySpace>::accessible;

}  // namespace fsdp
