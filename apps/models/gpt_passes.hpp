// GptPasses: the activations of a batch of GPT-2 sequences and the forward and backward passes
// through a runtime's scopes, one unit per scope ("embed", "h<l>", "head", whose tied output head
// reads and adds to wte.weight in its own scopes). One home for the passes that fsdp-train trains
// with, fsdp-bench times and the C API's and Fortran's tests drive.
//
// Runtime is fsdp::Runtime<T> or anything with its forward(unit) and backward(unit), returning a
// scope with full(parameter), grad(parameter) (Views of T) and close(). A scope that also has
// half(parameter) and unit() (fsdp::Runtime's) of a unit gathered in 16 bits is read through
// half(): the passes widen its parameters where they read them (models/half_parameter.hpp).
#pragma once

#include <Kokkos_Core.hpp>
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "models/gpt.hpp"
#include "models/loss.hpp"

namespace fsdp_models {

template <class T>
class GptPasses {
 public:
  using Shape = GptShape;

  // Buffers for up to `capacity` sequences (at least one). Activation checkpointing keeps one
  // block cache, which each block's backward scope refills by running the block's forward again
  // inside that scope (its parameters gathered once for both); without it every block keeps its
  // own.
  GptPasses(const Shape& shape, bool checkpointing, std::int64_t capacity)
      : shape_(shape),
        capacity_(std::max<std::int64_t>(capacity, 1)),
        rows_(capacity_ * shape.seq),
        tokens_("gpt::tokens", rows_),
        targets_("gpt::targets", rows_),
        head_cache_(shape, rows_),
        work_(shape, rows_),
        logits_("gpt::logits", rows_, shape.vocab),
        d_logits_("gpt::d_logits", rows_, shape.vocab),
        dx_("gpt::dx", rows_, shape.hidden) {
    for (std::int64_t l = 0; l <= shape.layers; ++l) {
      stream_.emplace_back("gpt::residual", rows_, shape.hidden);
    }
    for (std::int64_t l = 0; l < (checkpointing ? 1 : shape.layers); ++l) {
      caches_.emplace_back(shape, rows_);
    }
  }

  // The input bytes and the next bytes to predict, position r of sequence s at row s * seq + r.
  const Labels& tokens() const { return tokens_; }
  const Labels& targets() const { return targets_; }
  std::int64_t capacity() const { return capacity_; }

  // The units in forward order (GptShape::unit).
  std::int64_t unit_count() const { return shape_.unit_count(); }
  std::string unit_name(std::int64_t unit) const { return shape_.unit(unit); }

  // Forward, the softmax cross-entropy and backward of `samples` loaded sequences. The gradient
  // is that of the mean loss over their positions, times loss_scale.
  template <class Runtime>
  LossSums train(Runtime& runtime, std::int64_t samples, double loss_scale) {
    forward(runtime, samples);
    const LossSums sums = loss(samples, loss_scale);
    for (std::int64_t unit = unit_count(); unit-- > 0;) {
      auto scope = runtime.backward(unit_name(unit));
      backward_unit(scope, unit, samples);
      scope.close();
    }
    return sums;
  }

  // Forward only (an evaluation step; the caller finishes the step).
  template <class Runtime>
  LossSums evaluate(Runtime& runtime, std::int64_t samples) {
    forward(runtime, samples);
    return softmax_cross_entropy<T>(logits_, targets_, samples * shape_.seq, nullptr, 1);
  }

  // The passes one unit at a time, for a caller that opens and closes the scopes itself (the
  // Fortran test): forward_unit for units 0, 1, ... in their open forward scopes, then loss, then
  // backward_unit for the units in reverse order in their open backward scopes. The head's scopes
  // read (and its backward adds to) the tied wte.weight too.
  template <class Scope>
  void forward_unit(Scope& scope, std::int64_t unit, std::int64_t samples) {
    if (gathers_16_bit(scope)) {
      forward_unit_with(half(scope), unit, samples);
    } else {
      forward_unit_with(full(scope), unit, samples);
    }
  }
  LossSums loss(std::int64_t samples, double loss_scale) {
    const std::int64_t rows = samples * shape_.seq;
    return softmax_cross_entropy<T>(logits_, targets_, rows, &d_logits_, rows, loss_scale);
  }
  template <class Scope>
  void backward_unit(Scope& scope, std::int64_t unit, std::int64_t samples) {
    if (gathers_16_bit(scope)) {
      backward_unit_with(half(scope), grad(scope), unit, samples);
    } else {
      backward_unit_with(full(scope), grad(scope), unit, samples);
    }
  }

  // Bytes of activations and scratch (what stays from forward to backward and the buffers the
  // passes overwrite, the widening panels among them).
  std::int64_t activation_bytes() const {
    std::int64_t bytes =
        bytes_of(tokens_, targets_, logits_, d_logits_, dx_, head_cache_.ln, head_cache_.mean,
                 head_cache_.rstd, work_.q, work_.k, work_.v, work_.y, work_.dq, work_.dk, work_.dv,
                 work_.d_attention, work_.d_hidden, work_.d_qkv, work_.d_fc) +
        scratch_.bytes();
    for (const Matrix<T>& x : stream_) {
      bytes += bytes_of(x);
    }
    for (const auto& c : caches_) {
      bytes += bytes_of(c.ln1, c.ln1_mean, c.ln1_rstd, c.qkv, c.attention, c.attention_out,
                        c.x_attention, c.ln2, c.ln2_mean, c.ln2_rstd, c.fc, c.gelu);
    }
    return bytes;
  }

 private:
  // The passes of one unit with its parameters read through params(name) (the head's include the
  // tied wte.weight) and its gradients through grads(name).
  template <class Params>
  void forward_unit_with(const Params& params, std::int64_t unit, std::int64_t samples) {
    const std::int64_t t = shape_.seq;
    if (unit == 0) {
      embed_forward<T>(shape_, params, tokens_, samples, t, stream_[0]);
    } else if (unit <= shape_.layers) {
      const std::int64_t l = unit - 1;
      const auto layer = static_cast<std::size_t>(l);
      block_forward(shape_, l, params, stream_[layer], stream_[layer + 1], cache(l), work_, samples,
                    t);
    } else {
      head_forward(shape_, params, params("wte.weight"), stream_.back(), logits_, head_cache_,
                   samples, t);
    }
  }
  template <class Params, class Grads>
  void backward_unit_with(const Params& params, const Grads& grads, std::int64_t unit,
                          std::int64_t samples) {
    const std::int64_t t = shape_.seq;
    if (unit == 0) {
      embed_backward<T>(shape_, grads, tokens_, dx_, samples, t);
    } else if (unit <= shape_.layers) {
      const std::int64_t l = unit - 1;
      const auto layer = static_cast<std::size_t>(l);
      if (checkpointing()) {
        // The block's forward again, inside its backward scope, on the input kept from the
        // forward pass: its parameters are gathered once for both.
        block_forward(shape_, l, params, stream_[layer], stream_[layer + 1], caches_[0], work_,
                      samples, t);
      }
      block_backward(shape_, l, params, grads, stream_[layer], cache(l), work_, dx_, dx_, samples,
                     t);
    } else {
      head_backward(shape_, params, grads, params("wte.weight"), grads("wte.weight"),
                    stream_.back(), head_cache_, work_, d_logits_, dx_, samples, t);
    }
  }
  template <class... Views>
  static std::int64_t bytes_of(const Views&... views) {
    return (std::int64_t{0} + ... +
            static_cast<std::int64_t>(views.span() * sizeof(typename Views::value_type)));
  }
  template <class Scope>
  static auto full(Scope& scope) {
    return [&scope](const std::string& name) { return scope.full(name); };
  }
  template <class Scope>
  auto half(Scope& scope) {
    if constexpr (kHasHalf<Scope>) {
      return [this, &scope](const std::string& name) {
        return half_parameter<T>(scope, name, scratch_);
      };
    } else {
      return full(scope);  // never called: gathers_16_bit is false for such a scope
    }
  }
  // A frozen parameter's gradient is an empty View, which the kernels leave out.
  template <class Scope>
  static auto grad(Scope& scope) {
    return [&scope](const std::string& name) {
      return scope.trainable(name) ? scope.grad(name) : decltype(scope.grad(name))();
    };
  }
  bool checkpointing() const { return caches_.size() == 1 && shape_.layers > 1; }
  GptBlockCache<T>& cache(std::int64_t layer) {
    return caches_[caches_.size() == 1 ? 0 : static_cast<std::size_t>(layer)];
  }

  template <class Runtime>
  void forward(Runtime& runtime, std::int64_t samples) {
    for (std::int64_t unit = 0; unit < unit_count(); ++unit) {
      auto scope = runtime.forward(unit_name(unit));
      forward_unit(scope, unit, samples);
      scope.close();
    }
  }

  Shape shape_;
  std::int64_t capacity_;  // sequences
  std::int64_t rows_;      // positions: capacity_ * seq
  Labels tokens_, targets_;
  std::vector<Matrix<T>> stream_;  // the residual stream: [0] embed's output, [l + 1] block l's
  std::vector<GptBlockCache<T>> caches_;
  GptHeadCache<T> head_cache_;
  GptWorkspace<T> work_;
  Matrix<T> logits_, d_logits_, dx_;
  WideningScratch<T> scratch_;  // 16-bit parameters' panels (models/half_parameter.hpp)
};

}  // namespace fsdp_models
