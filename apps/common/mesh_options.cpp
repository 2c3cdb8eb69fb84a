#include "mesh_options.hpp"

#include <cmath>
#include <cstdlib>

#include "finite_number.hpp"
#include "fsdp/core/error.hpp"
#include "fsdp/core/text.hpp"

namespace fsdp_apps {
namespace {

// The whole of `text` as a finite double, or false.
bool read_number(const std::string& text, double& value) {
  return read_whole_number(text, value) && std::isfinite(value);
}

std::vector<std::string> split(const std::string& text, char separator) {
  std::vector<std::string> parts(1);
  for (char c : text) {
    if (c == separator) {
      parts.emplace_back();
    } else {
      parts.back() += c;
    }
  }
  return parts;
}

}  // namespace

std::vector<int> parse_mesh(const std::string& text) {
  const auto bad = [&] {
    return fsdp::Error("mesh '" + text +
                       "': give the devices of a 1-D mesh (8) or of both axes of a 2-D mesh (2x4), "
                       "each a whole number >= 1");
  };
  std::vector<int> axes;
  for (const std::string& part : split(fsdp::to_lower(text), 'x')) {
    if (part.empty() || part.size() > 9 ||
        part.find_first_not_of("0123456789") != std::string::npos) {
      throw bad();
    }
    axes.push_back(std::stoi(part));
    if (axes.back() < 1) {
      throw bad();
    }
  }
  if (axes.size() > 2) {
    throw bad();
  }
  return axes;
}

std::vector<double> parse_per_axis(const std::string& text, int axes, const std::string& what,
                                   bool zero_allowed) {
  const std::vector<std::string> parts = split(text, ',');
  const std::string wanted = std::string(zero_allowed ? "a number >= 0" : "a number > 0") +
                             " for every mesh axis, or one per axis separated by a comma (" +
                             std::to_string(axes) + (axes == 1 ? " axis" : " axes") + ")";
  if (parts.size() != 1 && static_cast<int>(parts.size()) != axes) {
    throw fsdp::Error(what + " '" + text + "': " + wanted);
  }
  std::vector<double> values;
  for (const std::string& part : parts) {
    double value = 0;
    if (!read_number(part, value) || value < 0 || (!zero_allowed && value == 0)) {
      throw fsdp::Error(what + " '" + text + "': " + wanted);
    }
    values.push_back(value);
  }
  values.resize(static_cast<std::size_t>(axes), values.front());
  return values;
}

fsdp::solver::Machine machine_with_mesh(fsdp::solver::Machine base, const std::string& mesh,
                                        const std::string& bandwidth, const std::string& latency) {
  const std::vector<int> axes = mesh.empty() ? std::vector<int>{base.devices} : parse_mesh(mesh);
  const int count = static_cast<int>(axes.size());
  const std::vector<double> links = parse_per_axis(bandwidth, count, "--bandwidth", false);
  const std::vector<double> latencies = parse_per_axis(latency, count, "--latency", true);
  std::vector<fsdp::solver::MeshAxis> list;
  for (std::size_t a = 0; a < axes.size(); ++a) {
    list.push_back(fsdp::solver::MeshAxis{axes[a], links[a], latencies[a]});
  }
  base.set_mesh(list);
  return base;
}

std::int64_t parse_bytes(const std::string& text) {
  static const std::vector<std::pair<std::string, double>> units = {
      {"kib", 1024.0}, {"mib", 1048576.0}, {"gib", 1073741824.0}, {"tib", 1099511627776.0},
      {"kb", 1e3},     {"mb", 1e6},        {"gb", 1e9},           {"tb", 1e12},
      {"b", 1.0}};
  const std::string key = fsdp::to_lower(text);
  double scale = 1;
  std::string number = key;
  for (const auto& [suffix, factor] : units) {
    if (key.size() > suffix.size() &&
        key.compare(key.size() - suffix.size(), suffix.size(), suffix) == 0) {
      scale = factor;
      number = key.substr(0, key.size() - suffix.size());
      break;
    }
  }
  double value = 0;
  // 2^63 as a double: anything at or above it does not fit a signed 64-bit count.
  if (!read_number(number, value) || value < 0 || value * scale >= 9223372036854775808.0) {
    throw fsdp::Error("memory size '" + text +
                      "': give bytes (80000000000, 80e9) or a number with a unit (80GB, 80GiB, "
                      "3.5GiB, 512MiB), at most 2^63 - 1 bytes");
  }
  return static_cast<std::int64_t>(std::floor(value * scale));  // whole bytes, rounded down
}

}  // namespace fsdp_apps
