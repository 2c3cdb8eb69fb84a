// The GPT-2 decoder-only transformer (pre-LN blocks, causal multi-head self-attention, GELU MLP,
// tied byte-level output head) written by hand, one forward and one backward per unit, so that a
// sharded training loop gathers "embed", each "h<i>" and "head" only while it runs them. Matrix
// products are GEMMs through Kokkos Kernels (models/gemm.hpp); LayerNorm, GELU, the softmax with
// its causal mask and the head permutations are Kokkos kernels, each a simple pass over rows.
//
// No autograd: block_forward keeps what block_backward needs in a GptBlockCache. A caller keeps
// one cache per layer, or one shared cache and calls block_forward again on the block's saved
// input just before its backward (activation checkpointing); the kernels are deterministic, so
// the recomputed cache is bit-identical to the first one.
//
// Every sum over rows (bias and LayerNorm gradients, embedding gradients) is a sequential loop in
// one kernel thread per output element, so it is added in the same order on every backend.
#pragma once

#include <Kokkos_Core.hpp>
#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "fsdp/core/device_math.hpp"
#include "fsdp/core/dtype.hpp"
#include "fsdp/core/error.hpp"
#include "fsdp/core/memory_space.hpp"
#include "fsdp/shard/parameter_info.hpp"
#include "models/gemm.hpp"
#include "models/half_parameter.hpp"
#include "models/loss.hpp"

namespace fsdp_models {

// The model's size. Rows of a batch are B sequences of t <= seq bytes each, row r = b * t + i.
struct GptShape {
  std::int64_t layers = 0;
  std::int64_t hidden = 0;  // C
  std::int64_t heads = 0;
  std::int64_t seq = 0;  // the longest sequence: rows of the position embedding
  std::int64_t vocab = 256;

  std::int64_t head_size() const { return hidden / heads; }

  // Empty when the shape is usable, else what is wrong with it.
  std::string validation_error() const {
    if (layers < 1 || hidden < 1 || heads < 1 || seq < 1 || vocab < 1) {
      return "GPT layers, hidden, heads, seq and vocab must all be >= 1 (got layers " +
             std::to_string(layers) + ", hidden " + std::to_string(hidden) + ", heads " +
             std::to_string(heads) + ", seq " + std::to_string(seq) + ", vocab " +
             std::to_string(vocab) + ")";
    }
    if (hidden % heads != 0) {
      return "GPT hidden " + std::to_string(hidden) + " is not a multiple of heads " +
             std::to_string(heads);
    }
    return {};
  }

  static std::string embed_unit() { return "embed"; }
  static std::string block_unit(std::int64_t layer) { return "h" + std::to_string(layer); }
  static std::string head_unit() { return "head"; }
  // The units in forward order: the embedding, the blocks, the head (unit(0) .. unit(layers + 1)).
  std::int64_t unit_count() const { return layers + 2; }
  std::string unit(std::int64_t index) const {
    return index == 0 ? embed_unit() : index <= layers ? block_unit(index - 1) : head_unit();
  }
  std::vector<std::string> units() const {
    std::vector<std::string> order;
    for (std::int64_t u = 0; u < unit_count(); ++u) {
      order.push_back(unit(u));
    }
    return order;
  }
  // "h<layer>.<name>", e.g. block_parameter(3, "attn.c_attn.weight").
  static std::string block_parameter(std::int64_t layer, const std::string& name) {
    return block_unit(layer) + "." + name;
  }

  // PyTorch's names and Linear layout ([out, in]). The output head is tied to wte.weight, which
  // is listed once, in "embed": the head's functions take it as an argument.
  std::vector<fsdp::ParameterInfo> parameters(fsdp::DType dtype) const {
    const std::int64_t c = hidden;
    std::vector<fsdp::ParameterInfo> list;
    list.push_back({"wte.weight", {vocab, c}, dtype, embed_unit(), false});
    list.push_back({"wpe.weight", {seq, c}, dtype, embed_unit(), false});
    for (std::int64_t l = 0; l < layers; ++l) {
      const std::string unit = block_unit(l);
      const auto add = [&](const std::string& name, std::vector<std::int64_t> dims) {
        list.push_back({block_parameter(l, name), std::move(dims), dtype, unit, false});
      };
      add("ln_1.weight", {c});
      add("ln_1.bias", {c});
      add("attn.c_attn.weight", {3 * c, c});
      add("attn.c_attn.bias", {3 * c});
      add("attn.c_proj.weight", {c, c});
      add("attn.c_proj.bias", {c});
      add("ln_2.weight", {c});
      add("ln_2.bias", {c});
      add("mlp.c_fc.weight", {4 * c, c});
      add("mlp.c_fc.bias", {4 * c});
      add("mlp.c_proj.weight", {c, 4 * c});
      add("mlp.c_proj.bias", {c});
    }
    list.push_back({"ln_f.weight", {c}, dtype, head_unit(), false});
    list.push_back({"ln_f.bias", {c}, dtype, head_unit(), false});
    return list;
  }

  // V*C + T*C + L*(12*C^2 + 13*C) + 2*C.
  std::int64_t parameter_count() const {
    const std::int64_t c = hidden;
    return vocab * c + seq * c + layers * (12 * c * c + 13 * c) + 2 * c;
  }

  // Training FLOPs per token as torchtitan counts them: 6 * N for the matrix products of forward
  // and backward, plus 12 * layers * hidden * seq for attention's scores and weighted sum. N is
  // parameter_count() without wpe (a lookup, no product); wte stays in, since the tied head
  // multiplies by it. Biases and LayerNorm weights are in N too: a rounding error at this size.
  std::int64_t flops_per_token() const {
    return 6 * (parameter_count() - seq * hidden) + 12 * layers * hidden * seq;
  }
};

// Row-major [rows, columns] at `offset` elements into a flat buffer: one (sequence, head) block.
template <class T>
MatrixRef<T> block_of(const fsdp::DeviceView<T>& flat, std::int64_t offset, std::int64_t rows,
                      std::int64_t columns) {
  return MatrixRef<T>(flat.data() + offset, static_cast<std::size_t>(rows),
                      static_cast<std::size_t>(columns));
}

// What block_backward needs from block_forward, for up to `capacity` rows.
template <class T>
struct GptBlockCache {
  GptBlockCache() = default;
  GptBlockCache(const GptShape& shape, std::int64_t max_rows)
      : capacity(max_rows),
        ln1("gpt::ln1", max_rows, shape.hidden),
        ln1_mean("gpt::ln1_mean", max_rows),
        ln1_rstd("gpt::ln1_rstd", max_rows),
        qkv("gpt::qkv", max_rows, 3 * shape.hidden),
        // [B * heads * t, t] for B * t <= max_rows and t <= seq.
        attention("gpt::attention", max_rows * shape.heads * shape.seq),
        attention_out("gpt::attention_out", max_rows, shape.hidden),
        x_attention("gpt::x_attention", max_rows, shape.hidden),
        ln2("gpt::ln2", max_rows, shape.hidden),
        ln2_mean("gpt::ln2_mean", max_rows),
        ln2_rstd("gpt::ln2_rstd", max_rows),
        fc("gpt::fc", max_rows, 4 * shape.hidden),
        gelu("gpt::gelu", max_rows, 4 * shape.hidden) {}

  std::int64_t capacity = 0;
  Matrix<T> ln1;  // ln_1(x_in)
  fsdp::DeviceView<T> ln1_mean, ln1_rstd;
  Matrix<T> qkv;                  // ln1 * c_attn^T + b: q, k, v side by side
  fsdp::DeviceView<T> attention;  // softmax probabilities, one [t, t] block per (sequence, head)
  Matrix<T> attention_out;        // the heads' outputs, concatenated, before c_proj
  Matrix<T> x_attention;          // x_in + attention: the residual stream between the halves
  Matrix<T> ln2;                  // ln_2(x_attention)
  fsdp::DeviceView<T> ln2_mean, ln2_rstd;
  Matrix<T> fc;    // ln2 * c_fc^T + b, before GELU
  Matrix<T> gelu;  // GELU(fc)
};

// ln_f's output and statistics, for head_backward.
template <class T>
struct GptHeadCache {
  GptHeadCache() = default;
  GptHeadCache(const GptShape& shape, std::int64_t max_rows)
      : capacity(max_rows),
        ln("gpt::lnf", max_rows, shape.hidden),
        mean("gpt::lnf_mean", max_rows),
        rstd("gpt::lnf_rstd", max_rows) {}

  std::int64_t capacity = 0;
  Matrix<T> ln;
  fsdp::DeviceView<T> mean, rstd;
};

// Scratch every unit's forward and backward overwrite: one for the whole model.
template <class T>
struct GptWorkspace {
  GptWorkspace() = default;
  GptWorkspace(const GptShape& shape, std::int64_t max_rows)
      : capacity(max_rows),
        q("gpt::q", max_rows * shape.hidden),
        k("gpt::k", max_rows * shape.hidden),
        v("gpt::v", max_rows * shape.hidden),
        y("gpt::y", max_rows * shape.hidden),
        dq("gpt::dq", max_rows * shape.hidden),
        dk("gpt::dk", max_rows * shape.hidden),
        dv("gpt::dv", max_rows * shape.hidden),
        d_attention("gpt::d_attention", max_rows * shape.heads * shape.seq),
        d_hidden("gpt::d_hidden", max_rows, shape.hidden),
        d_qkv("gpt::d_qkv", max_rows, 3 * shape.hidden),
        d_fc("gpt::d_fc", max_rows, 4 * shape.hidden) {}

  std::int64_t capacity = 0;
  // Per (sequence, head) contiguous [t, head_size] blocks, so each head's products are GEMMs;
  // y holds the heads' outputs in forward and their gradients in backward.
  fsdp::DeviceView<T> q, k, v, y, dq, dk, dv;
  fsdp::DeviceView<T> d_attention;  // like GptBlockCache::attention
  Matrix<T> d_hidden;               // [rows, C]
  Matrix<T> d_qkv;                  // [rows, 3C]
  Matrix<T> d_fc;                   // [rows, 4C]
};

namespace gpt_detail {

template <class T>
inline constexpr T kLayerNormEpsilon = T(1e-5);

inline void check_batch(const GptShape& shape, std::int64_t capacity, std::int64_t batch,
                        std::int64_t t, const char* where) {
  // An empty batch is valid: a rank without samples in a short last global batch still runs the
  // passes (their collectives need every rank), and contributes zero gradients.
  if (batch < 0 || t < 1 || t > shape.seq || batch * t > capacity) {
    throw fsdp::Error(std::string(where) + ": a batch of " + std::to_string(batch) +
                      " sequences of " + std::to_string(t) +
                      " tokens needs batch >= 0, 1 <= t <= seq (" + std::to_string(shape.seq) +
                      ") and batch * t <= the buffers' rows (" + std::to_string(capacity) + ")");
  }
}

// The Views a params(name) or grads(name) callable hands out.
template <class Access, class T>
auto parameter(const Access& access, const std::string& name) {
  auto view = access(name);
  static_assert(kParameterRead<decltype(view), T>,
                "GPT parameters and gradients are flat Views of T that fsdp::ExecutionSpace can "
                "access (parameters may be HalfParameters)");
  return view;
}

// out = LayerNorm(x) * weight + bias over each row's `columns` elements (biased variance), with
// the row's mean and 1 / sqrt(variance + eps) kept for the backward.
template <class T, class ParameterView>
void layernorm_forward(const Matrix<T>& x, const ParameterView& weight, const ParameterView& bias,
                       const Matrix<T>& out, const fsdp::DeviceView<T>& mean,
                       const fsdp::DeviceView<T>& rstd, std::int64_t rows) {
  namespace math = fsdp::device_math;
  const auto columns = static_cast<std::int64_t>(x.extent(1));
  const T eps = kLayerNormEpsilon<T>;
  Kokkos::parallel_for(
      "fsdp_models::gpt_layernorm", fsdp::device_range(fsdp::ExecutionSpace(), 0, rows),
      KOKKOS_LAMBDA(const std::size_t r) {
        T sum = T(0);
        for (std::int64_t i = 0; i < columns; ++i) {
          sum += x(r, i);
        }
        const T m = sum / static_cast<T>(columns);
        T squares = T(0);
        for (std::int64_t i = 0; i < columns; ++i) {
          const T d = x(r, i) - m;
          squares += d * d;
        }
        const T s = T(1) / math::sqrt(squares / static_cast<T>(columns) + eps);
        for (std::int64_t i = 0; i < columns; ++i) {
          out(r, i) = (x(r, i) - m) * s * weight(i) + bias(i);
        }
        mean(r) = m;
        rstd(r) = s;
      });
}

// Given d_out = dLoss/d(LayerNorm output): adds the weight and bias gradients (one thread per
// column, rows in order) and writes dx = residual + dLoss/dx (dx = dLoss/dx without a residual).
// residual may be dx itself; d_out must not be. An empty gradient View (a frozen parameter) is
// left out, here and in every backward below.
template <class T, class ParameterView, class GradientView>
void layernorm_backward(const Matrix<T>& x, const fsdp::DeviceView<T>& mean,
                        const fsdp::DeviceView<T>& rstd, const ParameterView& weight,
                        const GradientView& weight_grad, const GradientView& bias_grad,
                        const Matrix<T>& d_out, const Matrix<T>* residual, const Matrix<T>& dx,
                        std::int64_t rows) {
  const auto columns = static_cast<std::int64_t>(x.extent(1));
  const fsdp::ExecutionSpace space;
  const bool weight_trains = weight_grad.size() > 0;
  const bool bias_trains = bias_grad.size() > 0;
  if (weight_trains || bias_trains) {
    Kokkos::parallel_for(
        "fsdp_models::gpt_layernorm_parameters", fsdp::device_range(space, 0, columns),
        KOKKOS_LAMBDA(const std::size_t i) {
          T gw = T(0);
          T gb = T(0);
          for (std::int64_t r = 0; r < rows; ++r) {
            gw += d_out(r, i) * (x(r, i) - mean(r)) * rstd(r);
            gb += d_out(r, i);
          }
          if (weight_trains) {
            weight_grad(i) += gw;
          }
          if (bias_trains) {
            bias_grad(i) += gb;
          }
        });
  }
  const bool add = residual != nullptr;
  const Matrix<T> base = add ? *residual : Matrix<T>();
  Kokkos::parallel_for(
      "fsdp_models::gpt_layernorm_inputs", fsdp::device_range(space, 0, rows),
      KOKKOS_LAMBDA(const std::size_t r) {
        const T m = mean(r);
        const T s = rstd(r);
        T mean_d = T(0);
        T mean_dx = T(0);
        for (std::int64_t i = 0; i < columns; ++i) {
          const T d = d_out(r, i) * weight(i);
          mean_d += d;
          mean_dx += d * (x(r, i) - m) * s;
        }
        mean_d /= static_cast<T>(columns);
        mean_dx /= static_cast<T>(columns);
        for (std::int64_t i = 0; i < columns; ++i) {
          const T normalized = (x(r, i) - m) * s;
          const T value = s * (d_out(r, i) * weight(i) - mean_d - normalized * mean_dx);
          dx(r, i) = add ? base(r, i) + value : value;
        }
      });
}

// out = in * weight^T + bias (+ residual, which may be out itself): the bias (and residual) go
// in first so that the GEMM adds onto them.
template <class T, class ParameterView>
void linear_forward(const Matrix<T>& in, const ParameterView& weight, const ParameterView& bias,
                    const Matrix<T>* residual, const Matrix<T>& out, std::int64_t rows) {
  const auto inputs = static_cast<std::int64_t>(in.extent(1));
  const auto outputs = static_cast<std::int64_t>(out.extent(1));
  const bool add = residual != nullptr;
  const Matrix<T> base = add ? *residual : Matrix<T>();
  Kokkos::parallel_for(
      "fsdp_models::gpt_linear_bias", fsdp::device_range(fsdp::ExecutionSpace(), 0, rows),
      KOKKOS_LAMBDA(const std::size_t r) {
        for (std::int64_t o = 0; o < outputs; ++o) {
          out(r, o) = add ? base(r, o) + bias(o) : bias(o);
        }
      });
  weight_gemm(T(1), leading_rows(in, rows), weight, outputs, inputs, Op::transpose, T(1),
              leading_rows(out, rows));
}

// Given delta = dLoss/d(out) of linear_forward: weight_grad += delta^T * in, bias_grad += the
// column sums of delta, and d_in = delta * weight.
template <class T, class ParameterView, class GradientView>
void linear_backward(const Matrix<T>& in, const ParameterView& weight,
                     const GradientView& weight_grad, const GradientView& bias_grad,
                     const Matrix<T>& delta, const Matrix<T>& d_in, std::int64_t rows) {
  const auto inputs = static_cast<std::int64_t>(in.extent(1));
  const auto outputs = static_cast<std::int64_t>(delta.extent(1));
  if (weight_grad.size() > 0) {
    weight_grad_gemm(weight, leading_rows(delta, rows), leading_rows(in, rows),
                     as_matrix(weight_grad, outputs, inputs));
  }
  if (bias_grad.size() > 0) {
    Kokkos::parallel_for(
        "fsdp_models::gpt_linear_bias_grad", fsdp::device_range(fsdp::ExecutionSpace(), 0, outputs),
        KOKKOS_LAMBDA(const std::size_t o) {
          T sum = T(0);
          for (std::int64_t r = 0; r < rows; ++r) {
            sum += delta(r, o);
          }
          bias_grad(o) += sum;
        });
  }
  weight_gemm(T(1), leading_rows(delta, rows), weight, outputs, inputs, Op::none, T(0),
              leading_rows(d_in, rows));
}

// Columns [first, first + C) of rows (a q, k or v part, or attention_out) <-> per (sequence,
// head) [t, head_size] blocks: to_heads copies into the blocks, else back into the columns.
template <class T>
void permute_heads(const GptShape& shape, const Matrix<T>& rows_view, std::int64_t first,
                   const fsdp::DeviceView<T>& heads_view, std::int64_t batch, std::int64_t t,
                   bool to_heads) {
  const std::int64_t heads = shape.heads;
  const std::int64_t hs = shape.head_size();
  Kokkos::parallel_for(
      "fsdp_models::gpt_permute_heads", fsdp::device_range(fsdp::ExecutionSpace(), 0, batch * t),
      KOKKOS_LAMBDA(const std::size_t r) {
        const auto row = static_cast<std::int64_t>(r);
        const std::int64_t b = row / t;
        const std::int64_t i = row % t;
        for (std::int64_t h = 0; h < heads; ++h) {
          T* block = heads_view.data() + ((b * heads + h) * t + i) * hs;
          for (std::int64_t d = 0; d < hs; ++d) {
            if (to_heads) {
              block[d] = rows_view(r, first + h * hs + d);
            } else {
              rows_view(r, first + h * hs + d) = block[d];
            }
          }
        }
      });
}

// Each row i of each [t, t] block: the softmax of scores j <= i, and exactly 0 for j > i (the
// causal mask), in place.
template <class T>
void causal_softmax(const fsdp::DeviceView<T>& scores, std::int64_t blocks, std::int64_t t) {
  namespace math = fsdp::device_math;
  Kokkos::parallel_for(
      "fsdp_models::gpt_causal_softmax", fsdp::device_range(fsdp::ExecutionSpace(), 0, blocks * t),
      KOKKOS_LAMBDA(const std::size_t q) {
        const std::int64_t i = static_cast<std::int64_t>(q) % t;
        T* row = scores.data() + static_cast<std::int64_t>(q) * t;
        T largest = row[0];
        for (std::int64_t j = 1; j <= i; ++j) {
          largest = row[j] > largest ? row[j] : largest;
        }
        T total = T(0);
        for (std::int64_t j = 0; j <= i; ++j) {
          row[j] = math::exp(row[j] - largest);
          total += row[j];
        }
        const T inverse = T(1) / total;
        for (std::int64_t j = 0; j <= i; ++j) {
          row[j] *= inverse;
        }
        for (std::int64_t j = i + 1; j < t; ++j) {
          row[j] = T(0);
        }
      });
}

// d_probabilities -> d_scores in place: dS = P * (dP - sum_j P dP) per row. Masked entries have
// P = 0 and so get 0.
template <class T>
void softmax_backward(const fsdp::DeviceView<T>& probabilities, const fsdp::DeviceView<T>& d,
                      std::int64_t blocks, std::int64_t t) {
  Kokkos::parallel_for(
      "fsdp_models::gpt_softmax_backward",
      fsdp::device_range(fsdp::ExecutionSpace(), 0, blocks * t),
      KOKKOS_LAMBDA(const std::size_t q) {
        const std::int64_t offset = static_cast<std::int64_t>(q) * t;
        const T* p = probabilities.data() + offset;
        T* g = d.data() + offset;
        T dot = T(0);
        for (std::int64_t j = 0; j < t; ++j) {
          dot += p[j] * g[j];
        }
        for (std::int64_t j = 0; j < t; ++j) {
          g[j] = p[j] * (g[j] - dot);
        }
      });
}

// GELU's tanh approximation 0.5 x (1 + tanh(u)), u = sqrt(2 / pi) (x + 0.044715 x^3), with
// 0.5 (1 + tanh(u)) computed as the logistic 1 / (1 + exp(-2u)): equal in exact arithmetic, and
// one exp costs a fraction of a tanh (glibc's tanhf goes through expm1f; GELU runs on 4C values
// per row). exp(-2u) overflowing to inf for very negative x gives the right limit, 0.
// GELU's tanh approximation: u = sqrt(2 / pi) (x + 0.044715 x^3).
constexpr double kGeluScale = 0.7978845608028654;  // sqrt(2 / pi)
constexpr double kGeluCubic = 0.044715;

template <class T>
KOKKOS_INLINE_FUNCTION T gelu_gate(T x) {
  namespace math = fsdp::device_math;
  const T u = T(kGeluScale) * (x + T(kGeluCubic) * x * x * x);
  return T(1) / (T(1) + math::exp(T(-2) * u));
}

template <class T>
void gelu_forward(const Matrix<T>& in, const Matrix<T>& out, std::int64_t rows) {
  const auto columns = static_cast<std::int64_t>(in.extent(1));
  Kokkos::parallel_for(
      "fsdp_models::gpt_gelu", fsdp::device_range(fsdp::ExecutionSpace(), 0, rows),
      KOKKOS_LAMBDA(const std::size_t r) {
        for (std::int64_t i = 0; i < columns; ++i) {
          const T x = in(r, i);
          out(r, i) = x * gelu_gate(x);
        }
      });
}

// delta *= GELU'(in), in place. With g = gelu_gate(x) = 0.5 (1 + tanh(u)):
// GELU' = g + x * 0.5 (1 - tanh(u)^2) * du/dx = g + 2 x g (1 - g) du/dx.
template <class T>
void gelu_backward(const Matrix<T>& in, const Matrix<T>& delta, std::int64_t rows) {
  const auto columns = static_cast<std::int64_t>(in.extent(1));
  Kokkos::parallel_for(
      "fsdp_models::gpt_gelu_backward", fsdp::device_range(fsdp::ExecutionSpace(), 0, rows),
      KOKKOS_LAMBDA(const std::size_t r) {
        for (std::int64_t i = 0; i < columns; ++i) {
          const T x = in(r, i);
          const T g = gelu_gate(x);
          const T du = T(kGeluScale) * (T(1) + T(3 * kGeluCubic) * x * x);
          delta(r, i) *= g + T(2) * x * g * (T(1) - g) * du;
        }
      });
}

}  // namespace gpt_detail

// x[b * t + i] = wte[tokens[b * t + i]] + wpe[i]. Tokens must be < vocab (not checked here).
template <class T, class Params>
void embed_forward(const GptShape& shape, const Params& params, const Labels& tokens,
                   std::int64_t batch, std::int64_t t, const Matrix<T>& x) {
  gpt_detail::check_batch(shape, static_cast<std::int64_t>(x.extent(0)), batch, t, "embed_forward");
  const auto wte = gpt_detail::parameter<Params, T>(params, "wte.weight");
  const auto wpe = gpt_detail::parameter<Params, T>(params, "wpe.weight");
  const std::int64_t c = shape.hidden;
  const fsdp::ExecutionSpace space;
  Kokkos::parallel_for(
      "fsdp_models::gpt_embed", fsdp::device_range(space, 0, batch * t),
      KOKKOS_LAMBDA(const std::size_t r) {
        const std::int64_t token = tokens(r);
        const std::int64_t position = static_cast<std::int64_t>(r) % t;
        for (std::int64_t i = 0; i < c; ++i) {
          x(r, i) = wte(static_cast<std::size_t>(token * c + i)) +
                    wpe(static_cast<std::size_t>(position * c + i));
        }
      });
  space.fence();
}

// Adds dLoss/dx (the first block's input gradient) into the wte and wpe gradients. One thread
// per wte column, rows in order (two rows may share a token), and one per wpe element.
template <class T, class Grads>
void embed_backward(const GptShape& shape, const Grads& grads, const Labels& tokens,
                    const Matrix<T>& dx, std::int64_t batch, std::int64_t t) {
  gpt_detail::check_batch(shape, static_cast<std::int64_t>(dx.extent(0)), batch, t,
                          "embed_backward");
  const auto wte_grad = gpt_detail::parameter<Grads, T>(grads, "wte.weight");
  const auto wpe_grad = gpt_detail::parameter<Grads, T>(grads, "wpe.weight");
  const std::int64_t c = shape.hidden;
  const fsdp::ExecutionSpace space;
  if (wte_grad.size() > 0) {
    Kokkos::parallel_for(
        "fsdp_models::gpt_embed_backward_wte", fsdp::device_range(space, 0, c),
        KOKKOS_LAMBDA(const std::size_t i) {
          for (std::int64_t r = 0; r < batch * t; ++r) {
            wte_grad(static_cast<std::size_t>(tokens(r) * c) + i) += dx(r, i);
          }
        });
  }
  if (wpe_grad.size() > 0) {
    Kokkos::parallel_for(
        "fsdp_models::gpt_embed_backward_wpe", fsdp::device_range(space, 0, t * c),
        KOKKOS_LAMBDA(const std::size_t e) {
          const std::int64_t position = static_cast<std::int64_t>(e) / c;
          const std::int64_t i = static_cast<std::int64_t>(e) % c;
          T sum = T(0);
          for (std::int64_t b = 0; b < batch; ++b) {
            sum += dx(b * t + position, i);
          }
          wpe_grad(e) += sum;
        });
  }
  space.fence();
}

// Block `layer`: x_out = x_attention + mlp(ln_2(x_attention)), x_attention = x_in +
// attn(ln_1(x_in)). x_out must not be x_in, which block_backward needs again.
template <class T, class Params>
void block_forward(const GptShape& shape, std::int64_t layer, const Params& params,
                   const Matrix<T>& x_in, const Matrix<T>& x_out, GptBlockCache<T>& cache,
                   GptWorkspace<T>& work, std::int64_t batch, std::int64_t t) {
  namespace detail = gpt_detail;
  namespace math = fsdp::device_math;
  detail::check_batch(shape, std::min(cache.capacity, work.capacity), batch, t, "block_forward");
  const auto p = [&](const char* name) {
    return detail::parameter<Params, T>(params, GptShape::block_parameter(layer, name));
  };
  const std::int64_t rows = batch * t;
  const std::int64_t c = shape.hidden;
  const std::int64_t hs = shape.head_size();
  const std::int64_t blocks = batch * shape.heads;

  detail::layernorm_forward(x_in, p("ln_1.weight"), p("ln_1.bias"), cache.ln1, cache.ln1_mean,
                            cache.ln1_rstd, rows);
  detail::linear_forward(cache.ln1, p("attn.c_attn.weight"), p("attn.c_attn.bias"),
                         static_cast<const Matrix<T>*>(nullptr), cache.qkv, rows);
  detail::permute_heads(shape, cache.qkv, 0, work.q, batch, t, true);
  detail::permute_heads(shape, cache.qkv, c, work.k, batch, t, true);
  detail::permute_heads(shape, cache.qkv, 2 * c, work.v, batch, t, true);
  // Each (sequence, head) block is synchronised by the default instance the GEMMs run on.
  const T scale = T(1) / math::sqrt(static_cast<T>(hs));
  for (std::int64_t bh = 0; bh < blocks; ++bh) {
    gemm(Op::none, Op::transpose, scale, block_of(work.q, bh * t * hs, t, hs),
         block_of(work.k, bh * t * hs, t, hs), T(0), block_of(cache.attention, bh * t * t, t, t));
  }
  detail::causal_softmax(cache.attention, blocks, t);
  for (std::int64_t bh = 0; bh < blocks; ++bh) {
    gemm(Op::none, Op::none, T(1), block_of(cache.attention, bh * t * t, t, t),
         block_of(work.v, bh * t * hs, t, hs), T(0), block_of(work.y, bh * t * hs, t, hs));
  }
  detail::permute_heads(shape, cache.attention_out, 0, work.y, batch, t, false);
  detail::linear_forward(cache.attention_out, p("attn.c_proj.weight"), p("attn.c_proj.bias"), &x_in,
                         cache.x_attention, rows);

  detail::layernorm_forward(cache.x_attention, p("ln_2.weight"), p("ln_2.bias"), cache.ln2,
                            cache.ln2_mean, cache.ln2_rstd, rows);
  detail::linear_forward(cache.ln2, p("mlp.c_fc.weight"), p("mlp.c_fc.bias"),
                         static_cast<const Matrix<T>*>(nullptr), cache.fc, rows);
  detail::gelu_forward(cache.fc, cache.gelu, rows);
  detail::linear_forward(cache.gelu, p("mlp.c_proj.weight"), p("mlp.c_proj.bias"),
                         &cache.x_attention, x_out, rows);
  fsdp::ExecutionSpace().fence();
}

// Given dx_out = dLoss/dx_out, adds block `layer`'s gradients into grads and writes dx_in =
// dLoss/dx_in. cache holds what block_forward wrote for this x_in. dx_in may be dx_out.
template <class T, class Params, class Grads>
void block_backward(const GptShape& shape, std::int64_t layer, const Params& params,
                    const Grads& grads, const Matrix<T>& x_in, const GptBlockCache<T>& cache,
                    GptWorkspace<T>& work, const Matrix<T>& dx_out, const Matrix<T>& dx_in,
                    std::int64_t batch, std::int64_t t) {
  namespace detail = gpt_detail;
  namespace math = fsdp::device_math;
  detail::check_batch(shape, std::min(cache.capacity, work.capacity), batch, t, "block_backward");
  const auto p = [&](const char* name) {
    return detail::parameter<Params, T>(params, GptShape::block_parameter(layer, name));
  };
  const auto g = [&](const char* name) {
    return detail::parameter<Grads, T>(grads, GptShape::block_parameter(layer, name));
  };
  const std::int64_t rows = batch * t;
  const std::int64_t c = shape.hidden;
  const std::int64_t hs = shape.head_size();
  const std::int64_t blocks = batch * shape.heads;

  // MLP half: dx_out reaches x_attention directly and through ln_2.
  detail::linear_backward(cache.gelu, p("mlp.c_proj.weight"), g("mlp.c_proj.weight"),
                          g("mlp.c_proj.bias"), dx_out, work.d_fc, rows);
  detail::gelu_backward(cache.fc, work.d_fc, rows);
  detail::linear_backward(cache.ln2, p("mlp.c_fc.weight"), g("mlp.c_fc.weight"), g("mlp.c_fc.bias"),
                          work.d_fc, work.d_hidden, rows);
  detail::layernorm_backward(cache.x_attention, cache.ln2_mean, cache.ln2_rstd, p("ln_2.weight"),
                             g("ln_2.weight"), g("ln_2.bias"), work.d_hidden, &dx_out, dx_in, rows);

  // Attention half: dx_in now holds dLoss/dx_attention.
  detail::linear_backward(cache.attention_out, p("attn.c_proj.weight"), g("attn.c_proj.weight"),
                          g("attn.c_proj.bias"), dx_in, work.d_hidden, rows);
  detail::permute_heads(shape, work.d_hidden, 0, work.y, batch, t, true);
  detail::permute_heads(shape, cache.qkv, 0, work.q, batch, t, true);
  detail::permute_heads(shape, cache.qkv, c, work.k, batch, t, true);
  detail::permute_heads(shape, cache.qkv, 2 * c, work.v, batch, t, true);
  for (std::int64_t bh = 0; bh < blocks; ++bh) {
    const auto dy = block_of(work.y, bh * t * hs, t, hs);
    const auto probabilities = block_of(cache.attention, bh * t * t, t, t);
    gemm(Op::none, Op::transpose, T(1), dy, block_of(work.v, bh * t * hs, t, hs), T(0),
         block_of(work.d_attention, bh * t * t, t, t));
    gemm(Op::transpose, Op::none, T(1), probabilities, dy, T(0),
         block_of(work.dv, bh * t * hs, t, hs));
  }
  detail::softmax_backward(cache.attention, work.d_attention, blocks, t);
  const T scale = T(1) / math::sqrt(static_cast<T>(hs));
  for (std::int64_t bh = 0; bh < blocks; ++bh) {
    const auto d_scores = block_of(work.d_attention, bh * t * t, t, t);
    gemm(Op::none, Op::none, scale, d_scores, block_of(work.k, bh * t * hs, t, hs), T(0),
         block_of(work.dq, bh * t * hs, t, hs));
    gemm(Op::transpose, Op::none, scale, d_scores, block_of(work.q, bh * t * hs, t, hs), T(0),
         block_of(work.dk, bh * t * hs, t, hs));
  }
  detail::permute_heads(shape, work.d_qkv, 0, work.dq, batch, t, false);
  detail::permute_heads(shape, work.d_qkv, c, work.dk, batch, t, false);
  detail::permute_heads(shape, work.d_qkv, 2 * c, work.dv, batch, t, false);
  detail::linear_backward(cache.ln1, p("attn.c_attn.weight"), g("attn.c_attn.weight"),
                          g("attn.c_attn.bias"), work.d_qkv, work.d_hidden, rows);
  detail::layernorm_backward(x_in, cache.ln1_mean, cache.ln1_rstd, p("ln_1.weight"),
                             g("ln_1.weight"), g("ln_1.bias"), work.d_hidden, &dx_in, dx_in, rows);
  fsdp::ExecutionSpace().fence();
}

// logits = ln_f(x) * wte^T, [rows, vocab]. params gives ln_f.weight and ln_f.bias; wte is the
// embed unit's wte.weight (the tied output head).
template <class T, class Params, class WeightView>
void head_forward(const GptShape& shape, const Params& params, const WeightView& wte,
                  const Matrix<T>& x, const Matrix<T>& logits, GptHeadCache<T>& cache,
                  std::int64_t batch, std::int64_t t) {
  static_assert(kParameterRead<WeightView, T>,
                "head_forward takes wte as a flat View of T or a HalfParameter");
  gpt_detail::check_batch(shape, cache.capacity, batch, t, "head_forward");
  const std::int64_t rows = batch * t;
  gpt_detail::layernorm_forward(x, gpt_detail::parameter<Params, T>(params, "ln_f.weight"),
                                gpt_detail::parameter<Params, T>(params, "ln_f.bias"), cache.ln,
                                cache.mean, cache.rstd, rows);
  weight_gemm(T(1), leading_rows(cache.ln, rows), wte, shape.vocab, shape.hidden, Op::transpose,
              T(0), leading_rows(logits, rows));
  fsdp::ExecutionSpace().fence();
}

// Given d_logits = dLoss/dlogits (softmax_cross_entropy's delta): adds the ln_f gradients into
// grads and wte's head contribution into wte_grad, and writes dx = dLoss/dx.
template <class T, class Params, class Grads, class WeightView, class WeightGradView>
void head_backward(const GptShape& shape, const Params& params, const Grads& grads,
                   const WeightView& wte, const WeightGradView& wte_grad, const Matrix<T>& x,
                   const GptHeadCache<T>& cache, GptWorkspace<T>& work, const Matrix<T>& d_logits,
                   const Matrix<T>& dx, std::int64_t batch, std::int64_t t) {
  static_assert(kParameterRead<WeightView, T> && kKernelFlatView<WeightGradView, T>,
                "head_backward takes wte and its gradient as flat Views of T (wte may be a "
                "HalfParameter)");
  gpt_detail::check_batch(shape, std::min(cache.capacity, work.capacity), batch, t,
                          "head_backward");
  const std::int64_t rows = batch * t;
  weight_gemm(T(1), leading_rows(d_logits, rows), wte, shape.vocab, shape.hidden, Op::none, T(0),
              leading_rows(work.d_hidden, rows));
  if (wte_grad.size() > 0) {
    weight_grad_gemm(wte, leading_rows(d_logits, rows), leading_rows(cache.ln, rows),
                     as_matrix(wte_grad, shape.vocab, shape.hidden));
  }
  gpt_detail::layernorm_backward(x, cache.mean, cache.rstd,
                                 gpt_detail::parameter<Params, T>(params, "ln_f.weight"),
                                 gpt_detail::parameter<Grads, T>(grads, "ln_f.weight"),
                                 gpt_detail::parameter<Grads, T>(grads, "ln_f.bias"), work.d_hidden,
                                 static_cast<const Matrix<T>*>(nullptr), dx, rows);
  fsdp::ExecutionSpace().fence();
}

}  // namespace fsdp_models
