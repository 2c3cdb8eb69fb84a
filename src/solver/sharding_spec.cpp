#include "fsdp/solver/sharding_spec.hpp"

#include <cctype>
#include <vector>

#include "fsdp/core/error.hpp"

namespace fsdp::solver {

bool ShardingSpec::is_replicated() const {
  return !uses_axis(0) && !uses_axis(1);
}

bool ShardingSpec::is_sharded() const {
  return axis_sharded(0) || axis_sharded(1);
}

bool ShardingSpec::is_partial() const {
  return axis_partial(0) || axis_partial(1);
}

ShardingSpec ShardingSpec::without_partial() const {
  ShardingSpec spec = *this;
  for (AxisUse& use : spec.axes) {
    if (use.kind == Kind::partial) {
      use = AxisUse{};
    }
  }
  return spec;
}

std::string ShardingSpec::to_string(int rank, int mesh_axes) const {
  const bool two_axes = mesh_axes > 1 || uses_axis(1);
  std::string text = "[";
  for (int d = 0; d < rank; ++d) {
    if (d > 0) {
      text += ',';
    }
    std::string axes_cutting;
    bool cut = false;
    for (int a = 0; a < kMaxAxes; ++a) {
      if (axis_sharded(a) && axis(a).dim == d) {
        cut = true;
        axes_cutting += std::to_string(a);
      }
    }
    text += !cut ? "R" : two_axes ? "S" + axes_cutting : "S";
  }
  text += ']';
  if (is_partial()) {
    text += "+P";
    if (two_axes) {
      for (int a = 0; a < kMaxAxes; ++a) {
        if (axis_partial(a)) {
          text += std::to_string(a);
        }
      }
    }
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
                 "entry per dimension such as [S,R] or [R,R]+P; on a 2-D mesh name the axes: " +
                 "[S0,S1], [S01,R], [R,S1]+P0");
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
  ShardingSpec spec;
  const auto use = [&](int a, AxisUse how) {
    if (spec.uses_axis(a)) {
      throw bad("mesh axis " + std::to_string(a) + " is used twice (an axis cuts one dimension " +
                "or holds a partial sum, not both)");
    }
    spec.axes[static_cast<std::size_t>(a)] = how;
  };
  // Which axes a suffix such as "01" names; empty: axis 0 (the 1-D form).
  const auto axes_of = [&](const std::string& digits) {
    if (digits.empty() || digits == "0") {
      return std::vector<int>{0};
    }
    if (digits == "1") {
      return std::vector<int>{1};
    }
    if (digits == "01") {
      return std::vector<int>{0, 1};
    }
    throw bad("unknown mesh axes '" + digits + "' (0, 1 or 01)");
  };
  const std::size_t plus = compact.find("]+P");
  std::string body = compact;
  if (plus != std::string::npos) {
    for (int a : axes_of(compact.substr(plus + 3))) {
      use(a, AxisUse{Kind::partial, -1});
    }
    body = compact.substr(0, plus + 1);
  }
  if (body.back() != ']') {
    throw bad("missing ]");
  }
  std::vector<std::string> entries(1);
  for (std::size_t i = 1; i + 1 < body.size(); ++i) {
    if (body[i] == ',') {
      entries.emplace_back();
    } else {
      entries.back() += body[i];
    }
  }
  if (rank == 0 && entries.size() == 1 && entries[0].empty()) {
    entries.clear();
  }
  if (static_cast<int>(entries.size()) != rank) {
    throw bad("it has " + std::to_string(entries.size()) + " dimensions");
  }
  for (int d = 0; d < rank; ++d) {
    const std::string& entry = entries[static_cast<std::size_t>(d)];
    if (entry == "R") {
      continue;
    }
    if (entry.empty() || entry[0] != 'S') {
      throw bad("unknown entry '" + entry + "'");
    }
    for (int a : axes_of(entry.substr(1))) {
      use(a, AxisUse{Kind::sharded, d});
    }
  }
  return spec;
}

}  // namespace fsdp::solver
