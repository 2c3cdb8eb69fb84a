// The hash every random number of fsdp-train comes from (synthetic data, initial parameters):
// a pure function, callable on the host and inside Kokkos kernels on any backend.
#pragma once

#include <Kokkos_Core.hpp>
#include <cstdint>

namespace fsdp_train {

// One splitmix64 finalization step.
KOKKOS_INLINE_FUNCTION std::uint64_t splitmix64(std::uint64_t z) {
  z += 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// A uniform double in [0, 1) from 53 bits of a chained splitmix64 hash of (seed, a, b, c): the
// same on every rank, platform and backend (no std:: distributions).
KOKKOS_INLINE_FUNCTION double hash_uniform(std::uint64_t seed, std::uint64_t a, std::uint64_t b,
                                           std::uint64_t c) {
  const std::uint64_t h = splitmix64(splitmix64(splitmix64(splitmix64(seed) ^ a) ^ b) ^ c);
  return static_cast<double>(h >> 11) * (1.0 / 9007199254740992.0);
}

}  // namespace fsdp_train
