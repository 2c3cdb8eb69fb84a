#include "fsdp/core/text.hpp"

#include <algorithm>
#include <cctype>
#include <fstream>
#include <sstream>

#include "fsdp/core/error.hpp"

namespace fsdp {

std::string join(const std::vector<std::string>& items, const std::string& separator) {
  std::string text;
  for (std::size_t i = 0; i < items.size(); ++i) {
    text += (i == 0 ? "" : separator) + items[i];
  }
  return text;
}

std::string join_alternatives(const std::vector<std::string>& items) {
  std::string text;
  for (std::size_t i = 0; i < items.size(); ++i) {
    text += (i == 0 ? "" : i + 1 == items.size() ? " or " : ", ") + items[i];
  }
  return text;
}

std::string to_lower(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return text;
}

std::string shape_text(const std::vector<std::int64_t>& shape, const char* brackets,
                       const char* separator) {
  std::string text(1, brackets[0]);
  for (std::size_t i = 0; i < shape.size(); ++i) {
    text += (i ? separator : "") + std::to_string(shape[i]);
  }
  return text + brackets[1];
}

std::string read_text_file(const std::string& path, const std::string& what) {
  std::ifstream in(path, std::ios::binary);
  require(static_cast<bool>(in), "cannot open " + what + " '" + path + "'", ErrorKind::io);
  std::ostringstream text;
  text << in.rdbuf();
  require(!in.bad(), "cannot read " + what + " '" + path + "'", ErrorKind::io);
  return text.str();
}

}  // namespace fsdp
