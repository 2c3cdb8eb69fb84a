// Sizes checked before anything is allocated, printed or summed: an element count that would
// overflow 64 bits, or pass a limit, is an Error naming what was being sized and the limit,
// never a negative count or a request for exabytes. (The solver's figures have their own
// overflow checks, src/solver/checked_int.hpp, which name the graph.)
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "fsdp/core/error.hpp"
#include "fsdp/core/text.hpp"

namespace fsdp {

// The most elements a tensor may have: its bytes at 8 per element (fp64) fit in 63 bits.
constexpr std::int64_t kMostTensorElements = std::int64_t{1} << 60;

// The product of the shape's extents (each >= 0) when it is at most `most`; otherwise
// Error(kind) "<what> has shape [..]: more than <most> elements ..." (also for a negative
// extent).
inline std::int64_t checked_element_count(const std::vector<std::int64_t>& shape,
                                          const std::string& what, ErrorKind kind,
                                          std::int64_t most = kMostTensorElements) {
  std::int64_t count = 1;
  for (const std::int64_t extent : shape) {
    require(extent >= 0, what + " has shape " + shape_text(shape) + ": an extent is negative",
            kind);
    std::int64_t product = 0;
    if (__builtin_mul_overflow(count, extent, &product) || product > most) {
      throw Error(kind,
                  what + " has shape " + shape_text(shape) + ": more than " + std::to_string(most) +
                      " elements" +
                      (most == kMostTensorElements ? " (2^60), the most a tensor may have" : ""));
    }
    count = product;
  }
  return count;
}

}  // namespace fsdp
