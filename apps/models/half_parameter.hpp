// A parameter gathered in 16 bits (mixed precision: ShardedParameter::half(), a scope's half()),
// as the models read it without a float copy of it: an element read widens that element, and a
// matrix product with it (weight_gemm), and its gradient's (weight_grad_gemm), multiply in 16
// bits where oneDNN has a bf16 matmul for the CPU (models/onednn_gemm.hpp: the activations and
// deltas rounded to bf16 a panel at a time), and
// otherwise widens the weight a panel of rows at a time into a small scratch buffer, since the
// host BLAS has no 16-bit GEMM here (Debian's OpenBLAS 0.3.21 is built without sbgemm). The
// transient memory is the scratch's, a fixed 2 x 1 MiB per model, instead of a float copy of every
// parameter of the unit that computes.
#pragma once

#include <Kokkos_Core.hpp>
#include <algorithm>
#include <cstdint>
#include <string>
#include <type_traits>
#include <utility>

#include "fsdp/core/dtype.hpp"
#include "fsdp/core/error.hpp"
#include "fsdp/core/half_conversion.hpp"
#include "fsdp/core/memory_space.hpp"
#include "models/gemm.hpp"
#include "models/onednn_gemm.hpp"

namespace fsdp_models {

// The float panels weight_gemm works in: rows of a weight widened, and columns of an activation
// matrix made contiguous. Allocated once by the model that owns it and counted in its activation
// bytes.
template <class T>
struct WideningScratch {
  static constexpr std::int64_t kPanelElements = std::int64_t{1} << 18;
  fsdp::DeviceView<T> weight_rows{"fsdp_models::widened_weight_rows",
                                  static_cast<std::size_t>(kPanelElements)};
  fsdp::DeviceView<T> columns{"fsdp_models::activation_columns",
                              static_cast<std::size_t>(kPanelElements)};
  std::int64_t bytes() const { return 2 * kPanelElements * static_cast<std::int64_t>(sizeof(T)); }
  // The same two panels as bfloat16 elements, for oneDNN's products (models/onednn_gemm.hpp).
  static constexpr std::int64_t kBf16PanelElements =
      kPanelElements * static_cast<std::int64_t>(sizeof(T) / 2);
  std::uint16_t* bf16_columns() const { return reinterpret_cast<std::uint16_t*>(columns.data()); }
  std::uint16_t* bf16_weight_rows() const {
    return reinterpret_cast<std::uint16_t*>(weight_rows.data());
  }
};

// A flat 16-bit parameter: parameter(i) is element i widened to T. Copied into kernels; scratch
// is only used on the host, by weight_gemm.
template <class T>
struct HalfParameter {
  fsdp::DeviceView<std::uint16_t> bits;
  bool bf16 = true;  // else fp16
  WideningScratch<T>* scratch = nullptr;

  KOKKOS_INLINE_FUNCTION T operator()(std::size_t i) const {
    return static_cast<T>(bf16 ? fsdp::half::from_bfloat16_bits(bits(i))
                               : fsdp::half::from_float16_bits(bits(i)));
  }
  std::size_t size() const { return bits.size(); }
};

template <class P>
inline constexpr bool kIsHalfParameter = false;
template <class T>
inline constexpr bool kIsHalfParameter<HalfParameter<T>> = true;

// What the models take as a parameter: a flat View of T (full()) or a HalfParameter<T>.
template <class P, class T, bool = kIsHalfParameter<std::decay_t<P>>>
inline constexpr bool kParameterRead = std::is_same_v<std::decay_t<P>, HalfParameter<T>>;
template <class P, class T>
inline constexpr bool kParameterRead<P, T, false> = kKernelFlatView<P, T>;

// The gathered 16-bit parameter `name` of an open scope (fsdp::Runtime<T>::Scope), read through
// scratch; its unit's param_dtype says bf16 or fp16.
template <class T, class Scope>
HalfParameter<T> half_parameter(Scope& scope, const std::string& name,
                                WideningScratch<T>& scratch) {
  return HalfParameter<T>{scope.half(name), scope.unit().param_dtype() == fsdp::DType::bf16,
                          &scratch};
}

// Whether a scope hands out 16-bit parameters: a scope with half() (fsdp::Runtime's) of a unit
// gathered in bf16 or fp16. Scopes without half() (the C API's, as tests drive them) give floats.
template <class Scope, class = void>
inline constexpr bool kHasHalf = false;
template <class Scope>
inline constexpr bool
    kHasHalf<Scope, std::void_t<decltype(std::declval<Scope&>().half(std::string()))>> = true;

template <class Scope>
bool gathers_16_bit(Scope& scope) {
  if constexpr (kHasHalf<Scope>) {
    return scope.unit().gathers_in_half();
  } else {
    return false;
  }
}

// Whether the products of a 16-bit weight of T can go to oneDNN's bf16 matmul at all (floats in
// host memory), and whether those of w do: a bfloat16 weight, where onednn_bf16_gemm_available().
// weight_gemm and weight_grad_gemm decide by it alike.
template <class T>
inline constexpr bool kBf16ProductsPossible = std::is_same_v<T, float>&&
    Kokkos::SpaceAccessibility<Kokkos::HostSpace, fsdp::MemorySpace>::accessible;
template <class T>
bool multiplies_in_bf16(const HalfParameter<T>& w) {
  return kBf16ProductsPossible<T> && w.bf16 && w.scratch != nullptr && onednn_bf16_gemm_available();
}

// C = alpha * A * op(W) + beta * C, with the flat parameter W seen as the row-major matrix
// [w_rows, w_columns]. A View of T is multiplied as it is (one GEMM). A bfloat16 HalfParameter of
// floats on the host goes to oneDNN's bf16 matmul where onednn_bf16_gemm_available() (A rounded to
// bf16, fp32 accumulation: not the widened product's bits). Otherwise a HalfParameter is
// widened a panel of its rows at a time, each panel one GEMM:
//   op(W) = W^T: the panel gives a block of C's columns, computed in the scratch and copied back;
//   op(W) = W:   the panel pairs with the same block of A's columns, copied into the scratch.
// Panels keep both scratch panels within WideningScratch::kPanelElements.
template <class T, class AView, class Weight, class CView>
void weight_gemm(T alpha, const AView& a, const Weight& w, std::int64_t w_rows,
                 std::int64_t w_columns, Op op_w, T beta, const CView& c) {
  if constexpr (!kIsHalfParameter<Weight>) {
    gemm(Op::none, op_w, alpha, a, as_matrix(w, w_rows, w_columns), beta, c);
  } else {
    static_assert(std::is_same_v<Weight, HalfParameter<T>>, "weight_gemm: a HalfParameter of T");
    fsdp::require(w.scratch != nullptr, "weight_gemm: a 16-bit parameter without its scratch");
    WideningScratch<T>& scratch = *w.scratch;
    const auto m = static_cast<std::int64_t>(c.extent(0));
    if constexpr (kBf16ProductsPossible<T>) {
      if (w_rows > 0 && m > 0 && multiplies_in_bf16(w)) {
        // A 16-bit GEMM: the activations rounded to bf16 a panel of rows at a time into the
        // scratch's column panel, the weight read as it was gathered.
        fsdp::ExecutionSpace().fence();  // kernels may still be writing A or C
        onednn_bf16_weight_gemm(alpha, a.data(), m, static_cast<std::int64_t>(a.stride(0)),
                                w.bits.data(), w_rows, w_columns, op_w == Op::transpose, beta,
                                c.data(), static_cast<std::int64_t>(c.stride(0)),
                                scratch.bf16_columns(), WideningScratch<T>::kBf16PanelElements);
        return;
      }
    }
    if (w_rows == 0 || m == 0) {  // nothing to widen; gemm scales C by beta (k = 0) or has none
      gemm(Op::none, op_w, alpha, a, as_matrix(scratch.weight_rows, w_rows, w_columns), beta, c);
      return;
    }
    const std::int64_t budget = WideningScratch<T>::kPanelElements;
    const std::int64_t panel =
        std::clamp<std::int64_t>(budget / std::max<std::int64_t>({w_columns, m, 1}), 1, w_rows);
    const fsdp::ExecutionSpace space;
    for (std::int64_t first = 0; first < w_rows; first += panel) {
      const std::int64_t count = std::min(panel, w_rows - first);
      const auto widened = scratch.weight_rows;
      const std::int64_t offset = first * w_columns;
      Kokkos::parallel_for(
          "fsdp_models::widen_weight_rows", fsdp::device_range(space, 0, count * w_columns),
          KOKKOS_LAMBDA(const std::size_t i) { widened(i) = w(offset + i); });
      const auto rows_of_w = as_matrix(widened, count, w_columns);
      const auto block = as_matrix(scratch.columns, m, count);
      if (op_w == Op::transpose) {
        if (beta != T(0)) {
          Kokkos::parallel_for(
              "fsdp_models::copy_columns_out", fsdp::device_range(space, 0, m),
              KOKKOS_LAMBDA(const std::size_t r) {
                for (std::int64_t j = 0; j < count; ++j) {
                  block(r, j) = c(r, first + j);
                }
              });
        }
        gemm(Op::none, Op::transpose, alpha, a, rows_of_w, beta, block);
        Kokkos::parallel_for(
            "fsdp_models::copy_columns_in", fsdp::device_range(space, 0, m),
            KOKKOS_LAMBDA(const std::size_t r) {
              for (std::int64_t j = 0; j < count; ++j) {
                c(r, first + j) = block(r, j);
              }
            });
      } else {
        Kokkos::parallel_for(
            "fsdp_models::copy_columns_out", fsdp::device_range(space, 0, m),
            KOKKOS_LAMBDA(const std::size_t r) {
              for (std::int64_t j = 0; j < count; ++j) {
                block(r, j) = a(r, first + j);
              }
            });
        gemm(Op::none, Op::none, alpha, block, rows_of_w, first == 0 ? beta : T(1), c);
      }
      space.fence();  // the scratch is overwritten by the next panel
    }
  }
}

// grad += delta^T * in: the gradient [outputs, inputs] of a linear layer's weight, from the
// deltas [rows, outputs] and inputs [rows, inputs] of its rows. In bf16 on oneDNN (both rounded
// to bf16 a panel of rows at a time into the weight's scratch, fp32 accumulation) where
// weight_gemm multiplies that weight in bf16: a bf16 HalfParameter of floats on the host, where
// onednn_bf16_gemm_available(). Otherwise one GEMM of T.
template <class Weight, class DeltaView, class InView, class GradView>
void weight_grad_gemm(const Weight& weight, const DeltaView& delta, const InView& in,
                      const GradView& grad) {
  using T = typename GradView::non_const_value_type;
  if constexpr (kIsHalfParameter<Weight> && kBf16ProductsPossible<T>) {
    const auto rows = static_cast<std::int64_t>(delta.extent(0));
    if (rows > 0 && grad.size() > 0 && multiplies_in_bf16(weight)) {
      fsdp::ExecutionSpace().fence();  // kernels may still be writing the operands
      WideningScratch<T>& scratch = *weight.scratch;
      onednn_bf16_gradient_gemm(delta.data(), rows, static_cast<std::int64_t>(delta.extent(1)),
                                static_cast<std::int64_t>(delta.stride(0)), in.data(),
                                static_cast<std::int64_t>(in.extent(1)),
                                static_cast<std::int64_t>(in.stride(0)), grad.data(),
                                static_cast<std::int64_t>(grad.stride(0)), scratch.bf16_columns(),
                                scratch.bf16_weight_rows(), WideningScratch<T>::kBf16PanelElements);
      return;
    }
  }
  gemm(Op::transpose, Op::none, T(1), delta, in, T(1), grad);
}

}  // namespace fsdp_models
