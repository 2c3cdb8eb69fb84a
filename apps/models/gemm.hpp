// Matrix products of the models fsdp-train and fsdp-bench run, through Kokkos Kernels
// (KokkosBlas::gemm): an optimised BLAS on the host (OpenBLAS when Debian's libopenblas0 provides
// libblas.so.3), cuBLAS in a CUDA build with the cuBLAS TPL. Every operand is a row-major
// (LayoutRight) rank-2 View where fsdp::ExecutionSpace runs; a flat parameter (what
// ShardedParameter::full() and grad() return) is seen as a matrix through as_matrix.
#pragma once

#include <KokkosBlas3_gemm.hpp>
#include <Kokkos_Core.hpp>
#include <cstdint>
#include <type_traits>
#include <utility>

#include "fsdp/core/memory_space.hpp"

namespace fsdp_models {

// A row-major matrix where the kernels run: a batch of rows (activations, deltas), or a flat
// parameter seen as [rows, columns].
template <class T>
using Matrix = Kokkos::View<T**, Kokkos::LayoutRight, fsdp::MemorySpace>;
template <class T>
using MatrixRef = Kokkos::View<T**, Kokkos::LayoutRight, fsdp::MemorySpace,
                               Kokkos::MemoryTraits<Kokkos::Unmanaged>>;

// True for a flat View of T the kernels can read and write: what ShardedParameter<T>::full() and
// grad() return, whichever memory space the library keeps them in.
template <class View, class T>
inline constexpr bool kKernelFlatView =
    Kokkos::is_view<View>::value&& static_cast<int>(View::rank) == 1 &&
    std::is_same_v<typename View::non_const_value_type, T>&& Kokkos::SpaceAccessibility<
        fsdp::ExecutionSpace, typename View::memory_space>::accessible;

// Whether an operand is used as it is or transposed.
enum class Op { none, transpose };

// The flat View `flat` (at least rows * columns elements from its start) as a row-major
// [rows, columns] matrix, without a copy. T may be const.
template <class FlatView>
auto as_matrix(const FlatView& flat, std::int64_t rows, std::int64_t columns) {
  static_assert(Kokkos::is_view<FlatView>::value && static_cast<int>(FlatView::rank) == 1,
                "as_matrix takes a flat View");
  using Value = typename FlatView::value_type;
  return MatrixRef<Value>(flat.data(), static_cast<std::size_t>(rows),
                          static_cast<std::size_t>(columns));
}

// The first `rows` rows of a row-major matrix (a batch buffer whose last batch is shorter).
template <class MatrixView>
auto leading_rows(const MatrixView& m, std::int64_t rows) {
  return Kokkos::subview(m, std::make_pair(std::size_t{0}, static_cast<std::size_t>(rows)),
                         Kokkos::ALL);
}

// C = alpha * op(A) * op(B) + beta * C (beta = 0 overwrites C, NaNs included, as BLAS does).
// Sizes must agree: [m, k] x [k, n] -> [m, n] after op. An empty product (k = 0) scales C by beta
// here, since KokkosBlas::gemm returns without touching C then.
template <class T, class AView, class BView, class CView>
void gemm(Op op_a, Op op_b, T alpha, const AView& a, const BView& b, T beta, const CView& c) {
  static_assert(std::is_same_v<typename AView::array_layout, Kokkos::LayoutRight> &&
                    std::is_same_v<typename BView::array_layout, Kokkos::LayoutRight> &&
                    std::is_same_v<typename CView::array_layout, Kokkos::LayoutRight>,
                "fsdp_models::gemm takes row-major (LayoutRight) matrices");
  static_assert(std::is_same_v<typename CView::non_const_value_type, T>,
                "fsdp_models::gemm writes a matrix of T");
  const std::size_t k = op_a == Op::none ? a.extent(1) : a.extent(0);
  if (k == 0) {
    const MatrixRef<T> C(c.data(), c.extent(0), c.extent(1));
    Kokkos::parallel_for(
        "fsdp_models::gemm_scale",
        fsdp::device_range(fsdp::ExecutionSpace(), 0, static_cast<std::int64_t>(C.extent(0))),
        KOKKOS_LAMBDA(const std::size_t r) {
          for (std::size_t j = 0; j < C.extent(1); ++j) {
            C(r, j) = beta == T(0) ? T(0) : beta * C(r, j);
          }
        });
    return;
  }
  // KokkosBlas::gemm takes the leading dimensions from the Views' strides, so row ranges of a
  // larger buffer (leading_rows) are passed as they are.
  KokkosBlas::gemm(op_a == Op::none ? "N" : "T", op_b == Op::none ? "N" : "T", alpha, a, b, beta,
                   c);
}

}  // namespace fsdp_models
