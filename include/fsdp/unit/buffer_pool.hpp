// BufferPool: gathered parameters, full gradients and staging buffers, reused across units.
// Allocating and first touching hundreds of MB for every gather costs more than the transfer
// itself (page faults, zero fill); units of a model mostly have the same sizes, so a released
// buffer is kept, bounded by a capacity, and handed to the next request of exactly its size.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "fsdp/unit/memory_tracker.hpp"

namespace fsdp {

template <class T>
class BufferPool {
 public:
  BufferPool(std::shared_ptr<MemoryTracker> tracker, std::int64_t capacity_bytes)
      : tracker_(std::move(tracker)), capacity_bytes_(capacity_bytes) {}

  // A buffer of exactly size elements, counted under category; zero-filled when zero is true,
  // else with unspecified contents.
  TrackedView<T> acquire(MemoryCategory category, const std::string& label, std::int64_t size,
                         bool zero) {
    auto it = idle_.find(size);
    if (it == idle_.end()) {
      return TrackedView<T>(tracker_, category, label, size, zero);
    }
    TrackedView<T> buffer = std::move(it->second);
    idle_.erase(it);
    idle_bytes_ -= bytes(size);
    buffer.recategorize(category);
    if (zero) {
      Kokkos::deep_copy(buffer.view(), T(0));
    }
    return buffer;
  }

  // Keeps the buffer for reuse while the idle bytes stay within the capacity; frees it
  // otherwise. Leaves `buffer` empty either way.
  void give_back(TrackedView<T>& buffer) {
    if (!buffer.allocated()) {
      return;
    }
    const std::int64_t size = buffer.size();
    if (idle_bytes_ + bytes(size) <= capacity_bytes_) {
      buffer.recategorize(MemoryCategory::pool_idle);
      idle_.emplace(size, std::move(buffer));
      idle_bytes_ += bytes(size);
    }
    buffer.reset();
  }

  std::int64_t idle_bytes() const { return idle_bytes_; }
  std::int64_t capacity_bytes() const { return capacity_bytes_; }
  // Frees the idle buffers that no longer fit (all of them for 0).
  void set_capacity(std::int64_t capacity_bytes) {
    capacity_bytes_ = capacity_bytes;
    while (idle_bytes_ > capacity_bytes_ && !idle_.empty()) {
      auto largest = std::prev(idle_.end());
      idle_bytes_ -= bytes(largest->first);
      idle_.erase(largest);
    }
  }

 private:
  static std::int64_t bytes(std::int64_t size) {
    return size * static_cast<std::int64_t>(sizeof(T));
  }

  std::shared_ptr<MemoryTracker> tracker_;
  std::int64_t capacity_bytes_ = 0;
  std::int64_t idle_bytes_ = 0;
  std::multimap<std::int64_t, TrackedView<T>> idle_;
};

}  // namespace fsdp
