// fsdp-train's multi-layer perceptron (models/mlp.hpp) as a TrainedModel: one unit per layer,
// activations and deltas kept between forward and backward.
#pragma once

#include <Kokkos_Core.hpp>
#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "fsdp/core/error.hpp"
#include "hash_uniform.hpp"
#include "models/mlp.hpp"
#include "trained_model.hpp"

namespace fsdp_train {

template <class T>
class MlpBatch : public Batch<T> {
 public:
  MlpBatch(fsdp_models::MlpShape shape, std::int64_t capacity) : shape_(std::move(shape)) {
    const auto rows = static_cast<std::size_t>(std::max<std::int64_t>(capacity, 1));
    for (std::size_t l = 0; l <= shape_.layers(); ++l) {
      activations_.emplace_back("activations", rows, static_cast<std::size_t>(shape_.widths[l]));
    }
    for (std::size_t l = 0; l < shape_.layers(); ++l) {
      deltas_.emplace_back("deltas", rows, static_cast<std::size_t>(shape_.out(l)));
    }
    labels_ = fsdp_models::Labels("labels", rows);
    input_on_host_ = Kokkos::create_mirror_view(activations_[0]);
    labels_on_host_ = Kokkos::create_mirror_view(labels_);
  }

  void load(const Dataset& data, const std::vector<std::int64_t>& indices) override {
    fsdp::require(indices.size() <= activations_[0].extent(0),
                  "fsdp-train: batch larger than the activation buffers");
    for (std::size_t r = 0; r < indices.size(); ++r) {
      const auto i = static_cast<std::size_t>(indices[r]);
      for (std::int64_t j = 0; j < data.dim; ++j) {
        input_on_host_(r, static_cast<std::size_t>(j)) =
            static_cast<T>(data.features[i * static_cast<std::size_t>(data.dim) + j]);
      }
      labels_on_host_(r) = data.labels[i];
    }
    const std::pair<std::size_t, std::size_t> rows(0, indices.size());
    Kokkos::deep_copy(Kokkos::subview(activations_[0], rows, Kokkos::ALL),
                      Kokkos::subview(input_on_host_, rows, Kokkos::ALL));
    Kokkos::deep_copy(Kokkos::subview(labels_, rows), Kokkos::subview(labels_on_host_, rows));
  }

  // Forward of every layer in order, each inside its unit's forward scope (which waits for the
  // unit's gather, already in flight when prefetch is on, and releases it when it closes); the
  // loss; backward in reverse order, each inside its unit's backward scope, which gathers again
  // and reduce-scatters the gradients written here when it closes.
  fsdp_models::LossSums train(fsdp::Runtime<T>& runtime, std::int64_t rows,
                              double loss_scale) override {
    forward(runtime, rows);
    const fsdp_models::LossSums sums = fsdp_models::softmax_cross_entropy<T>(
        activations_.back(), labels_, rows, &deltas_.back(), rows, loss_scale);
    for (std::size_t l = shape_.layers(); l-- > 0;) {
      auto scope = runtime.backward(fsdp_models::MlpShape::unit(l));
      // A frozen parameter's gradient is an empty View, which layer_backward leaves out.
      const auto grad = [&scope](const std::string& name) {
        return scope.trainable(name) ? scope.grad(name) : typename fsdp::DeviceView<T>();
      };
      fsdp_models::layer_backward_in<T>(scope, l, scratch_, grad(fsdp_models::MlpShape::weight(l)),
                                        grad(fsdp_models::MlpShape::bias(l)), activations_[l],
                                        deltas_[l], l > 0 ? &deltas_[l - 1] : nullptr, rows);
      scope.close();
    }
    return sums;
  }

  fsdp_models::LossSums evaluate(fsdp::Runtime<T>& runtime, std::int64_t rows) override {
    forward(runtime, rows);
    return fsdp_models::softmax_cross_entropy<T>(activations_.back(), labels_, rows, nullptr, 1);
  }

  std::int64_t activation_bytes() const override {
    std::int64_t bytes =
        static_cast<std::int64_t>(labels_.span() * sizeof(std::int64_t)) + scratch_.bytes();
    for (const auto* list : {&activations_, &deltas_}) {
      for (const auto& m : *list) {
        bytes += static_cast<std::int64_t>(m.span() * sizeof(T));
      }
    }
    return bytes;
  }

 private:
  void forward(fsdp::Runtime<T>& runtime, std::int64_t rows) {
    for (std::size_t l = 0; l < shape_.layers(); ++l) {
      auto scope = runtime.forward(fsdp_models::MlpShape::unit(l));
      fsdp_models::layer_forward_in<T>(scope, l, scratch_, activations_[l], activations_[l + 1],
                                       rows, l + 1 < shape_.layers());
      scope.close();
    }
  }

  fsdp_models::MlpShape shape_;
  std::vector<fsdp_models::Matrix<T>> activations_;  // [0]: the input; [l + 1]: layer l's output
  std::vector<fsdp_models::Matrix<T>> deltas_;       // [l]: dLoss / d(layer l's output before ReLU)
  fsdp_models::Labels labels_;
  typename fsdp_models::Matrix<T>::HostMirror input_on_host_;
  typename fsdp_models::Labels::HostMirror labels_on_host_;
  fsdp_models::WideningScratch<T> scratch_;  // 16-bit parameters' panels
};

template <class T>
class TrainedMlp : public TrainedModel<T> {
 public:
  explicit TrainedMlp(fsdp_models::MlpShape shape) : shape_(std::move(shape)) {}

  std::vector<fsdp::ParameterInfo> parameters(fsdp::DType dtype) const override {
    return shape_.parameters(dtype);
  }
  std::vector<std::string> order() const override {
    std::vector<std::string> units;
    for (std::size_t l = 0; l < shape_.layers(); ++l) {
      units.push_back(fsdp_models::MlpShape::unit(l));
    }
    return units;
  }
  // PyTorch's nn.Linear default: weight and bias uniform in +-1/sqrt(fan_in), from a hash of
  // (seed, parameter, global element index), so a rank fills its own piece without the rest: one
  // kernel per parameter, writing the piece where it lives.
  void initialize(fsdp::ShardedModel<T>& model, std::uint64_t seed) const override {
    const fsdp::ExecutionSpace space;
    for (std::size_t l = 0; l < shape_.layers(); ++l) {
      const double bound = 1.0 / std::sqrt(static_cast<double>(shape_.in(l)));
      for (int which = 0; which < 2; ++which) {
        const std::uint64_t tag = 100 + 2 * l + static_cast<std::uint64_t>(which);
        const fsdp::ShardedParameter<T>& parameter = model.parameter(
            which == 0 ? fsdp_models::MlpShape::weight(l) : fsdp_models::MlpShape::bias(l));
        const auto piece = parameter.shard();
        static_assert(fsdp_models::kKernelFlatView<std::decay_t<decltype(piece)>, T>,
                      "initialize writes the pieces in a kernel on fsdp::ExecutionSpace");
        const std::int64_t first = parameter.shard_offset();
        Kokkos::parallel_for(
            "fsdp_train::initialize", fsdp::device_range(space, 0, parameter.shard_size()),
            KOKKOS_LAMBDA(const std::int64_t k) {
              const double u = hash_uniform(seed, tag, 0, static_cast<std::uint64_t>(first + k));
              piece(k) = static_cast<T>((2 * u - 1) * bound);
            });
      }
    }
    space.fence();
  }
  std::int64_t parameter_count() const override { return shape_.parameter_count(); }
  std::int64_t positions_per_sample() const override { return 1; }
  // 2 FLOPs per weight per sample forward, 4 backward (the weight and the input gradients).
  double flops_per_position() const override {
    double weights = 0;
    for (std::size_t l = 0; l < shape_.layers(); ++l) {
      weights += static_cast<double>(shape_.in(l)*shape_.out(l));
    }
    return 6 * weights;
  }
  std::string description() const override { return "MLP " + widths(); }
  std::string position_name() const override { return "sample"; }
  std::unique_ptr<Batch<T>> make_batch(std::int64_t capacity) const override {
    return std::make_unique<MlpBatch<T>>(shape_, capacity);
  }
  const fsdp_models::MlpShape& shape() const { return shape_; }
  std::string widths() const {
    std::string text;
    for (std::int64_t w : shape_.widths) {
      text += (text.empty() ? "" : "-") + std::to_string(w);
    }
    return text;
  }

 private:
  fsdp_models::MlpShape shape_;
};

}  // namespace fsdp_train
