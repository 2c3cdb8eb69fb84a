#include "fsdp/comm/control_words.hpp"

#include <algorithm>
#include <vector>

#include "fsdp/core/memory_space.hpp"

namespace fsdp {
namespace {

// Runs collective(pointer) on words where the backend can read them, else on a copy in
// MemorySpace that is copied back afterwards.
template <class Collective>
void on_reachable_words(ProcessGroup& group, std::int64_t* words, std::size_t count,
                        Collective&& collective) {
  if (group.memory_kind() == MemoryKind::host) {
    collective(words);
    return;
  }
  DeviceView<std::int64_t> device(
      Kokkos::view_alloc(Kokkos::WithoutInitializing, "fsdp::control_words"), count);
  Kokkos::View<std::int64_t*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>> host(
      words, count);
  Kokkos::deep_copy(device, host);
  collective(device);
  Kokkos::deep_copy(host, device);
}

}  // namespace

void all_reduce_words(ProcessGroup& group, std::int64_t* words, std::size_t count, ReduceOp op) {
  on_reachable_words(group, words, count, [&](auto buffer) {
    if constexpr (std::is_pointer_v<decltype(buffer)>) {
      group.all_reduce(buffer, count, op);
    } else {
      group.all_reduce(buffer, op);
    }
  });
}

void broadcast_words(ProcessGroup& group, std::int64_t* words, std::size_t count, int root) {
  on_reachable_words(group, words, count, [&](auto buffer) {
    if constexpr (std::is_pointer_v<decltype(buffer)>) {
      group.broadcast(buffer, count, root);
    } else {
      group.broadcast(buffer, root);
    }
  });
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
