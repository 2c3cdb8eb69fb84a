// ReadAhead: the thread beside a checkpoint load's reads. The reading thread reads ranges of host
// memory one after the other (MPI-IO, waiting on the disk); this thread faults in the pages of
// the next ranges before the reads reach them, and sums each range's checksum as soon as it
// has been read. A load then takes about as long as its reads, where it used to read into fresh
// pages and sum everything afterwards (docs/performance.md). Host arithmetic only: no MPI, no
// Kokkos.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

namespace fsdp {

class ReadAhead {
 public:
  // Elements [first, first + count) of a tensor, read into host memory at data.
  struct Range {
    char* data = nullptr;
    std::int64_t count = 0;
    std::int64_t first = 0;  // the flat index of its first element
    bool summed = false;     // whether its checksum is wanted
  };
  // The checksum of count elements at data whose first has flat index first.
  using Sum = std::uint64_t (*)(const char* data, std::int64_t count, std::int64_t first);

  // Starts the thread. Ranges do not overlap.
  ReadAhead(std::vector<Range> ranges, std::size_t element_bytes, Sum sum);
  // Stops the thread (without summing what remains) and joins it.
  ~ReadAhead();
  ReadAhead(const ReadAhead&) = delete;
  ReadAhead& operator=(const ReadAhead&) = delete;

  // The reading thread, before it reads range i: waits until its pages are faulted in.
  void await_pages(std::size_t i);
  // The reading thread: ranges 0 .. i hold their values now (a failed read counts as read: the
  // caller throws its error, not the sums).
  void have_read(std::size_t i);
  // After have_read of the last range: waits for the sums and joins the thread. Range i's sum,
  // 0 for a range not summed.
  std::vector<std::uint64_t> sums();

 private:
  void run();

  const std::vector<Range> ranges_;
  const std::size_t element_bytes_;
  const Sum sum_;
  std::vector<std::uint64_t> sums_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::size_t populated_ = 0;  // ranges whose pages are in
  std::size_t read_ = 0;       // ranges read
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace fsdp
