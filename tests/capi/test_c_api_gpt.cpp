// The C API drives a transformer: fsdp-train's GPT-2 units (models/gpt.hpp) trained three AdamW
// steps through fsdp_begin_forward ... fsdp_finish_step, the tied output head reading and adding
// to wte.weight through fsdp_full and fsdp_grad in the head's scopes (fsdp_runtime_create_tied),
// and every block recomputed inside its backward scope (activation checkpointing: fsdp_full
// between fsdp_begin_backward and fsdp_end_backward). The same training through the C++ Runtime
// must end with the same parameters, bit for bit: the C calls add nothing and lose nothing.
#include <fsdp/fsdp.h>

#include <boost/test/unit_test.hpp>
#include <cmath>
#include <string>
#include <vector>

#include "../models/tiny_gpt_shape.hpp"
#include "device_access.hpp"
#include "fsdp/optim/optimizer.hpp"
#include "fsdp/runtime/runtime.hpp"
#include "fsdp/shard/sharding_strategy.hpp"
#include "models/gpt.hpp"
#include "models/loss.hpp"

using namespace fsdp_models;

namespace {

using Parameters = std::vector<std::vector<double>>;
using UnmanagedView =
    Kokkos::View<double*, fsdp::MemorySpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;

#define CHECK_C(call)                                                                         \
  do {                                                                                        \
    const int code_ = (call);                                                                 \
    BOOST_TEST_REQUIRE(code_ == FSDP_SUCCESS,                                                 \
                       #call << ": " << fsdp_error_name(code_) << ": " << fsdp_last_error()); \
  } while (0)

// Element e of parameter p: LayerNorm weights 1, everything else small and varied.
double initial_value(const std::string& name, std::size_t p, std::int64_t e) {
  if (name.find("ln_") != std::string::npos && name.find(".weight") != std::string::npos) {
    return 1.0;
  }
  return 0.02 * static_cast<double>((e * 7 + static_cast<std::int64_t>(p) * 13) % 23 - 11) / 11;
}

struct FillContext {
  std::string name;
  std::size_t index;
};

int fill(std::int64_t first, void* values, std::int64_t count, void* user_data) {
  const auto* context = static_cast<const FillContext*>(user_data);
  auto* out = static_cast<double*>(values);
  for (std::int64_t i = 0; i < count; ++i) {
    out[i] = initial_value(context->name, context->index, first + i);
  }
  return 0;
}

// Activations of one rank's batch, and its tokens: BATCH windows of seq bytes, per rank and step.
constexpr std::int64_t kBatch = 2;
constexpr int kSteps = 3;

struct Activations {
  explicit Activations(const GptShape& shape)
      : rows(kBatch * shape.seq),
        tokens("tokens", rows),
        targets("targets", rows),
        block_cache(shape, rows),
        head_cache(shape, rows),
        work(shape, rows),
        logits("logits", rows, shape.vocab),
        d_logits("d_logits", rows, shape.vocab),
        dx("dx", rows, shape.hidden) {
    for (std::int64_t l = 0; l <= shape.layers; ++l) {
      stream.emplace_back("stream", rows, shape.hidden);
    }
  }
  void load(int rank, int step) {
    auto tokens_host = Kokkos::create_mirror_view(tokens);
    auto targets_host = Kokkos::create_mirror_view(targets);
    for (std::int64_t r = 0; r < rows; ++r) {
      const std::int64_t byte = (r * 31 + rank * 17 + step * 5) % 256;
      tokens_host(r) = byte;
      targets_host(r) = (byte * 3 + 1) % 256;
    }
    Kokkos::deep_copy(tokens, tokens_host);
    Kokkos::deep_copy(targets, targets_host);
  }
  std::int64_t rows;
  Labels tokens, targets;
  std::vector<Matrix<double>> stream;
  GptBlockCache<double> block_cache;  // one: every block is recomputed in its backward scope
  GptHeadCache<double> head_cache;
  GptWorkspace<double> work;
  Matrix<double> logits, d_logits, dx;
};

// One training step of the units through `scopes`, whose begin(unit, backward), end(...),
// full(name), grad(name) and finish() are the C API's or the C++ Runtime's.
template <class Scopes>
void train_step(const GptShape& shape, Activations& a, Scopes& scopes) {
  const std::int64_t t = shape.seq;
  const auto full = [&](const std::string& name) { return scopes.full(name); };
  const auto grad = [&](const std::string& name) { return scopes.grad(name); };
  scopes.begin(GptShape::embed_unit(), false);
  embed_forward<double>(shape, full, a.tokens, kBatch, t, a.stream[0]);
  scopes.end(GptShape::embed_unit(), false);
  for (std::int64_t l = 0; l < shape.layers; ++l) {
    const auto k = static_cast<std::size_t>(l);
    scopes.begin(GptShape::block_unit(l), false);
    block_forward(shape, l, full, a.stream[k], a.stream[k + 1], a.block_cache, a.work, kBatch, t);
    scopes.end(GptShape::block_unit(l), false);
  }
  scopes.begin(GptShape::head_unit(), false);
  head_forward(shape, full, full("wte.weight"), a.stream.back(), a.logits, a.head_cache, kBatch, t);
  scopes.end(GptShape::head_unit(), false);
  softmax_cross_entropy<double>(a.logits, a.targets, a.rows, &a.d_logits, a.rows, 1.0);
  scopes.begin(GptShape::head_unit(), true);
  head_backward(shape, full, grad, full("wte.weight"), grad("wte.weight"), a.stream.back(),
                a.head_cache, a.work, a.d_logits, a.dx, kBatch, t);
  scopes.end(GptShape::head_unit(), true);
  for (std::int64_t l = shape.layers; l-- > 0;) {
    const auto k = static_cast<std::size_t>(l);
    scopes.begin(GptShape::block_unit(l), true);
    block_forward(shape, l, full, a.stream[k], a.stream[k + 1], a.block_cache, a.work, kBatch, t);
    block_backward(shape, l, full, grad, a.stream[k], a.block_cache, a.work, a.dx, a.dx, kBatch, t);
    scopes.end(GptShape::block_unit(l), true);
  }
  scopes.begin(GptShape::embed_unit(), true);
  embed_backward<double>(shape, grad, a.tokens, a.dx, kBatch, t);
  scopes.end(GptShape::embed_unit(), true);
  scopes.finish();
}

struct CScopes {
  fsdp_runtime_t runtime;
  void begin(const std::string& unit, bool backward) {
    CHECK_C(backward ? fsdp_begin_backward(runtime, unit.c_str())
                     : fsdp_begin_forward(runtime, unit.c_str()));
  }
  void end(const std::string& unit, bool backward) {
    CHECK_C(backward ? fsdp_end_backward(runtime, unit.c_str())
                     : fsdp_end_forward(runtime, unit.c_str()));
  }
  UnmanagedView full(const std::string& name) { return values(name, false); }
  UnmanagedView grad(const std::string& name) { return values(name, true); }
  void finish() { CHECK_C(fsdp_finish_step(runtime)); }
  UnmanagedView values(const std::string& name, bool gradient) {
    void* values = nullptr;
    std::int64_t numel = 0;
    CHECK_C(gradient ? fsdp_grad(runtime, name.c_str(), &values, &numel)
                     : fsdp_full(runtime, name.c_str(), &values, &numel));
    return UnmanagedView(static_cast<double*>(values), static_cast<std::size_t>(numel));
  }
};

struct CppScopes {
  fsdp::Runtime<double>& runtime;
  void begin(const std::string& unit, bool backward) {
    backward ? runtime.begin_backward(unit) : runtime.begin_forward(unit);
  }
  void end(const std::string& unit, bool backward) {
    backward ? runtime.end_backward(unit) : runtime.end_forward(unit);
  }
  fsdp::DeviceView<double> full(const std::string& name) { return runtime.full(name); }
  fsdp::DeviceView<double> grad(const std::string& name) { return runtime.grad(name); }
  void finish() { runtime.finish_step(); }
};

std::vector<std::string> unit_order(const GptShape& shape) {
  std::vector<std::string> order{GptShape::embed_unit()};
  for (std::int64_t l = 0; l < shape.layers; ++l) {
    order.push_back(GptShape::block_unit(l));
  }
  order.push_back(GptShape::head_unit());
  return order;
}

constexpr double kLr = 1e-2, kWeightDecay = 0.1;

Parameters train_through_the_c_api(const GptShape& shape, int rank) {
  const std::vector<fsdp::ParameterInfo> list = shape.parameters(fsdp::DType::f64);
  fsdp_model_t model = nullptr;
  CHECK_C(fsdp_model_create(FSDP_FLOAT64, &model));
  for (const fsdp::ParameterInfo& p : list) {
    CHECK_C(fsdp_model_add_parameter(model, p.name.c_str(), static_cast<int>(p.shape.size()),
                                     p.shape.data(), p.layer.c_str(), 0));
  }
  CHECK_C(fsdp_model_shard_comm(model, MPI_COMM_WORLD, "full"));
  for (std::size_t i = 0; i < list.size(); ++i) {
    FillContext context{list[i].name, i};
    CHECK_C(fsdp_model_init_with(model, list[i].name.c_str(), fill, &context));
  }
  const std::vector<std::string> order = unit_order(shape);
  std::vector<const char*> names;
  for (const std::string& unit : order) {
    names.push_back(unit.c_str());
  }
  const char* tied_parameter = "wte.weight";
  const std::string head = GptShape::head_unit();
  const char* tied_unit = head.c_str();
  fsdp_runtime_t runtime = nullptr;
  CHECK_C(fsdp_runtime_create_tied(model, static_cast<int>(names.size()), names.data(), 1, 2, 0,
                                   nullptr, 1, &tied_parameter, &tied_unit, &runtime));
  fsdp_optimizer_t adamw = nullptr;
  CHECK_C(fsdp_optimizer_create_adamw(model, kLr, 0.9, 0.999, 1e-8, kWeightDecay, &adamw));
  Activations activations(shape);
  CScopes scopes{runtime};
  for (int step = 0; step < kSteps; ++step) {
    activations.load(rank, step);
    train_step(shape, activations, scopes);
    CHECK_C(fsdp_optimizer_step(adamw));
    CHECK_C(fsdp_model_zero_grad(model));
  }
  Parameters whole;
  for (const fsdp::ParameterInfo& p : list) {
    whole.emplace_back(static_cast<std::size_t>(p.numel()));
    CHECK_C(fsdp_model_copy_parameter(model, p.name.c_str(), whole.back().data()));
  }
  fsdp_optimizer_destroy(adamw);
  fsdp_runtime_destroy(runtime);
  fsdp_model_destroy(model);
  return whole;
}

Parameters train_through_the_runtime(const GptShape& shape, int rank) {
  const std::vector<fsdp::ParameterInfo> list = shape.parameters(fsdp::DType::f64);
  fsdp::ProcessGroup group(MPI_COMM_WORLD);
  fsdp::ShardedModel<double> model(group, fsdp::FullSharding().make_plan(list, group.size()));
  for (std::size_t i = 0; i < list.size(); ++i) {
    const std::string& name = list[i].name;
    model.init_with(name, [&](std::int64_t first, double* values, std::int64_t count) {
      for (std::int64_t k = 0; k < count; ++k) {
        values[k] = initial_value(name, i, first + k);
      }
    });
  }
  fsdp::RuntimeOptions options;
  options.tied_parameters = {{"wte.weight", {GptShape::head_unit()}}};
  fsdp::Runtime<double> runtime(model, unit_order(shape), options);
  fsdp::OptimizerSettings settings;
  settings.lr = kLr;
  settings.weight_decay = kWeightDecay;
  fsdp::Optimizer<double> adamw("adamw", settings);
  Activations activations(shape);
  CppScopes scopes{runtime};
  for (int step = 0; step < kSteps; ++step) {
    activations.load(rank, step);
    train_step(shape, activations, scopes);
    adamw.step(model);
    model.zero_grad();
  }
  Parameters whole;
  for (const fsdp::ParameterInfo& p : list) {
    fsdp::ShardedUnit<double>& unit = model.unit_of(p.name);
    unit.gather();
    const auto values = fsdp::test::on_host(model.parameter(p.name).full());
    whole.emplace_back(values.data(), values.data() + values.size());
    unit.release();
  }
  return whole;
}

}  // namespace

BOOST_AUTO_TEST_CASE(the_c_api_trains_a_transformer_as_the_runtime_does) {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  const GptShape shape = fsdp::test::tiny_gpt_shape();
  const std::vector<fsdp::ParameterInfo> list = shape.parameters(fsdp::DType::f64);
  const Parameters through_c = train_through_the_c_api(shape, rank);
  const Parameters through_cpp = train_through_the_runtime(shape, rank);
  BOOST_TEST_REQUIRE(through_c.size() == list.size());
  double moved = 0;
  for (std::size_t p = 0; p < list.size(); ++p) {
    BOOST_TEST_CONTEXT(list[p].name) {
      BOOST_TEST(through_c[p] == through_cpp[p], boost::test_tools::per_element());
      for (std::size_t e = 0; e < through_c[p].size(); ++e) {
        moved =
            std::max(moved, std::abs(through_c[p][e] -
                                     initial_value(list[p].name, p, static_cast<std::int64_t>(e))));
      }
    }
  }
  BOOST_TEST(moved > 1e-3);  // the steps trained: AdamW moves each weight by about lr
}
