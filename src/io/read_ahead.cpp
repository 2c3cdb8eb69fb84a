#include "read_ahead.hpp"

#include <utility>

#include "host_block.hpp"

namespace fsdp {
namespace {

// How many ranges the faulting-in runs ahead of the reads: enough that a read never waits for
// it, few enough that the sums of the first ranges do not wait for the faults of the last.
constexpr std::size_t kRangesAhead = 2;

}  // namespace

ReadAhead::ReadAhead(std::vector<Range> ranges, std::size_t element_bytes, Sum sum)
    : ranges_(std::move(ranges)),
      element_bytes_(element_bytes),
      sum_(sum),
      sums_(ranges_.size(), 0),
      thread_([this] { run(); }) {}

ReadAhead::~ReadAhead() {
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  changed_.notify_all();
  if (thread_.joinable()) {
    thread_.join();
  }
}

void ReadAhead::await_pages(std::size_t i) {
  std::unique_lock<std::mutex> lock(mutex_);
  changed_.wait(lock, [&] { return populated_ > i || stop_; });
}

void ReadAhead::have_read(std::size_t i) {
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    read_ = i + 1;
  }
  changed_.notify_all();
}

std::vector<std::uint64_t> ReadAhead::sums() {
  thread_.join();  // it ends once it has summed the last range
  return sums_;
}

void ReadAhead::run() {
  const std::size_t n = ranges_.size();
  std::size_t summed = 0;
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stop_ && summed < n) {
    // Faulting in comes first: the reads may be waiting for it.
    if (populated_ < n && populated_ < read_ + kRangesAhead) {
      const Range& range = ranges_[populated_];
      lock.unlock();
      populate_pages(range.data, static_cast<std::size_t>(range.count) * element_bytes_);
      lock.lock();
      ++populated_;
      changed_.notify_all();
    } else if (summed < read_) {
      const Range& range = ranges_[summed];
      lock.unlock();
      if (range.summed && range.count > 0) {
        sums_[summed] = sum_(range.data, range.count, range.first);
      }
      lock.lock();
      ++summed;
    } else {
      changed_.wait(lock);
    }
  }
}

}  // namespace fsdp
