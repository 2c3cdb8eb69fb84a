#include "models/gemm_rate.hpp"

#include <Kokkos_Core.hpp>
#include <algorithm>
#include <chrono>

#include "models/gemm.hpp"

namespace fsdp_models {

template <class T>
GemmRate measure_gemm_rate(std::int64_t n, int repeats, bool warm_up) {
  Matrix<T> a("gemm_rate_a", n, n), b("gemm_rate_b", n, n), c("gemm_rate_c", n, n);
  Kokkos::deep_copy(a, T(0.5));
  Kokkos::deep_copy(b, T(0.25));
  const fsdp::ExecutionSpace space;
  double best = 0, total = 0;
  for (int i = warm_up ? 0 : 1; i <= repeats; ++i) {
    const auto start = std::chrono::steady_clock::now();
    gemm(Op::none, Op::none, T(1), a, b, T(0), c);
    space.fence();
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (i > 0 && seconds > 0) {  // the first product warms the caches and the BLAS's buffers
      best = std::max(best, 2.0 * static_cast<double>(n) * static_cast<double>(n) *
                                static_cast<double>(n) / seconds);
      total += seconds;
    }
  }
  const double flops =
      2.0 * static_cast<double>(n) * static_cast<double>(n) * static_cast<double>(n) * repeats;
  return GemmRate{n, repeats, best, flops, total};
}

template GemmRate measure_gemm_rate<float>(std::int64_t, int, bool);
template GemmRate measure_gemm_rate<double>(std::int64_t, int, bool);

}  // namespace fsdp_models
