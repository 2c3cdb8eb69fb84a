// Internal: an inner Error's message inside an outer one, without a second "fsdp: " prefix.
#pragma once

#include <exception>
#include <string>

namespace fsdp::detail {

inline std::string unprefixed(const std::exception& error) {
  const std::string message = error.what();
  const std::string prefix = "fsdp: ";
  return message.compare(0, prefix.size(), prefix) == 0 ? message.substr(prefix.size()) : message;
}

}  // namespace fsdp::detail
