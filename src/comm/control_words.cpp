#include "fsdp/comm/control_words.hpp"

#include <vector>

namespace fsdp {

// Host words on any backend: an NCCL group's collectives stage host Views through device memory.

void all_reduce_words(ProcessGroup& group, std::int64_t* words, std::size_t count, ReduceOp op) {
  group.all_reduce(Kokkos::DefaultHostExecutionSpace(), host_view(words, count), op);
}

void broadcast_words(ProcessGroup& group, std::int64_t* words, std::size_t count, int root) {
  group.broadcast(Kokkos::DefaultHostExecutionSpace(), host_view(words, count), root);
}

void all_reduce_wrapping_sums(ProcessGroup& group, std::uint64_t* sums, std::size_t count) {
  // Each sum travels as its two 32-bit halves in signed words: with fewer than 2^31 ranks their
  // sums cannot overflow, and the halves put back together are the sum modulo 2^64.
  std::vector<std::int64_t> halves(2 * count);
  for (std::size_t i = 0; i < count; ++i) {
    halves[2 * i] = static_cast<std::int64_t>(sums[i] >> 32);
    halves[2 * i + 1] = static_cast<std::int64_t>(sums[i] & 0xffffffffu);
  }
  all_reduce_words(group, halves.data(), halves.size(), ReduceOp::sum);
  for (std::size_t i = 0; i < count; ++i) {
    sums[i] = (static_cast<std::uint64_t>(halves[2 * i]) << 32) +
              static_cast<std::uint64_t>(halves[2 * i + 1]);
  }
}

}  // namespace fsdp
