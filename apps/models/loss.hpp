// Softmax cross-entropy over the rows of a logits matrix: the loss of the MLP's classes and of
// the transformer's next byte alike.
#pragma once

#include <Kokkos_Core.hpp>
#include <cstdint>

#include "fsdp/core/device_math.hpp"
#include "fsdp/core/memory_space.hpp"
#include "models/gemm.hpp"

namespace fsdp_models {

// Class numbers of a batch's rows (the MLP's labels, the transformer's next bytes), where the
// kernels run.
using Labels = Kokkos::View<std::int64_t*, fsdp::MemorySpace>;

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
      "fsdp_models::softmax_cross_entropy", fsdp::device_range(fsdp::ExecutionSpace(), 0, rows),
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

}  // namespace fsdp_models
