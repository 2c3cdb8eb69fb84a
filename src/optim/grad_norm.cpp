#include "fsdp/optim/grad_norm.hpp"

#include <cmath>

namespace fsdp {
namespace {

// The sum of squares of a piece's values: a DeviceView<T> or Bfloat16Values<T>.
template <class Grad>
double sum_of_squares(const ExecutionSpace& space, const Grad& grad) {
  double sum = 0.0;
  Kokkos::parallel_reduce(
      "fsdp::grad_norm", device_range(space, 0, static_cast<std::int64_t>(grad.size())),
      KOKKOS_LAMBDA(std::size_t i, double& acc) {
        const double g = static_cast<double>(grad(i));
        acc += g * g;
      },
      sum);
  return sum;
}

template <class Grad, class T>
void scale_values(const ExecutionSpace& space, const Grad& grad, T scale) {
  Kokkos::parallel_for(
      "fsdp::clip_grad_norm", device_range(space, 0, static_cast<std::int64_t>(grad.size())),
      KOKKOS_LAMBDA(std::size_t i) { grad(i) *= scale; });
}

}  // namespace

template <class T>
double grad_norm(ShardedModel<T>& model) {
  model.wait_for_gradients();
  double local = 0.0;
  const bool counts_replicated = model.group().rank() == 0;
  for (std::size_t u = 0; u < model.unit_count(); ++u) {
    const ExecutionSpace& space = model.unit(u).execution_space();
    for (ShardedParameter<T>& p : model.unit(u).parameters()) {
      if (p.placement() == Placement::replicated && !counts_replicated) {
        continue;  // every rank holds it; count it once
      }
      // The real piece: padding is not part of it.
      local += p.grad_piece().visit([&](const auto& grad) { return sum_of_squares(space, grad); });
    }
  }
  model.group().all_reduce(Kokkos::DefaultHostExecutionSpace(), host_view(&local, 1),
                           ReduceOp::sum);
  return std::sqrt(local);
}

template <class T>
double clip_grad_norm(ShardedModel<T>& model, double max_norm) {
  require(max_norm > 0,
          [&] { return "clip_grad_norm needs max_norm > 0, got " + std::to_string(max_norm); });
  const double norm = grad_norm(model);
  const double coefficient = max_norm / (norm + 1e-6);
  if (coefficient < 1.0) {
    const T scale = static_cast<T>(coefficient);
    for (std::size_t u = 0; u < model.unit_count(); ++u) {
      const ExecutionSpace& space = model.unit(u).execution_space();
      for (ShardedParameter<T>& p : model.unit(u).parameters()) {
        p.grad_piece().visit([&](const auto& grad) { scale_values(space, grad, scale); });
      }
    }
    ExecutionSpace().fence();  // every unit's kernels: the step is done when it returns
  }
  return norm;
}

template double grad_norm(ShardedModel<float>&);
template double grad_norm(ShardedModel<double>&);
template double clip_grad_norm(ShardedModel<float>&, double);
template double clip_grad_norm(ShardedModel<double>&, double);

}  // namespace fsdp
