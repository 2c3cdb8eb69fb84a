// IndexPermutation: a pseudo-random bijection of [0, size) computed one element at a time.
#pragma once

#include <array>
#include <cstdint>

namespace fsdp {

// A keyed pseudo-random permutation of [0, size) that costs O(1) memory whatever the size, so a
// sampler can shuffle 10^9 samples without materializing them.
//
// A Feistel network over the smallest power of two 2^b >= size (b >= 2) is a bijection of
// [0, 2^b) for any round function; "cycle walking" (apply it again while the result is >= size)
// restricts it to a bijection of [0, size). Because 2^b < 2 * size, a position takes fewer than
// two network evaluations on average. When b is odd the two halves differ by one bit and swap
// widths every round (an unbalanced Feistel network, still a bijection).
//
// The round keys come from (seed, stream) through splitmix64, so the result is the same on every
// platform and standard library (no std:: distributions are involved).
class IndexPermutation {
 public:
  // Rounds of the network: small domains need more of them for the shuffle to be close to
  // uniform (halves of a few bits mix slowly; measured: 6 rounds on 3 or 4 bits leave a clear
  // position bias, 12 do not), large ones get by with fewer, which keeps the sampler fast.
  static constexpr int kMaxRounds = 12;
  static constexpr int kSmallDomainRounds = 12;
  static constexpr int kLargeDomainRounds = 6;
  static constexpr int kSmallDomainMaxBits = 16;

  // size >= 1. stream separates permutations under one seed (the sampler passes the epoch).
  IndexPermutation(std::uint64_t size, std::uint64_t seed, std::uint64_t stream);

  std::uint64_t size() const { return size_; }

  // The element at position (position < size; not checked here, this is the hot path).
  std::uint64_t operator()(std::uint64_t position) const {
    std::uint64_t x = position;
    do {
      x = encrypt(x);
    } while (x >= size_);
    return x;
  }

  // The position of element (element < size): inverse(operator()(p)) == p.
  std::uint64_t inverse(std::uint64_t element) const {
    std::uint64_t x = element;
    do {
      x = decrypt(x);
    } while (x >= size_);
    return x;
  }

  // The splitmix64 finalizer: a strong 64-bit mixer, used for the round function and the keys.
  static std::uint64_t mix(std::uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }

 private:
  // One pass of the network over [0, 2^bits). Round i splits x into a high part of high_bits(i)
  // and a low part of low_bits(i) bits: (high, low) -> (low, high ^ F_i(low)).
  std::uint64_t encrypt(std::uint64_t x) const {
    for (int i = 0; i < rounds_; ++i) {
      const int low_width = (i % 2 == 0) ? even_low_bits_ : odd_low_bits_;
      const int high_width = bits_ - low_width;
      const std::uint64_t low = x & ((std::uint64_t{1} << low_width) - 1);
      const std::uint64_t high = x >> low_width;
      const std::uint64_t mixed =
          (high ^ mix(low ^ keys_[i])) & ((std::uint64_t{1} << high_width) - 1);
      x = (low << high_width) | mixed;
    }
    return x;
  }
  std::uint64_t decrypt(std::uint64_t x) const {
    for (int i = rounds_ - 1; i >= 0; --i) {
      const int low_width = (i % 2 == 0) ? even_low_bits_ : odd_low_bits_;
      const int high_width = bits_ - low_width;
      const std::uint64_t mixed = x & ((std::uint64_t{1} << high_width) - 1);
      const std::uint64_t low = x >> high_width;
      const std::uint64_t high =
          (mixed ^ mix(low ^ keys_[i])) & ((std::uint64_t{1} << high_width) - 1);
      x = (high << low_width) | low;
    }
    return x;
  }

  std::uint64_t size_;
  int bits_;           // 2^bits_ >= size_, bits_ >= 2
  int even_low_bits_;  // width of the low part in even rounds: bits_ - bits_ / 2
  int odd_low_bits_;   // width of the low part in odd rounds: bits_ / 2
  int rounds_;
  std::array<std::uint64_t, kMaxRounds> keys_;
};

}  // namespace fsdp
