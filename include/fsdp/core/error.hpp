// fsdp::Error: the one exception type the C++ API throws.
#pragma once

#include <stdexcept>
#include <string>

namespace fsdp {

// Thrown for every failure the library detects: bad arguments, ranks that disagree, MPI, NCCL and
// HDF5 failures, timeouts. what() says what went wrong, where, and what would be right.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

// Throws Error(message) unless condition holds. Used for argument checks.
inline void require(bool condition, const std::string& message) {
  if (!condition) {
    throw Error(message);
  }
}

}  // namespace fsdp
