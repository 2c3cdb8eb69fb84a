#include "control_words.hpp"

#include <algorithm>

#include "fsdp/core/memory_space.hpp"

namespace fsdp::detail {
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

}  // namespace fsdp::detail
