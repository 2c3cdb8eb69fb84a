// Resident memory as the kernel measures it (/proc/self/status), independent of what fsdp's own
// MemoryReport tracks.
#pragma once

#include <fstream>

#include "../common/process_status.hpp"

namespace fsdp::bench {

using fsdp_apps::status_kb;

// Measures the peak resident memory a piece of work adds to the process: the kernel's high-water
// mark (VmHWM) is reset to the current RSS through /proc/self/clear_refs before the work and read
// after it. Where the reset is not allowed, the peak is the process's since it started, which is
// still an upper bound (the report says which).
class PeakMemory {
 public:
  PeakMemory() {
    std::ofstream clear("/proc/self/clear_refs");
    reset_ok_ = static_cast<bool>(clear << "5" << std::flush);
    rss_before_kb_ = status_kb("VmRSS:");
  }
  // Peak RSS during the work minus RSS before it, in kB.
  long added_kb() const { return status_kb("VmHWM:") - rss_before_kb_; }
  // Peak RSS since construction (or since the process started, without the reset), in kB.
  long peak_kb() const { return status_kb("VmHWM:"); }
  long rss_before_kb() const { return rss_before_kb_; }
  bool reset_ok() const { return reset_ok_; }

 private:
  bool reset_ok_ = false;
  long rss_before_kb_ = 0;
};

}  // namespace fsdp::bench
