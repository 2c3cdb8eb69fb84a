// Internal: 64-bit sizes, bytes and FLOPs that never wrap. Every element count, byte count and
// FLOP count the solver computes goes through these: a graph whose figures would overflow is
// refused with a message naming what overflowed, never turned into negative costs or memory.
#pragma once

#include <cstdint>
#include <string>

#include "fsdp/core/error.hpp"

namespace fsdp::solver::detail {

[[noreturn]] inline void overflow(const std::string& what) {
  throw Error(what + " overflows 64 bits (more than 9.2e18); the graph's sizes are too large");
}

inline std::int64_t checked_add(std::int64_t a, std::int64_t b, const std::string& what) {
  std::int64_t sum = 0;
  if (__builtin_add_overflow(a, b, &sum)) {
    overflow(what);
  }
  return sum;
}

inline std::int64_t checked_mul(std::int64_t a, std::int64_t b, const std::string& what) {
  std::int64_t product = 0;
  if (__builtin_mul_overflow(a, b, &product)) {
    overflow(what);
  }
  return product;
}

// total += value, checked. `what` is built only when the sum overflows.
template <class What>
void add_to(std::int64_t& total, std::int64_t value, What&& what) {
  if (__builtin_add_overflow(total, value, &total)) {
    overflow(what());
  }
}

}  // namespace fsdp::solver::detail
