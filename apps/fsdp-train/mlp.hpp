// The multi-layer perceptron fsdp-train trains, written by hand: each layer's forward and
// backward are Kokkos kernels on fsdp::ExecutionSpace over Views in fsdp::MemorySpace (the GPU in
// a CUDA build of Kokkos, host memory in a Serial or OpenMP build), taking the layer's full
// parameters as flat Views (what a gathered unit's ShardedParameter::full() returns). No
// autograd: the activations backward needs are kept in the caller's buffers.
//
// Inside each kernel the loops over a row's elements are sequential, so every sum is added in
// the same order on every backend and every world size (the --check comparison relies on it).
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

namespace fsdp_train {

// A batch of rows (activations, deltas), row-major, where the kernels run.
template <class T>
using Matrix = Kokkos::View<T**, Kokkos::LayoutRight, fsdp::MemorySpace>;
// Class numbers of a batch's rows, where the kernels run.
using Labels = Kokkos::View<std::int64_t*, fsdp::MemorySpace>;

// True for a flat View of T the kernels can read and write: what ShardedParameter<T>::full() and
// grad() return, whichever memory space the library keeps them in.
template <class View, class T>
inline constexpr bool kKernelFlatView =
    Kokkos::is_view<View>::value&& static_cast<int>(View::rank) == 1 &&
    std::is_same_v<typename View::non_const_value_type, T>&& Kokkos::SpaceAccessibility<
        fsdp::ExecutionSpace, typename View::memory_space>::accessible;

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

// out[r, o] = sum_i in[r, i] * weight[o, i] + bias[o] for r < rows; then max(0, .) when relu.
// One kernel thread per row.
template <class T, class ParameterView>
void layer_forward(const ParameterView& weight, const ParameterView& bias, const Matrix<T>& in,
                   const Matrix<T>& out, std::int64_t rows, bool relu) {
  static_assert(kKernelFlatView<ParameterView, T>,
                "layer_forward takes flat Views of T that fsdp::ExecutionSpace can access");
  const auto inputs = static_cast<std::int64_t>(in.extent(1));
  const auto outputs = static_cast<std::int64_t>(out.extent(1));
  const fsdp::ExecutionSpace space;
  Kokkos::parallel_for(
      "fsdp_train::layer_forward", fsdp::device_range(space, 0, rows),
      KOKKOS_LAMBDA(const std::size_t r) {
        for (std::int64_t o = 0; o < outputs; ++o) {
          T sum = bias(o);
          const T* w = &weight(static_cast<std::size_t>(o * inputs));
          for (std::int64_t i = 0; i < inputs; ++i) {
            sum += in(r, i) * w[i];
          }
          out(r, o) = relu && sum < T(0) ? T(0) : sum;
        }
      });
  space.fence();
}

// delta = dLoss / d(layer output before its activation), [rows, outputs]. Adds
// weight_grad[o, i] += sum_r delta[r, o] * in[r, i] and bias_grad[o] += sum_r delta[r, o] (one
// kernel thread per output, summing over rows in order). When delta_in is given, writes
// delta_in[r, i] = sum_o delta[r, o] * weight[o, i], masked by the ReLU that produced `in`
// (in[r, i] > 0): the previous layer's delta (one kernel thread per row).
template <class T, class ParameterView, class GradientView>
void layer_backward(const ParameterView& weight, const GradientView& weight_grad,
                    const GradientView& bias_grad, const Matrix<T>& in, const Matrix<T>& delta,
                    const Matrix<T>* delta_in, std::int64_t rows) {
  static_assert(kKernelFlatView<ParameterView, T> && kKernelFlatView<GradientView, T>,
                "layer_backward takes flat Views of T that fsdp::ExecutionSpace can access");
  const auto inputs = static_cast<std::int64_t>(in.extent(1));
  const auto outputs = static_cast<std::int64_t>(delta.extent(1));
  const fsdp::ExecutionSpace space;
  Kokkos::parallel_for(
      "fsdp_train::layer_backward_weights", fsdp::device_range(space, 0, outputs),
      KOKKOS_LAMBDA(const std::size_t o) {
        T* gw = &weight_grad(o * static_cast<std::size_t>(inputs));
        T gb = T(0);
        for (std::int64_t r = 0; r < rows; ++r) {
          const T d = delta(r, o);
          gb += d;
          for (std::int64_t i = 0; i < inputs; ++i) {
            gw[i] += d * in(r, i);
          }
        }
        bias_grad(o) += gb;
      });
  if (delta_in != nullptr) {
    const Matrix<T> previous = *delta_in;
    Kokkos::parallel_for(
        "fsdp_train::layer_backward_inputs", fsdp::device_range(space, 0, rows),
        KOKKOS_LAMBDA(const std::size_t r) {
          for (std::int64_t i = 0; i < inputs; ++i) {
            previous(r, i) = T(0);
          }
          for (std::int64_t o = 0; o < outputs; ++o) {
            const T d = delta(r, o);
            const T* w = &weight(static_cast<std::size_t>(o * inputs));
            for (std::int64_t i = 0; i < inputs; ++i) {
              previous(r, i) += d * w[i];
            }
          }
          for (std::int64_t i = 0; i < inputs; ++i) {
            if (!(in(r, i) > T(0))) {
              previous(r, i) = T(0);
            }
          }
        });
  }
  space.fence();
}

struct LossSums {
  double loss = 0;     // sum over rows of -log softmax(logits)[label]
  double correct = 0;  // rows whose largest logit is the label's
};

// Softmax cross-entropy of logits [rows, classes] against labels, one kernel thread per row; the
// sums over rows are a reduction (returned to the host). When delta is given it receives
// dLoss/dlogits of the mean loss over `scale_rows` rows: (softmax - onehot) / scale_rows, times
// loss_scale (dynamic loss scaling of 16-bit gradients).
template <class T>
LossSums softmax_cross_entropy(const Matrix<T>& logits, const Labels& labels, std::int64_t rows,
                               const Matrix<T>* delta, std::int64_t scale_rows,
                               double loss_scale = 1.0) {
  namespace math = fsdp::device_math;
  const auto classes = static_cast<std::int64_t>(logits.extent(1));
  const bool write_delta = delta != nullptr;
  const Matrix<T> gradient = write_delta ? *delta : Matrix<T>();
  const double scale = static_cast<double>(scale_rows) / loss_scale;
  LossSums sums;
  Kokkos::parallel_reduce(
      "fsdp_train::softmax_cross_entropy", fsdp::device_range(fsdp::ExecutionSpace(), 0, rows),
      KOKKOS_LAMBDA(const std::size_t r, double& loss, double& correct) {
        const std::int64_t label = labels(r);
        std::int64_t best = 0;
        T largest = logits(r, 0);
        for (std::int64_t c = 1; c < classes; ++c) {
          if (logits(r, c) > largest) {
            largest = logits(r, c);
            best = c;
          }
        }
        double total = 0;
        for (std::int64_t c = 0; c < classes; ++c) {
          total += math::exp(static_cast<double>(logits(r, c) - largest));
        }
        loss += math::log(total) - static_cast<double>(logits(r, label) - largest);
        correct += best == label ? 1 : 0;
        if (write_delta) {
          for (std::int64_t c = 0; c < classes; ++c) {
            const double p = math::exp(static_cast<double>(logits(r, c) - largest)) / total;
            gradient(r, c) = static_cast<T>((p - (c == label ? 1.0 : 0.0)) / scale);
          }
        }
      },
      sums.loss, sums.correct);
  return sums;
}

}  // namespace fsdp_train
