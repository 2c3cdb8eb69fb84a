#include "fsdp/unit/memory_tracker.hpp"

#include <algorithm>

namespace fsdp {

const char* name_of(MemoryCategory category) {
  switch (category) {
    case MemoryCategory::parameter_shards:
      return "parameter_shards";
    case MemoryCategory::gradient_shards:
      return "gradient_shards";
    case MemoryCategory::optimizer_state:
      return "optimizer_state";
    case MemoryCategory::gathered_parameters:
      return "gathered_parameters";
    case MemoryCategory::full_gradients:
      return "full_gradients";
    case MemoryCategory::communication:
      return "communication";
    case MemoryCategory::pool_idle:
      return "pool_idle";
    case MemoryCategory::resident_parameters:
      return "resident_parameters";
    case MemoryCategory::resident_gradients:
      return "resident_gradients";
    case MemoryCategory::checkpoint_snapshot:
      return "checkpoint_snapshot";
  }
  return "unknown";
}

std::int64_t MemoryReport::model_state() const {
  return current_of(MemoryCategory::parameter_shards) +
         current_of(MemoryCategory::gradient_shards) + current_of(MemoryCategory::optimizer_state) +
         current_of(MemoryCategory::resident_parameters) +
         current_of(MemoryCategory::resident_gradients);
}

void MemoryTracker::allocated(MemoryCategory category, std::int64_t bytes) {
  const int c = static_cast<int>(category);
  report_.current[c] += bytes;
  report_.peak[c] = std::max(report_.peak[c], report_.current[c]);
  report_.total_current += bytes;
  report_.total_peak = std::max(report_.total_peak, report_.total_current);
}

void MemoryTracker::freed(MemoryCategory category, std::int64_t bytes) {
  report_.current[static_cast<int>(category)] -= bytes;
  report_.total_current -= bytes;
}

void MemoryTracker::reset_peaks() {
  report_.peak = report_.current;
  report_.total_peak = report_.total_current;
}

}  // namespace fsdp
