#include "fsdp/solver/sharding_spec.hpp"

#include <cctype>
#include <vector>

#include "fsdp/core/error.hpp"

namespace fsdp::solver {

std::string ShardingSpec::to_string(int rank) const {
  std::string text = "[";
  for (int d = 0; d < rank; ++d) {
    if (d > 0) {
      text += ',';
    }
    text += (is_sharded() && dim == d) ? 'S' : 'R';
  }
  text += ']';
  if (is_partial()) {
    text += "+P";
  }
  return text;
}

ShardingSpec ShardingSpec::parse(const std::string& text, int rank) {
  std::string compact;
  for (char c : text) {
    if (!std::isspace(static_cast<unsigned char>(c))) {
      compact += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    }
  }
  const auto bad = [&](const std::string& why) {
    return Error("sharding spec '" + text + "' for a tensor of rank " + std::to_string(rank) +
                 ": " + why +
                 "; write R (replicated), P (partial sum), S<d> (dimension d sharded), or one " +
                 "letter per dimension such as [S,R] or [R,R]+P");
  };
  if (compact == "R" || compact == "REPLICATED") {
    return replicated();
  }
  if (compact == "P" || compact == "PARTIAL") {
    return partial();
  }
  if (compact.size() >= 2 && compact[0] == 'S' && compact[1] != ',') {
    std::string digits = compact.substr(1);
    if (digits.size() >= 2 && digits.front() == '(' && digits.back() == ')') {
      digits = digits.substr(1, digits.size() - 2);
    }
    if (digits.empty() || digits.size() > 3 ||
        digits.find_first_not_of("0123456789") != std::string::npos) {
      throw bad("expected a dimension number after S");
    }
    const int dim = std::stoi(digits);
    if (dim >= rank) {
      throw bad("dimension " + digits + " does not exist");
    }
    return sharded(dim);
  }
  if (compact.empty() || compact[0] != '[') {
    throw bad("unrecognized form");
  }
  bool partial_sum = false;
  if (compact.size() >= 2 && compact.compare(compact.size() - 2, 2, "+P") == 0) {
    partial_sum = true;
    compact.resize(compact.size() - 2);
  }
  if (compact.back() != ']') {
    throw bad("missing ]");
  }
  std::vector<char> letters;
  for (std::size_t i = 1; i + 1 < compact.size(); ++i) {
    if (compact[i] == ',') {
      continue;
    }
    letters.push_back(compact[i]);
  }
  if (static_cast<int>(letters.size()) != rank) {
    throw bad("it has " + std::to_string(letters.size()) + " dimensions");
  }
  ShardingSpec spec = partial_sum ? partial() : replicated();
  for (int d = 0; d < rank; ++d) {
    const char letter = letters[static_cast<std::size_t>(d)];
    if (letter == 'S') {
      if (!spec.is_replicated()) {
        throw bad("a 1-D mesh shards at most one dimension and not a partial sum");
      }
      spec = sharded(d);
    } else if (letter != 'R') {
      throw bad(std::string("unknown letter '") + letter + "'");
    }
  }
  return spec;
}

}  // namespace fsdp::solver
