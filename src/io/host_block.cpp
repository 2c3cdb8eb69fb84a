#include "host_block.hpp"

#include <sys/mman.h>

#include <cstdint>
#include <cstdlib>
#include <string>

#include "fsdp/core/error.hpp"

namespace fsdp {
namespace {

// The size of a transparent huge page on x86-64 and arm64 (with 4 KiB base pages).
constexpr std::size_t kHugePage = std::size_t{2} << 20;
constexpr std::size_t kPage = 4096;

}  // namespace

void HostBlock::Release::operator()(char* p) const {
  std::free(p);
}

HostBlock::HostBlock(std::size_t bytes, Pages pages) {
  if (bytes == 0) {
    return;
  }
  // Huge pages only where they fill up: a small block stays in 4 KiB pages, not rounded up.
  const std::size_t unit = pages == Pages::huge && bytes >= kHugePage ? kHugePage : kPage;
  const std::size_t rounded = (bytes + unit - 1) / unit * unit;
  char* p = static_cast<char*>(std::aligned_alloc(unit, rounded));
  if (p == nullptr) {
    throw Error(ErrorKind::io, "cannot allocate " + std::to_string(rounded) +
                                   " bytes of host memory for checkpoint staging");
  }
  data_.reset(p);
  size_ = bytes;
#ifdef MADV_HUGEPAGE
  // Advice only: a kernel without transparent huge pages (or with them off) keeps 4 KiB pages,
  // which are correct, only slower to fault in.
  if (unit == kHugePage) {
    (void)::madvise(p, rounded, MADV_HUGEPAGE);
  }
#endif
}

void populate_pages(char* data, std::size_t bytes) {
  // From the first page that starts in the range: a page it shares with the bytes before it was
  // faulted in with those, and may be in use now.
  const auto start = reinterpret_cast<std::uintptr_t>(data);
  char* begin = data + ((start + kPage - 1) / kPage * kPage - start);
  char* end = data + bytes;
  if (begin >= end) {
    return;
  }
#ifdef MADV_POPULATE_WRITE
  if (::madvise(begin, static_cast<std::size_t>(end - begin), MADV_POPULATE_WRITE) == 0) {
    return;
  }
#endif
  // Kernels before 5.14: one write per page faults it in (the values are about to be replaced).
  for (volatile char* page = begin; page < end; page += kPage) {
    *page = 0;
  }
}

}  // namespace fsdp
