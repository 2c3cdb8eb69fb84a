#include "models/gemm_rate.hpp"

#include <Kokkos_Core.hpp>
#include <algorithm>
#include <chrono>

namespace fsdp_models {

template <class T>
GemmTimer<T>::GemmTimer(std::int64_t n, bool bf16_weights)
    : n_(n),
      a_("gemm_rate_a", n, n),
      b_("gemm_rate_b", bf16_weights ? 0 : n, bf16_weights ? 0 : n),  // bf16: b16_ instead
      c_("gemm_rate_c", n, n),
      bf16_weights_(bf16_weights) {
  Kokkos::deep_copy(a_, T(0.5));
  Kokkos::deep_copy(b_, T(0.25));
  if (bf16_weights_) {
    b16_ = fsdp::DeviceView<std::uint16_t>("gemm_rate_b16", static_cast<std::size_t>(n * n));
    Kokkos::deep_copy(b16_, fsdp::half::bfloat16_bits(0.25f));
    scratch_ = std::make_unique<WideningScratch<T>>();
  }
  fsdp::ExecutionSpace().fence();
}

template <class T>
GemmRate GemmTimer<T>::time(int repeats, bool warm_up) {
  const fsdp::ExecutionSpace space;
  const double n = static_cast<double>(n_);
  double best = 0, total = 0;
  for (int i = warm_up ? 0 : 1; i <= repeats; ++i) {
    const auto start = std::chrono::steady_clock::now();
    if (bf16_weights_) {
      weight_gemm(T(1), a_, HalfParameter<T>{b16_, true, scratch_.get()}, n_, n_, Op::none, T(0),
                  c_);
    } else {
      gemm(Op::none, Op::none, T(1), a_, b_, T(0), c_);
    }
    space.fence();
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (i > 0 && seconds > 0) {  // the first product warms the caches and the BLAS's buffers
      best = std::max(best, 2.0 * n * n * n / seconds);
      total += seconds;
    }
  }
  return GemmRate{n_, repeats, best, 2.0 * n * n * n * repeats, total};
}

template class GemmTimer<float>;
template class GemmTimer<double>;

}  // namespace fsdp_models
