// ceil_div: the one home of rounding a division up (pieces of a shard, blocks of a ring,
// batches of a sampler, slices of a reduction).
#pragma once

#include <type_traits>

namespace fsdp {

// ceil(a / b) for a >= 0 and b >= 1 (and a + b - 1 representable). One integer type for both,
// so that a signed count never meets an unsigned one silently.
template <class Int>
constexpr Int ceil_div(Int a, Int b) {
  static_assert(std::is_integral_v<Int>, "ceil_div is for integers");
  return (a + b - 1) / b;
}

}  // namespace fsdp
