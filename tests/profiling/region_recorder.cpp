// A Kokkos Tools library of our own for the tests: records the regions a process pushes
// (Kokkos::Profiling::pushRegion) and, when Kokkos finalizes, writes each region's name and count
// to $FSDP_REGION_LOG.<pid>, then a line "unbalanced <n>" with the regions still open. Loaded
// as any Kokkos Tools profiler is (KOKKOS_PROFILE_LIBRARY in Kokkos 3, KOKKOS_TOOLS_LIBS in 4).
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

namespace {
std::map<std::string, long> counts;
std::vector<std::string> open_regions;
}  // namespace

extern "C" void kokkosp_init_library(int, std::uint64_t, std::uint32_t, void*) {}

extern "C" void kokkosp_push_profile_region(const char* name) {
  open_regions.emplace_back(name);
  ++counts[name];
}

extern "C" void kokkosp_pop_profile_region() {
  if (open_regions.empty()) {
    ++counts["(pop without push)"];
  } else {
    open_regions.pop_back();
  }
}

extern "C" void kokkosp_finalize_library() {
  const char* prefix = std::getenv("FSDP_REGION_LOG");
  if (prefix == nullptr) {
    return;
  }
  const std::string path = std::string(prefix) + "." + std::to_string(getpid());
  FILE* file = std::fopen(path.c_str(), "w");
  if (file == nullptr) {
    std::perror(path.c_str());
    return;
  }
  for (const auto& [name, count] : counts) {
    std::fprintf(file, "%s\t%ld\n", name.c_str(), count);
  }
  std::fprintf(file, "unbalanced %zu\n", open_regions.size());
  std::fclose(file);
}
