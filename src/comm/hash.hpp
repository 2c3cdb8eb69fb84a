// A hash that every rank and platform computes alike (no std::hash, whose values differ between
// standard libraries): ranks compare what they were given by sending 8 bytes instead of all of it.
#pragma once

#include <cstddef>
#include <cstdint>

namespace fsdp::detail {

inline constexpr std::uint64_t kFnvOffsetBasis = 14695981039346656037ull;

// FNV-1a over size bytes, continuing from hash (chain calls to hash several pieces).
inline std::uint64_t fnv1a(const void* bytes, std::size_t size,
                           std::uint64_t hash = kFnvOffsetBasis) {
  const auto* byte = static_cast<const unsigned char*>(bytes);
  for (std::size_t i = 0; i < size; ++i) {
    hash ^= byte[i];
    hash *= 1099511628211ull;
  }
  return hash;
}

// FNV-1a over a 64-bit value's bytes from least to most significant, so that big- and
// little-endian ranks agree.
inline std::uint64_t fnv1a_word(std::uint64_t word, std::uint64_t hash = kFnvOffsetBasis) {
  for (int byte = 0; byte < 8; ++byte) {
    hash ^= (word >> (8 * byte)) & 0xffu;
    hash *= 1099511628211ull;
  }
  return hash;
}

}  // namespace fsdp::detail
