// The multi-layer perceptron fsdp-train trains, written by hand: each layer's matrix products are
// GEMMs through Kokkos Kernels (models/gemm.hpp), the rest Kokkos kernels on fsdp::ExecutionSpace
// over Views in fsdp::MemorySpace (the GPU in a CUDA build of Kokkos, host memory in a Serial or
// OpenMP build), taking the layer's full parameters as flat Views (what a gathered unit's
// ShardedParameter::full() returns). No autograd: the activations backward needs are kept in the
// caller's buffers.
//
// A sharded run sums a gradient over each rank's rows and then over the ranks, an unsharded one
// over all rows at once, and the BLAS blocks its sums by size: the two agree to round-off, which
// is what the --check tolerance allows (fsdp_train::check_tolerance).
#pragma once

#include <Kokkos_Core.hpp>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "fsdp/core/device_math.hpp"
#include "fsdp/core/dtype.hpp"
#include "fsdp/core/memory_space.hpp"
#include "fsdp/shard/parameter_info.hpp"
#include "models/gemm.hpp"
#include "models/half_parameter.hpp"
#include "models/loss.hpp"

namespace fsdp_models {

// widths = {input features, hidden..., classes}; layer l maps widths[l] -> widths[l + 1] with
// weight [widths[l + 1], widths[l]] (row-major, PyTorch's Linear layout) and bias
// [widths[l + 1]], ReLU after every layer but the last. Each layer is one unit "layer<l>".
struct MlpShape {
  std::vector<std::int64_t> widths;

  std::size_t layers() const { return widths.size() - 1; }
  std::int64_t in(std::size_t l) const { return widths[l]; }
  std::int64_t out(std::size_t l) const { return widths[l + 1]; }
  static std::string unit(std::size_t l) { return "layer" + std::to_string(l); }
  static std::string weight(std::size_t l) { return unit(l) + ".weight"; }
  static std::string bias(std::size_t l) { return unit(l) + ".bias"; }

  std::vector<fsdp::ParameterInfo> parameters(fsdp::DType dtype) const {
    std::vector<fsdp::ParameterInfo> list;
    for (std::size_t l = 0; l < layers(); ++l) {
      list.push_back({weight(l), {out(l), in(l)}, dtype, unit(l), false});
      list.push_back({bias(l), {out(l)}, dtype, unit(l), false});
    }
    return list;
  }
  std::int64_t parameter_count() const {
    std::int64_t count = 0;
    for (std::size_t l = 0; l < layers(); ++l) {
      count += out(l) * in(l) + out(l);
    }
    return count;
  }
};

// out = in * weight^T + bias for the first `rows` rows; then max(0, .) when relu. The product is
// one GEMM; the bias is written first so that the GEMM adds onto it (beta = 1).
template <class T, class ParameterView>
void layer_forward(const ParameterView& weight, const ParameterView& bias, const Matrix<T>& in,
                   const Matrix<T>& out, std::int64_t rows, bool relu) {
  static_assert(kParameterRead<ParameterView, T>,
                "layer_forward takes flat Views of T that fsdp::ExecutionSpace can access, or "
                "HalfParameters");
  const auto inputs = static_cast<std::int64_t>(in.extent(1));
  const auto outputs = static_cast<std::int64_t>(out.extent(1));
  const fsdp::ExecutionSpace space;
  Kokkos::parallel_for(
      "fsdp_models::layer_forward_bias", fsdp::device_range(space, 0, rows),
      KOKKOS_LAMBDA(const std::size_t r) {
        for (std::int64_t o = 0; o < outputs; ++o) {
          out(r, o) = bias(o);
        }
      });
  weight_gemm(T(1), leading_rows(in, rows), weight, outputs, inputs, Op::transpose, T(1),
              leading_rows(out, rows));
  if (relu) {
    Kokkos::parallel_for(
        "fsdp_models::layer_forward_relu", fsdp::device_range(space, 0, rows),
        KOKKOS_LAMBDA(const std::size_t r) {
          for (std::int64_t o = 0; o < outputs; ++o) {
            out(r, o) = out(r, o) < T(0) ? T(0) : out(r, o);
          }
        });
  }
  space.fence();
}

// delta = dLoss / d(layer output before its activation), [rows, outputs]. Adds
// weight_grad += delta^T * in (weight_grad_gemm) and bias_grad[o] += sum_r delta[r, o] (one kernel
// thread per output, summing over rows in order); an empty gradient View (a frozen parameter)
// is left out. When delta_in is given, writes
// delta_in = delta * weight (one GEMM), masked by the ReLU that produced `in` (in[r, i] > 0):
// the previous layer's delta.
template <class T, class ParameterView, class GradientView>
void layer_backward(const ParameterView& weight, const GradientView& weight_grad,
                    const GradientView& bias_grad, const Matrix<T>& in, const Matrix<T>& delta,
                    const Matrix<T>* delta_in, std::int64_t rows) {
  static_assert(kParameterRead<ParameterView, T> && kKernelFlatView<GradientView, T>,
                "layer_backward takes flat Views of T that fsdp::ExecutionSpace can access (the "
                "weight may be a HalfParameter)");
  const auto inputs = static_cast<std::int64_t>(in.extent(1));
  const auto outputs = static_cast<std::int64_t>(delta.extent(1));
  const fsdp::ExecutionSpace space;
  if (weight_grad.size() > 0) {  // empty: a frozen weight, whose gradient nobody needs
    weight_grad_gemm(weight, leading_rows(delta, rows), leading_rows(in, rows),
                     as_matrix(weight_grad, outputs, inputs));
  }
  if (bias_grad.size() > 0) {
    Kokkos::parallel_for(
        "fsdp_models::layer_backward_bias", fsdp::device_range(space, 0, outputs),
        KOKKOS_LAMBDA(const std::size_t o) {
          T gb = T(0);
          for (std::int64_t r = 0; r < rows; ++r) {
            gb += delta(r, o);
          }
          bias_grad(o) += gb;
        });
  }
  if (delta_in != nullptr) {
    const Matrix<T> previous = *delta_in;
    weight_gemm(T(1), leading_rows(delta, rows), weight, outputs, inputs, Op::none, T(0),
                leading_rows(previous, rows));
    Kokkos::parallel_for(
        "fsdp_models::layer_backward_relu", fsdp::device_range(space, 0, rows),
        KOKKOS_LAMBDA(const std::size_t r) {
          for (std::int64_t i = 0; i < inputs; ++i) {
            if (!(in(r, i) > T(0))) {
              previous(r, i) = T(0);
            }
          }
        });
  }
  space.fence();
}

// layer_forward and layer_backward of layer l of `shape` inside its unit's open scope (an
// fsdp::Runtime's, or anything with full(name)): the parameters are read with half() through
// scratch where the scope's unit is gathered in 16 bits (models/half_parameter.hpp), else with
// full(). The gradients are the caller's (a frozen parameter's: an empty View).
template <class T, class Scope>
void layer_forward_in(Scope& scope, std::size_t l, WideningScratch<T>& scratch, const Matrix<T>& in,
                      const Matrix<T>& out, std::int64_t rows, bool relu) {
  const std::string weight = MlpShape::weight(l), bias = MlpShape::bias(l);
  if (gathers_16_bit(scope)) {
    layer_forward<T>(half_parameter<T>(scope, weight, scratch),
                     half_parameter<T>(scope, bias, scratch), in, out, rows, relu);
  } else {
    layer_forward<T>(scope.full(weight), scope.full(bias), in, out, rows, relu);
  }
}

template <class T, class Scope, class GradientView>
void layer_backward_in(Scope& scope, std::size_t l, WideningScratch<T>& scratch,
                       const GradientView& weight_grad, const GradientView& bias_grad,
                       const Matrix<T>& in, const Matrix<T>& delta, const Matrix<T>* delta_in,
                       std::int64_t rows) {
  const std::string weight = MlpShape::weight(l);
  if (gathers_16_bit(scope)) {
    layer_backward<T>(half_parameter<T>(scope, weight, scratch), weight_grad, bias_grad, in, delta,
                      delta_in, rows);
  } else {
    layer_backward<T>(scope.full(weight), weight_grad, bias_grad, in, delta, delta_in, rows);
  }
}

}  // namespace fsdp_models
