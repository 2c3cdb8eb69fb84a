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
// The shortest %g text that reads back as exactly this double ("0.003", "1e-05"): two numbers
// have the same text exactly when they are equal.
std::string number_text(double value);
// ASCII lower case (names given on command lines and in files compare without case).
std::string to_lower(std::string text);
// A name a user gave, quoted for a message: between single quotes, cut to 64 bytes ("..." marks
// a cut), each byte outside printable ASCII shown as '?', so that a hostile name can neither
// flood nor garble the message.
std::string quoted_name(const std::string& name);
// A shape's extents between brackets[0] and brackets[1]: "[1024, 512]", or "(1024,512)" with
// brackets "()" and separator ",".
std::string shape_text(const std::vector<std::int64_t>& shape, const char* brackets = "[]",
                       const char* separator = ", ");
// Bytes in the largest binary unit that keeps the figure >= 1, with `decimals` digits after the
// point: "7.42 MiB" (decimals 2), "43.0 KiB" (1); plain bytes have none: "512 B".
std::string bytes_text(double bytes, int decimals = 2);
// The largest text input fsdp reads (graph, model and plan JSON): 256 MiB.
constexpr std::int64_t kMostTextBytes = std::int64_t{256} << 20;
// The whole file as bytes: a regular file of at most kMostTextBytes (a device, a FIFO or a
// directory is refused without reading or blocking: require_regular_mode). Throws fsdp::Error
// (kind io) "cannot open <what> '<path>'", "... is a FIFO, not a regular file", "... has N bytes"
// or "cannot read ..." (what: "plan file", "model description", "graph file", ...).
std::string read_text_file(const std::string& path, const std::string& what);

}  // namespace fsdp
