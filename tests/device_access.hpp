// Tests compute what they expect on the host; fsdp's buffers live in fsdp::MemorySpace (the GPU
// in a CUDA build). These helpers move values across and copy nothing when MemorySpace is host
// memory, so the host suite runs as before and a CUDA build never reads device memory on the host.
#pragma once

#include <Kokkos_Core.hpp>
#include <type_traits>
#include <vector>

#include "fsdp/core/half_conversion.hpp"
#include "fsdp/core/memory_space.hpp"
#include "fsdp/unit/gradient_piece.hpp"

namespace fsdp::test {

// A copy of values in fsdp::MemorySpace, for the entry points that take pointers there
// (init_from_full, init_from_root).
template <class T>
DeviceView<T> to_device(const std::vector<T>& values) {
  DeviceView<T> out(Kokkos::view_alloc(Kokkos::WithoutInitializing, "fsdp::test::to_device"),
                    values.size());
  Kokkos::deep_copy(out, host_view(values.data(), values.size()));
  return out;
}

// What a View holds, readable and writable on the host: the View itself when it is in host
// memory, else a host copy. Host code that writes into it hands it back with to_view.
template <class View>
auto on_host(const View& view) {
  return Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), view);
}

// Writes what host code put into on_host(view) back into view (nothing when they are one).
template <class View, class HostView>
void to_view(const View& view, const HostView& host) {
  Kokkos::deep_copy(view, host);
}

// A gradient piece's values on the host, widened when it is kept in bfloat16.
template <class T>
std::vector<T> values_of(const GradientPiece<T>& piece) {
  std::vector<T> values;
  piece.visit([&](const auto& grad) {
    if constexpr (std::is_same_v<std::decay_t<decltype(grad)>, Bfloat16Values<T>>) {
      const auto bits = on_host(grad.bits());
      for (std::size_t i = 0; i < bits.size(); ++i) {
        values.push_back(static_cast<T>(half::from_bfloat16_bits(bits(i))));
      }
    } else {
      const auto host = on_host(grad);
      values.assign(host.data(), host.data() + host.size());
    }
  });
  return values;
}

}  // namespace fsdp::test
