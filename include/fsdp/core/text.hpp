// Text for messages and tables: lists, shapes, case, whole files. One home for each, so that
// every message of the library writes a list or a shape the same way.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace fsdp {

// "a, b, c" (with separator ", ").
std::string join(const std::vector<std::string>& items, const std::string& separator = ", ");
// "a, b or c": the choices a message offers.
std::string join_alternatives(const std::vector<std::string>& items);
// ASCII lower case (names given on command lines and in files compare without case).
std::string to_lower(std::string text);
// A shape's extents between brackets[0] and brackets[1]: "[1024, 512]", or "(1024,512)" with
// brackets "()" and separator ",".
std::string shape_text(const std::vector<std::int64_t>& shape, const char* brackets = "[]",
                       const char* separator = ", ");
// The whole file as bytes. Throws fsdp::Error "cannot open <what> '<path>'" or "cannot read ..."
// (what: "plan file", "model description", ...).
std::string read_text_file(const std::string& path, const std::string& what);

}  // namespace fsdp
