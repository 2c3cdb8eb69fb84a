// fsdp-train's GPT-2 transformer (models/gpt.hpp) as a TrainedModel: units "embed" (wte, wpe),
// "h<l>" per block and "head" (ln_f, and wte again: the tied output head, a tied parameter of the
// runtime), trained on windows of bytes to predict each next byte.
#pragma once

#include <Kokkos_Core.hpp>
#include <cmath>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "fsdp/core/error.hpp"
#include "hash_uniform.hpp"
#include "models/gpt.hpp"
#include "models/gpt_passes.hpp"
#include "trained_model.hpp"

namespace fsdp_train {

template <class T>
class GptBatch : public Batch<T> {
 public:
  using Shape = fsdp_models::GptShape;

  GptBatch(const Shape& shape, bool checkpointing, std::int64_t capacity)
      : shape_(shape), passes_(shape, checkpointing, capacity) {
    tokens_on_host_ = Kokkos::create_mirror_view(passes_.tokens());
    targets_on_host_ = Kokkos::create_mirror_view(passes_.targets());
  }

  // Sample i is the window data.features[i, 0 .. seq]: bytes 0 .. seq-1 in, 1 .. seq targets.
  void load(const Dataset& data, const std::vector<std::int64_t>& indices) override {
    fsdp::require(static_cast<std::int64_t>(indices.size()) <= passes_.capacity(),
                  "fsdp-train: batch larger than the activation buffers");
    const std::int64_t t = shape_.seq;
    for (std::size_t s = 0; s < indices.size(); ++s) {
      const double* window = &data.features[static_cast<std::size_t>(indices[s] * data.dim)];
      for (std::int64_t j = 0; j < t; ++j) {
        const auto r = static_cast<std::size_t>(static_cast<std::int64_t>(s) * t + j);
        tokens_on_host_(r) = static_cast<std::int64_t>(window[j]);
        targets_on_host_(r) = static_cast<std::int64_t>(window[j + 1]);
      }
    }
    const std::pair<std::size_t, std::size_t> rows(0, indices.size() * static_cast<std::size_t>(t));
    Kokkos::deep_copy(Kokkos::subview(passes_.tokens(), rows),
                      Kokkos::subview(tokens_on_host_, rows));
    Kokkos::deep_copy(Kokkos::subview(passes_.targets(), rows),
                      Kokkos::subview(targets_on_host_, rows));
  }

  fsdp_models::LossSums train(fsdp::Runtime<T>& runtime, std::int64_t samples,
                              double loss_scale) override {
    return passes_.train(runtime, samples, loss_scale);
  }
  fsdp_models::LossSums evaluate(fsdp::Runtime<T>& runtime, std::int64_t samples) override {
    return passes_.evaluate(runtime, samples);
  }
  std::int64_t activation_bytes() const override { return passes_.activation_bytes(); }

 private:
  Shape shape_;
  fsdp_models::GptPasses<T> passes_;
  typename fsdp_models::Labels::HostMirror tokens_on_host_, targets_on_host_;
};

template <class T>
class TrainedGpt : public TrainedModel<T> {
 public:
  TrainedGpt(fsdp_models::GptShape shape, bool checkpointing)
      : shape_(shape), checkpointing_(checkpointing) {}

  std::vector<fsdp::ParameterInfo> parameters(fsdp::DType dtype) const override {
    return shape_.parameters(dtype);
  }
  std::vector<std::string> order() const override { return shape_.units(); }
  std::map<std::string, std::set<std::string>> tied_parameters() const override {
    return {{"wte.weight", {fsdp_models::GptShape::head_unit()}}};
  }
  // GPT-2's initialisation: weights and embeddings normal with standard deviation 0.02, the two
  // projections into the residual stream (attn.c_proj, mlp.c_proj) 0.02 / sqrt(2 layers), biases
  // 0, LayerNorm weights 1. The normal deviates are sums of four hashed uniforms (mean 2,
  // variance 1/3), scaled: the same values on every rank and backend.
  void initialize(fsdp::ShardedModel<T>& model, std::uint64_t seed) const override {
    const fsdp::ExecutionSpace space;
    const std::vector<fsdp::ParameterInfo> list = shape_.parameters(fsdp::dtype_of<T>());
    for (std::size_t i = 0; i < list.size(); ++i) {
      const std::string& name = list[i].name;
      const auto ends_with = [&](const std::string& end) {
        return name.size() >= end.size() &&
               name.compare(name.size() - end.size(), end.size(), end) == 0;
      };
      const bool layer_norm = name.find("ln_") != std::string::npos;
      double constant = 0, deviation = 0.02;
      if (ends_with(".bias")) {
        deviation = 0;
      } else if (layer_norm) {
        constant = 1, deviation = 0;
      } else if (ends_with("c_proj.weight")) {
        deviation = 0.02 / std::sqrt(2.0 * static_cast<double>(shape_.layers));
      }
      const fsdp::ShardedParameter<T>& parameter = model.parameter(name);
      const auto piece = parameter.shard();
      static_assert(fsdp_models::kKernelFlatView<std::decay_t<decltype(piece)>, T>,
                    "initialize writes the pieces in a kernel on fsdp::ExecutionSpace");
      const std::int64_t first = parameter.shard_offset();
      const std::uint64_t tag = 1000 + i;
      Kokkos::parallel_for(
          "fsdp_train::initialize_gpt", fsdp::device_range(space, 0, parameter.shard_size()),
          KOKKOS_LAMBDA(const std::int64_t k) {
            const auto element = static_cast<std::uint64_t>(first + k);
            double sum = 0;
            for (std::uint64_t draw = 0; draw < 4; ++draw) {
              sum += hash_uniform(seed, tag, draw, element);
            }
            piece(k) = static_cast<T>(constant + deviation * (sum - 2.0) * 1.7320508075688772);
          });
    }
    space.fence();
  }
  std::int64_t parameter_count() const override { return shape_.parameter_count(); }
  std::int64_t positions_per_sample() const override { return shape_.seq; }
  double flops_per_position() const override {
    return static_cast<double>(shape_.flops_per_token());
  }
  std::string description() const override {
    return "GPT-2 " + std::to_string(shape_.layers) + " layers, hidden " +
           std::to_string(shape_.hidden) + ", " + std::to_string(shape_.heads) + " heads, seq " +
           std::to_string(shape_.seq) + (checkpointing_ ? ", activation checkpointing" : "");
  }
  std::string position_name() const override { return "token"; }
  std::unique_ptr<Batch<T>> make_batch(std::int64_t capacity) const override {
    return std::make_unique<GptBatch<T>>(shape_, checkpointing_, capacity);
  }

 private:
  fsdp_models::GptShape shape_;
  bool checkpointing_;
};

}  // namespace fsdp_train
