// The GPT-2 transformer's units (models/gpt.hpp) on a tiny fp64 model: backward against central
// finite differences of the mean loss for every parameter tensor (wte through both of its uses),
// activation checkpointing against per-layer caches bit for bit, the causal mask, and the shape's
// parameter list.
#include <algorithm>
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "device_access.hpp"
#include "fsdp/core/error.hpp"
#include "fsdp/core/memory_space.hpp"
#include "models/gpt.hpp"
#include "models/loss.hpp"
#include "tiny_gpt_shape.hpp"

using namespace fsdp_models;
using fsdp::test::on_host;
using fsdp::test::to_device;
using fsdp::test::to_view;

namespace {

// A model with its parameters, gradients and every buffer a step needs, for up to `max_batch`
// sequences of shape.seq tokens.
template <class T>
struct TinyGpt {
  TinyGpt(const GptShape& s, std::int64_t max_batch, std::uint64_t seed)
      : shape(s),
        max_rows(max_batch * s.seq),
        scratch(s, max_rows),
        head(s, max_rows),
        work(s, max_rows),
        logits("logits", max_rows, s.vocab),
        d_logits("d_logits", max_rows, s.vocab),
        dx("dx", max_rows, s.hidden),
        x_recomputed("x_recomputed", max_rows, s.hidden) {
    std::mt19937_64 random(seed);
    std::normal_distribution<double> normal(0.0, 1.0);
    for (const fsdp::ParameterInfo& info : shape.parameters(fsdp::DType::f64)) {
      std::vector<T> values(static_cast<std::size_t>(info.numel()));
      const bool ln_weight = info.name.find("ln_") != std::string::npos &&
                             info.name.find(".weight") != std::string::npos;
      const double spread = info.shape.size() == 1 ? 0.1 : 0.3;
      for (T& v : values) {
        v = static_cast<T>((ln_weight ? 1.0 : 0.0) + spread * normal(random));
      }
      params[info.name] = to_device(values);
      grads[info.name] = fsdp::DeviceView<T>("grad", values.size());
    }
    for (std::int64_t l = 0; l <= shape.layers; ++l) {
      x.emplace_back("x", max_rows, shape.hidden);
    }
    for (std::int64_t l = 0; l < shape.layers; ++l) {
      caches.emplace_back(shape, max_rows);
    }
  }

  auto param_access() const {
    return [this](const std::string& name) { return params.at(name); };
  }
  auto grad_access() const {
    return [this](const std::string& name) { return grads.at(name); };
  }

  void set_batch(const std::vector<std::int64_t>& input, const std::vector<std::int64_t>& target,
                 std::int64_t b, std::int64_t length) {
    batch = b;
    t = length;
    tokens = to_device(input);
    targets = to_device(target);
  }

  // The mean loss over the batch's rows; with checkpointing every block writes the one scratch
  // cache, and backward recomputes it.
  double forward(bool checkpoint) {
    const auto p = param_access();
    embed_forward(shape, p, tokens, batch, t, x[0]);
    for (std::int64_t l = 0; l < shape.layers; ++l) {
      block_forward(shape, l, p, x[l], x[l + 1], checkpoint ? scratch : caches[l], work, batch, t);
    }
    head_forward(shape, p, params.at("wte.weight"), x[shape.layers], logits, head, batch, t);
    const std::int64_t rows = batch * t;
    return softmax_cross_entropy(logits, targets, rows, &d_logits, rows).loss /
           static_cast<double>(rows);
  }

  // Adds the gradients of the mean loss of the last forward.
  void backward(bool checkpoint) {
    const auto p = param_access();
    const auto g = grad_access();
    head_backward(shape, p, g, params.at("wte.weight"), grads.at("wte.weight"), x[shape.layers],
                  head, work, d_logits, dx, batch, t);
    for (std::int64_t l = shape.layers - 1; l >= 0; --l) {
      if (checkpoint) {
        block_forward(shape, l, p, x[l], x_recomputed, scratch, work, batch, t);
      }
      block_backward(shape, l, p, g, x[l], checkpoint ? scratch : caches[l], work, dx, dx, batch,
                     t);
    }
    embed_backward(shape, g, tokens, dx, batch, t);
  }

  void zero_grads() {
    for (auto& entry : grads) {
      Kokkos::deep_copy(entry.second, T(0));
    }
  }

  GptShape shape;
  std::int64_t max_rows;
  std::int64_t batch = 0;
  std::int64_t t = 0;
  std::map<std::string, fsdp::DeviceView<T>> params;
  std::map<std::string, fsdp::DeviceView<T>> grads;
  Labels tokens;
  Labels targets;
  std::vector<Matrix<T>> x;
  std::vector<GptBlockCache<T>> caches;
  GptBlockCache<T> scratch;
  GptHeadCache<T> head;
  GptWorkspace<T> work;
  Matrix<T> logits, d_logits, dx, x_recomputed;
};

std::vector<std::int64_t> random_bytes(std::size_t count, std::uint64_t seed) {
  std::mt19937_64 random(seed);
  std::uniform_int_distribution<std::int64_t> byte(0, 255);
  std::vector<std::int64_t> out(count);
  for (auto& b : out) {
    b = byte(random);
  }
  return out;
}

template <class View>
std::vector<double> host_values(const View& view, std::size_t count) {
  const auto host = on_host(view);
  return std::vector<double>(host.data(), host.data() + count);
}

// Bit-for-bit equality of the first `count` elements.
template <class ViewA, class ViewB>
bool identical(const ViewA& a, const ViewB& b, std::size_t count) {
  const auto ha = on_host(a);
  const auto hb = on_host(b);
  return std::memcmp(ha.data(), hb.data(), count * sizeof(*ha.data())) == 0;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(gpt)

BOOST_AUTO_TEST_CASE(gradients_match_finite_differences) {
  TinyGpt<double> model(fsdp::test::tiny_gpt_shape(), 2, 11);
  const std::int64_t batch = 2;
  const std::int64_t t = 7;  // shorter than seq: the last wpe row gets no gradient
  const auto input = random_bytes(static_cast<std::size_t>(batch * t), 21);
  model.set_batch(input, random_bytes(input.size(), 22), batch, t);

  model.zero_grads();
  const double loss = model.forward(false);
  BOOST_TEST_MESSAGE("tiny GPT loss " << loss);
  BOOST_TEST(std::isfinite(loss));
  model.backward(false);

  std::mt19937_64 random(5);
  // Four-point central differences: truncation error O(h^4) lets h be large enough that the
  // loss's rounding (about 1e-15) stays near 1e-11 in the quotient, well under the bound.
  const double h = 1e-4;
  double worst = 0;
  for (const fsdp::ParameterInfo& info : model.shape.parameters(fsdp::DType::f64)) {
    const auto count = static_cast<std::size_t>(info.numel());
    const std::vector<double> analytic = host_values(model.grads.at(info.name), count);
    std::set<std::size_t> entries;
    if (count <= 256) {
      for (std::size_t e = 0; e < count; ++e) {
        entries.insert(e);
      }
    } else {
      std::uniform_int_distribution<std::size_t> pick(0, count - 1);
      while (entries.size() < 24) {
        entries.insert(pick(random));
      }
    }
    if (info.name == "wte.weight") {
      // Rows of input tokens: the embedding's gradient adds onto the tied head's there.
      for (std::size_t r = 0; r < 4; ++r) {
        for (std::int64_t i = 0; i < model.shape.hidden; ++i) {
          entries.insert(static_cast<std::size_t>(input[r * 3] * model.shape.hidden + i));
        }
      }
    }
    const fsdp::DeviceView<double> view = model.params.at(info.name);
    auto host = on_host(view);
    double largest = 0;
    for (std::size_t e : entries) {
      const double saved = host(e);
      const auto loss_at = [&](double step) {
        host(e) = saved + step;
        to_view(view, host);
        return model.forward(false);
      };
      const double numeric =
          (8 * (loss_at(h) - loss_at(-h)) - (loss_at(2 * h) - loss_at(-2 * h))) / (12 * h);
      host(e) = saved;
      to_view(view, host);
      const double error = std::abs(numeric - analytic[e]);
      const double scale = std::max(std::abs(numeric), std::abs(analytic[e]));
      largest = std::max(largest, std::abs(analytic[e]));
      worst = std::max(worst, error);
      BOOST_TEST_CONTEXT(info.name << "[" << e << "]: analytic " << analytic[e] << ", numeric "
                                   << numeric) {
        BOOST_TEST((error <= 2e-10 || error <= 1e-8 * scale));
      }
    }
    // A tensor whose gradient is all zero would pass trivially.
    BOOST_TEST_CONTEXT(info.name) {
      BOOST_TEST(largest > 1e-4);
    }
  }
  BOOST_TEST_MESSAGE("largest |analytic - numeric|: " << worst);
}

BOOST_AUTO_TEST_CASE(recomputation_is_bit_identical) {
  TinyGpt<double> model(fsdp::test::tiny_gpt_shape(), 2, 31);
  const GptShape& shape = model.shape;
  const std::int64_t batch = 2;
  const std::int64_t t = 8;
  const auto input = random_bytes(static_cast<std::size_t>(batch * t), 32);
  model.set_batch(input, random_bytes(input.size(), 33), batch, t);
  const auto p = model.param_access();
  const std::int64_t rows = batch * t;
  const auto c = static_cast<std::size_t>(rows * shape.hidden);

  // One block, twice into the scratch cache (another layer in between), against its own cache.
  embed_forward(shape, p, model.tokens, batch, t, model.x[0]);
  block_forward(shape, 1, p, model.x[0], model.x[1], model.caches[1], model.work, batch, t);
  block_forward(shape, 1, p, model.x[0], model.x[2], model.scratch, model.work, batch, t);
  block_forward(shape, 0, p, model.x[0], model.x_recomputed, model.scratch, model.work, batch, t);
  block_forward(shape, 1, p, model.x[0], model.x_recomputed, model.scratch, model.work, batch, t);
  BOOST_TEST(identical(model.x[1], model.x[2], c));
  BOOST_TEST(identical(model.x[1], model.x_recomputed, c));
  const GptBlockCache<double>& a = model.caches[1];
  const GptBlockCache<double>& b = model.scratch;
  BOOST_TEST(identical(a.ln1, b.ln1, c));
  BOOST_TEST(identical(a.ln1_rstd, b.ln1_rstd, static_cast<std::size_t>(rows)));
  BOOST_TEST(identical(a.qkv, b.qkv, 3 * c));
  BOOST_TEST(identical(a.attention, b.attention, static_cast<std::size_t>(rows * shape.heads * t)));
  BOOST_TEST(identical(a.attention_out, b.attention_out, c));
  BOOST_TEST(identical(a.x_attention, b.x_attention, c));
  BOOST_TEST(identical(a.ln2, b.ln2, c));
  BOOST_TEST(identical(a.fc, b.fc, 4 * c));
  BOOST_TEST(identical(a.gelu, b.gelu, 4 * c));

  // A whole step with per-layer caches against one with activation checkpointing.
  model.zero_grads();
  const double loss_cached = model.forward(false);
  model.backward(false);
  std::map<std::string, std::vector<double>> cached;
  for (const auto& entry : model.grads) {
    cached[entry.first] = host_values(entry.second, entry.second.size());
  }
  model.zero_grads();
  const double loss_checkpointed = model.forward(true);
  model.backward(true);
  BOOST_TEST(std::memcmp(&loss_cached, &loss_checkpointed, sizeof(double)) == 0);
  for (const auto& entry : model.grads) {
    const std::vector<double> values = host_values(entry.second, entry.second.size());
    BOOST_TEST_CONTEXT(entry.first) {
      BOOST_TEST(std::memcmp(values.data(), cached.at(entry.first).data(),
                             values.size() * sizeof(double)) == 0);
    }
  }
}

BOOST_AUTO_TEST_CASE(attention_is_causal) {
  for (const std::int64_t t : {std::int64_t{5}, std::int64_t{8}}) {
    TinyGpt<double> model(fsdp::test::tiny_gpt_shape(), 2, 41);
    const GptShape& shape = model.shape;
    const std::int64_t batch = 2;
    auto input = random_bytes(static_cast<std::size_t>(batch * t), 42);
    model.set_batch(input, random_bytes(input.size(), 43), batch, t);
    model.forward(false);
    const auto v = static_cast<std::size_t>(shape.vocab);
    const std::vector<double> before =
        host_values(model.logits, static_cast<std::size_t>(batch * t) * v);

    const std::int64_t changed = 3;  // position in the first sequence
    input[static_cast<std::size_t>(changed)] = (input[static_cast<std::size_t>(changed)] + 1) % 256;
    model.set_batch(input, random_bytes(input.size(), 43), batch, t);
    model.forward(false);
    const std::vector<double> after =
        host_values(model.logits, static_cast<std::size_t>(batch * t) * v);
    for (std::int64_t r = 0; r < batch * t; ++r) {
      const bool unaffected = r < changed || r >= t;  // earlier positions, or the other sequence
      const bool same = std::memcmp(before.data() + r * shape.vocab, after.data() + r * shape.vocab,
                                    v * sizeof(double)) == 0;
      BOOST_TEST_CONTEXT("t " << t << ", row " << r) {
        BOOST_TEST(same == unaffected);
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(float_follows_double) {
  TinyGpt<double> reference(fsdp::test::tiny_gpt_shape(), 2, 51);
  TinyGpt<float> single(fsdp::test::tiny_gpt_shape(), 2, 51);
  const auto input = random_bytes(14, 52);
  const auto target = random_bytes(14, 53);
  reference.set_batch(input, target, 2, 7);
  single.set_batch(input, target, 2, 7);
  reference.zero_grads();
  single.zero_grads();
  const double expected = reference.forward(false);
  const double loss = single.forward(true);
  reference.backward(false);
  single.backward(true);
  BOOST_TEST(std::abs(loss - expected) <= 1e-4 * expected);
  for (const auto& entry : reference.grads) {
    const std::vector<double> want = host_values(entry.second, entry.second.size());
    const std::vector<double> got = host_values(single.grads.at(entry.first), want.size());
    double largest = 0;
    double error = 0;
    for (std::size_t e = 0; e < want.size(); ++e) {
      largest = std::max(largest, std::abs(want[e]));
      error = std::max(error, std::abs(got[e] - want[e]));
    }
    BOOST_TEST_CONTEXT(entry.first) {
      BOOST_TEST(error <= 1e-3 * largest);
    }
  }
}

BOOST_AUTO_TEST_CASE(shape_and_parameters) {
  GptShape shape = fsdp::test::tiny_gpt_shape();
  BOOST_TEST(shape.validation_error().empty());
  GptShape uneven = shape;
  uneven.heads = 3;
  BOOST_TEST(uneven.validation_error().find("multiple of heads") != std::string::npos);
  GptShape empty = shape;
  empty.layers = 0;
  BOOST_TEST(!empty.validation_error().empty());

  const std::int64_t c = shape.hidden;
  struct Expected {
    std::string name;
    std::vector<std::int64_t> dims;
    std::string unit;
  };
  std::vector<Expected> expected = {{"wte.weight", {256, c}, "embed"},
                                    {"wpe.weight", {shape.seq, c}, "embed"}};
  for (int l = 0; l < shape.layers; ++l) {
    const std::string h = "h" + std::to_string(l);
    for (const Expected& e : std::vector<Expected>{{"ln_1.weight", {c}, ""},
                                                   {"ln_1.bias", {c}, ""},
                                                   {"attn.c_attn.weight", {3 * c, c}, ""},
                                                   {"attn.c_attn.bias", {3 * c}, ""},
                                                   {"attn.c_proj.weight", {c, c}, ""},
                                                   {"attn.c_proj.bias", {c}, ""},
                                                   {"ln_2.weight", {c}, ""},
                                                   {"ln_2.bias", {c}, ""},
                                                   {"mlp.c_fc.weight", {4 * c, c}, ""},
                                                   {"mlp.c_fc.bias", {4 * c}, ""},
                                                   {"mlp.c_proj.weight", {c, 4 * c}, ""},
                                                   {"mlp.c_proj.bias", {c}, ""}}) {
      expected.push_back({h + "." + e.name, e.dims, h});
    }
  }
  expected.push_back({"ln_f.weight", {c}, "head"});
  expected.push_back({"ln_f.bias", {c}, "head"});

  const auto parameters = shape.parameters(fsdp::DType::f32);
  BOOST_TEST_REQUIRE(parameters.size() == expected.size());
  std::int64_t total = 0;
  for (std::size_t i = 0; i < parameters.size(); ++i) {
    BOOST_TEST_CONTEXT(expected[i].name) {
      BOOST_TEST(parameters[i].name == expected[i].name);
      BOOST_TEST(parameters[i].shape == expected[i].dims);
      BOOST_TEST(parameters[i].layer == expected[i].unit);
      BOOST_TEST((parameters[i].dtype == fsdp::DType::f32));
      BOOST_TEST(!parameters[i].always_gather);
    }
    total += parameters[i].numel();
  }
  const std::int64_t layers = shape.layers;
  const std::int64_t formula = 256 * c + shape.seq * c + layers * (12 * c * c + 13 * c) + 2 * c;
  BOOST_TEST(shape.parameter_count() == formula);
  BOOST_TEST(total == formula);
  BOOST_TEST(shape.flops_per_token() ==
             6 * (formula - shape.seq * c) + 12 * layers * c * shape.seq);

  // GPT-2 small with a byte vocabulary and seq 1024: 85M in the blocks.
  GptShape small{12, 768, 12, 1024, 256};
  BOOST_TEST(small.parameter_count() == 256 * 768 + 1024 * 768 + 12 * 7087872 + 2 * 768);
}

BOOST_AUTO_TEST_CASE(batch_outside_the_buffers_is_refused) {
  TinyGpt<double> model(fsdp::test::tiny_gpt_shape(), 1, 61);
  const auto p = model.param_access();
  const auto tokens = to_device(random_bytes(16, 62));
  BOOST_CHECK_THROW(embed_forward(model.shape, p, tokens, 1, 9, model.x[0]), fsdp::Error);
  BOOST_CHECK_THROW(
      block_forward(model.shape, 0, p, model.x[0], model.x[1], model.caches[0], model.work, 2, 8),
      fsdp::Error);
}

BOOST_AUTO_TEST_SUITE_END()
