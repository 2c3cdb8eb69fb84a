// Internal: how the solver words an error about one graph node.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "fsdp/core/error.hpp"
#include "fsdp/core/text.hpp"

namespace fsdp::solver::detail {

// "(1024, 512)"
inline std::string shape_text(const std::vector<std::int64_t>& shape) {
  return fsdp::shape_text(shape, "()");
}

// An Error prefixed with the node it is about: "fsdp: graph node 'id' (op): what".
inline Error node_error(const std::string& id, const std::string& op, const std::string& what) {
  return Error("graph node '" + id + "' (" + op + "): " + what);
}

}  // namespace fsdp::solver::detail
