#include "fsdp/data/index_permutation.hpp"

#include <string>

#include "fsdp/core/error.hpp"

namespace fsdp {

IndexPermutation::IndexPermutation(std::uint64_t size, std::uint64_t seed, std::uint64_t stream)
    : size_(size) {
  require(size >= 1, "fsdp::IndexPermutation: size must be at least 1, got 0");
  require(size <= (std::uint64_t{1} << 63),
          "fsdp::IndexPermutation: size must be at most 2^63, got " + std::to_string(size));
  bits_ = 2;  // two halves of at least one bit each
  while (bits_ < 64 && (std::uint64_t{1} << bits_) < size) {
    ++bits_;
  }
  even_low_bits_ = bits_ - bits_ / 2;
  odd_low_bits_ = bits_ / 2;
  rounds_ = bits_ <= kSmallDomainMaxBits ? kSmallDomainRounds : kLargeDomainRounds;
  // splitmix64 over a state that depends on both seed and stream; every key goes through the
  // finalizer, so nearby seeds or epochs give unrelated keys.
  std::uint64_t state = mix(seed ^ 0x6a09e667f3bcc909ULL) ^ mix(stream + 0xbb67ae8584caa73bULL);
  for (auto& key : keys_) {
    state += 0x9e3779b97f4a7c15ULL;
    key = mix(state);
  }
}

}  // namespace fsdp
