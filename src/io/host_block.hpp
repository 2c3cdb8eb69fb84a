// HostBlock: a block of host memory that a checkpoint load reads into and a background save
// copies into. Fresh memory is what made both slow: the kernel faults and zeroes every 4 KiB
// page on its first touch (0.7 s per GB by memset on the Emerald Rapids VM, more than reading
// the bytes from the disk). So the block can be faulted in ahead of its use, by a thread other
// than the one that needs it, and backed by transparent huge pages where that is faster.
#pragma once

#include <cstddef>
#include <memory>

namespace fsdp {

class HostBlock {
 public:
  HostBlock() = default;
  // Which pages back the block. Huge ones fault in faster (0.17 s per GB against 0.3 with
  // MADV_POPULATE_WRITE on the Emerald Rapids VM), but a file reads into them slower (pread:
  // 0.8-0.9 s per GB against 0.65): a block that is read into takes base pages.
  enum class Pages { base, huge };

  // `bytes` (none for 0), not touched yet, allocated in whole pages (huge ones only from 2 MiB
  // on), whose rounding up size() leaves out as it leaves out malloc's. Error (kind io) when the
  // memory cannot be had.
  HostBlock(std::size_t bytes, Pages pages);

  char* data() const { return data_.get(); }
  std::size_t size() const { return size_; }

 private:
  struct Release {
    void operator()(char* p) const;
  };
  std::unique_ptr<char, Release> data_;
  std::size_t size_ = 0;
};

// Faults in the pages that begin in [data, data + bytes) for writing now (MADV_POPULATE_WRITE
// where the kernel has it, else a write to each page), so that whoever writes them next does
// not; a page the range shares with the bytes before it is left alone (it may belong to someone
// else). Any thread, any host memory; nothing else may use the range meanwhile, and its values
// are unspecified afterwards.
void populate_pages(char* data, std::size_t bytes);

}  // namespace fsdp
