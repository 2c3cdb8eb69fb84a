// Internal: 64-bit sizes, bytes and FLOPs that never wrap. Every element count, byte count and
// FLOP count the solver computes goes through these: a graph whose figures would overflow is
// refused with a message naming what overflowed, never turned into negative costs or memory.
#pragma once

#include <cstdint>
#include <string>
#include <type_traits>

#include "fsdp/core/error.hpp"

namespace fsdp::solver::detail {

// `what` names the quantity: a string, or a callable returning one (built only on overflow, so
// that the inner loops pay nothing for the message).
template <class What>
[[noreturn]] void overflow(const What& what) {
  std::string subject;
  if constexpr (std::is_invocable_v<const What&>) {
    subject = what();
  } else {
    subject = what;
  }
  throw Error(subject + " overflows 64 bits (more than 9.2e18); the graph's sizes are too large");
}

template <class What>
std::int64_t checked_add(std::int64_t a, std::int64_t b, const What& what) {
  std::int64_t sum = 0;
  if (__builtin_add_overflow(a, b, &sum)) {
    overflow(what);
  }
  return sum;
}

template <class What>
std::int64_t checked_mul(std::int64_t a, std::int64_t b, const What& what) {
  std::int64_t product = 0;
  if (__builtin_mul_overflow(a, b, &product)) {
    overflow(what);
  }
  return product;
}

// total += value, checked.
template <class What>
void add_to(std::int64_t& total, std::int64_t value, const What& what) {
  if (__builtin_add_overflow(total, value, &total)) {
    overflow(what);
  }
}

}  // namespace fsdp::solver::detail
