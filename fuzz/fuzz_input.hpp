// Decodes fuzz bytes into choices for the structured targets, which build a valid HDF5 file from
// them: libFuzzer mutates the choices (shapes, types, values, attributes) instead of HDF5's own
// encoding, so inputs reach fsdp's logic rather than stopping in libhdf5's parser. Bytes that run
// out read as zeros, and zero bytes decode to the first (most ordinary) choice everywhere, so an
// empty input already builds a well-formed file. Like libFuzzer's FuzzedDataProvider, but built
// by any compiler (the replay executables are built by the project's own).
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace fsdp_fuzz {

class FuzzInput {
 public:
  FuzzInput(const std::uint8_t* data, std::size_t size) : data_(data), size_(size) {}

  // An integer in [lo, hi] (lo when the bytes ran out), from as few bytes as the range needs.
  std::uint64_t number(std::uint64_t lo, std::uint64_t hi) {
    const std::uint64_t range = hi - lo;
    std::uint64_t value = 0;
    for (std::uint64_t left = range; left != 0; left >>= 8) {
      value = (value << 8) | next_byte();
    }
    return range == UINT64_MAX ? value : lo + value % (range + 1);
  }
  int choice(int count) {
    return static_cast<int>(number(0, static_cast<std::uint64_t>(count - 1)));
  }
  bool flag() { return (next_byte() & 1) != 0; }

  // The next n bytes, zeros past the end.
  std::vector<std::uint8_t> bytes(std::size_t n) {
    std::vector<std::uint8_t> out(n, 0);
    const std::size_t available = std::min(n, size_ - std::min(size_, at_));
    if (available > 0) {
      std::memcpy(out.data(), data_ + at_, available);
    }
    at_ += n;
    return out;
  }
  // A string of at most `most` bytes (its length first).
  std::string text(std::size_t most) {
    const std::vector<std::uint8_t> raw = bytes(static_cast<std::size_t>(number(0, most)));
    return std::string(raw.begin(), raw.end());
  }

 private:
  std::uint8_t next_byte() { return at_ < size_ ? data_[at_++] : (++at_, 0); }

  const std::uint8_t* data_;
  std::size_t size_;
  std::size_t at_ = 0;
};

}  // namespace fsdp_fuzz
