// The checksum of a tensor in a checkpoint: a sum over its elements of a hash of (flat index,
// the element's bits), modulo 2^64. Each rank sums the elements it holds and the sums add up to
// the tensor's, so no rank ever reads a whole sharded tensor to check it; any change of one
// element changes the sum (the hash is a bijection of the bits for each index).
#pragma once

#include <Kokkos_Core.hpp>
#include <cstdint>
#include <cstring>
#include <type_traits>

namespace fsdp {

// The name stored in checkpoints, so a reader knows which rule made the sums.
inline constexpr const char* kChecksumAlgorithm = "fsdp-mix64-sum";

// SplitMix64's finalizer: a bijection of 64-bit words that mixes every bit into every other.
KOKKOS_INLINE_FUNCTION std::uint64_t mix64(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

// One element's share: mix64(bits ^ index * 0x9E3779B97F4A7C15), bits being the element's IEEE
// bit pattern zero-extended to 64 bits. The index is spread by one odd multiplication (a
// bijection) rather than a second mix64: one mix per element is what keeps the sum cheaper than
// reading the bytes (docs/performance.md).
template <class T>
KOKKOS_INLINE_FUNCTION std::uint64_t checksum_term(std::int64_t index, T value) {
  static_assert(std::is_floating_point_v<T> && (sizeof(T) == 4 || sizeof(T) == 8),
                "checksums are defined for fp32 and fp64 elements");
  using Bits = std::conditional_t<sizeof(T) == 4, std::uint32_t, std::uint64_t>;
  Bits bits = 0;
  std::memcpy(&bits, &value, sizeof(T));
  return mix64(static_cast<std::uint64_t>(bits) ^
               static_cast<std::uint64_t>(index) * 0x9E3779B97F4A7C15ULL);
}

// The sum of the terms of values[i] at flat index first + i, for i < count, in host memory, on
// the calling thread (any thread: no Kokkos). On x86-64 with GCC it runs AVX-512F where the CPU
// has it and the baseline's SSE2 elsewhere (chosen when the library loads): the same sum, since
// integer addition modulo 2^64 does not depend on its order.
std::uint64_t host_checksum(const float* values, std::int64_t count, std::int64_t first);
std::uint64_t host_checksum(const double* values, std::int64_t count, std::int64_t first);

// The sum of the terms of piece(i) at flat index first + i: host_checksum for a contiguous View
// the host can read, else a kernel in the View's execution space (the View may live on a
// device). Sums of disjoint pieces add up (mod 2^64).
template <class View>
std::uint64_t partial_checksum(const View& piece, std::int64_t first) {
  using T = typename View::non_const_value_type;
  using Space = typename View::execution_space;
  if constexpr (View::rank == 1 &&
                Kokkos::SpaceAccessibility<Kokkos::HostSpace,
                                           typename View::memory_space>::accessible) {
    if (piece.span_is_contiguous()) {
      return host_checksum(piece.data(), static_cast<std::int64_t>(piece.size()), first);
    }
  }
  std::uint64_t sum = 0;
  Kokkos::parallel_reduce(
      "fsdp::partial_checksum", Kokkos::RangePolicy<Space>(0, piece.size()),
      KOKKOS_LAMBDA(std::size_t i, std::uint64_t & acc) {
        acc += checksum_term<T>(first + static_cast<std::int64_t>(i), piece(i));
      },
      sum);
  return sum;
}

}  // namespace fsdp
