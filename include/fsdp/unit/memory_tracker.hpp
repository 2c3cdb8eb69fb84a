// MemoryTracker: the bytes fsdp holds on this rank, by category, now and at their peak.
#pragma once

#include <Kokkos_Core.hpp>
#include <array>
#include <cstdint>
#include <memory>
#include <string>

#include "fsdp/core/memory_space.hpp"

namespace fsdp {

enum class MemoryCategory : int {
  parameter_shards,     // this rank's pieces of the parameters (and replicated parameters)
  gradient_shards,      // gradients of those pieces
  optimizer_state,      // momentum, Adam moments
  gathered_parameters,  // full parameters of gathered units
  full_gradients,       // full-shape gradients users write, until reduce-scattered
  communication,        // staging buffers of collectives
  pool_idle,            // released buffers kept for reuse by the next gather (BufferPool)
  // Modes that keep whole tensors on every rank (sharding_mode.hpp); this rank's pieces are views
  // into them, so they are not counted twice.
  resident_parameters,  // shard_grad_op, shard_optimizer: the whole parameters
  resident_gradients,   // shard_optimizer: the whole gradients
  // Host memory, also in a device build: a save in the background copies this rank's pieces of
  // the model and optimizer state into it and writes the file from it (io/background_save.hpp);
  // kept for the next save.
  checkpoint_snapshot,
};
constexpr int kMemoryCategories = 10;
const char* name_of(MemoryCategory category);

struct MemoryReport {
  std::array<std::int64_t, kMemoryCategories> current{};
  std::array<std::int64_t, kMemoryCategories> peak{};
  std::int64_t total_current = 0;
  std::int64_t total_peak = 0;  // the peak of the sum, not the sum of the peaks

  std::int64_t current_of(MemoryCategory c) const { return current[static_cast<int>(c)]; }
  std::int64_t peak_of(MemoryCategory c) const { return peak[static_cast<int>(c)]; }
  // Bytes that live for the whole run: parameter and gradient shards, optimizer state, and the
  // resident whole parameters and gradients (the model states of the ZeRO paper).
  std::int64_t model_state() const;
};

class MemoryTracker {
 public:
  void allocated(MemoryCategory category, std::int64_t bytes);
  void freed(MemoryCategory category, std::int64_t bytes);
  const MemoryReport& report() const { return report_; }
  // Forgets the peaks (they restart from the current values), e.g. after initialization.
  void reset_peaks();

 private:
  MemoryReport report_;
};

// A zero-initialized View in fsdp::MemorySpace whose bytes count in a MemoryTracker while it lives.
// Move-only: the bytes are released from the count when it is destroyed or reset.
template <class T>
class TrackedView {
 public:
  using View = DeviceView<T>;

  TrackedView() = default;
  // zero: fill with zeros; false leaves the bytes uninitialized (buffers a collective overwrites).
  TrackedView(std::shared_ptr<MemoryTracker> tracker, MemoryCategory category,
              const std::string& label, std::int64_t size, bool zero = true)
      : view_(zero ? View(label, static_cast<std::size_t>(size))
                   : View(Kokkos::view_alloc(Kokkos::WithoutInitializing, label),
                          static_cast<std::size_t>(size))),
        tracker_(std::move(tracker)),
        category_(category),
        bytes_(size * static_cast<std::int64_t>(sizeof(T))) {
    tracker_->allocated(category_, bytes_);
  }
  TrackedView(TrackedView&& other) noexcept { *this = std::move(other); }
  TrackedView& operator=(TrackedView&& other) noexcept {
    if (this != &other) {
      reset();
      view_ = std::move(other.view_);
      tracker_ = std::move(other.tracker_);
      category_ = other.category_;
      bytes_ = other.bytes_;
      other.view_ = View();
      other.bytes_ = 0;
    }
    return *this;
  }
  TrackedView(const TrackedView&) = delete;
  TrackedView& operator=(const TrackedView&) = delete;
  ~TrackedView() { reset(); }

  void reset() noexcept {
    if (tracker_ && bytes_ > 0) {
      tracker_->freed(category_, bytes_);
    }
    view_ = View();
    bytes_ = 0;
  }
  const View& view() const { return view_; }
  MemoryCategory category() const { return category_; }
  // Counts the bytes under another category from now on.
  void recategorize(MemoryCategory category) {
    if (tracker_ && bytes_ > 0) {
      tracker_->freed(category_, bytes_);
      tracker_->allocated(category, bytes_);
    }
    category_ = category;
  }
  bool allocated() const { return view_.data() != nullptr || bytes_ > 0; }
  std::int64_t size() const { return static_cast<std::int64_t>(view_.size()); }

 private:
  View view_;
  std::shared_ptr<MemoryTracker> tracker_;
  MemoryCategory category_ = MemoryCategory::communication;
  std::int64_t bytes_ = 0;
};

}  // namespace fsdp
