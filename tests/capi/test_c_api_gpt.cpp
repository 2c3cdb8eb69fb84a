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

#include "../models/tiny_gpt_training.hpp"

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

using fsdp::test::kTinyGptBatch;
using fsdp::test::kTinyGptSteps;
using fsdp::test::tiny_gpt_initial_value;

struct FillContext {
  std::string name;
  std::size_t index;
};

int fill(std::int64_t first, void* values, std::int64_t count, void* user_data) {
  const auto* context = static_cast<const FillContext*>(user_data);
  auto* out = static_cast<double*>(values);
  for (std::int64_t i = 0; i < count; ++i) {
    out[i] = tiny_gpt_initial_value(context->name, context->index, first + i);
  }
  return 0;
}

// The C API as the runtime GptPasses drives: a scope is fsdp_begin_* .. fsdp_end_*, its
// parameters and gradients fsdp_full and fsdp_grad wrapped as Views.
class CScope {
 public:
  CScope(fsdp_runtime_t runtime, std::string unit, bool backward)
      : runtime_(runtime), unit_(std::move(unit)), backward_(backward) {
    CHECK_C(backward_ ? fsdp_begin_backward(runtime_, unit_.c_str())
                      : fsdp_begin_forward(runtime_, unit_.c_str()));
  }
  UnmanagedView full(const std::string& name) const { return values(name, false); }
  UnmanagedView grad(const std::string& name) const { return values(name, true); }
  bool trainable(const std::string&) const { return true; }  // this test freezes nothing
  void close() {
    CHECK_C(backward_ ? fsdp_end_backward(runtime_, unit_.c_str())
                      : fsdp_end_forward(runtime_, unit_.c_str()));
  }

 private:
  UnmanagedView values(const std::string& name, bool gradient) const {
    void* values = nullptr;
    std::int64_t numel = 0;
    CHECK_C(gradient ? fsdp_grad(runtime_, name.c_str(), &values, &numel)
                     : fsdp_full(runtime_, name.c_str(), &values, &numel));
    return UnmanagedView(static_cast<double*>(values), static_cast<std::size_t>(numel));
  }
  fsdp_runtime_t runtime_;
  std::string unit_;
  bool backward_;
};

struct CRuntime {
  fsdp_runtime_t runtime;
  CScope forward(const std::string& unit) { return CScope(runtime, unit, false); }
  CScope backward(const std::string& unit) { return CScope(runtime, unit, true); }
};

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
  const std::vector<std::string> order = shape.units();
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
  CHECK_C(fsdp_optimizer_create_adamw(model, fsdp::test::kTinyGptLr, 0.9, 0.999, 1e-8,
                                      fsdp::test::kTinyGptWeightDecay, &adamw));
  fsdp::test::TinyGptPasses passes(shape, true, kTinyGptBatch);
  CRuntime scopes{runtime};
  for (int step = 0; step < kTinyGptSteps; ++step) {
    fsdp::test::load_tiny_gpt_batch(passes, rank, step);
    passes.train(scopes, kTinyGptBatch, 1.0);
    CHECK_C(fsdp_finish_step(runtime));
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

}  // namespace

BOOST_AUTO_TEST_CASE(the_c_api_trains_a_transformer_as_the_runtime_does) {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  const GptShape shape = fsdp::test::tiny_gpt_shape();
  const std::vector<fsdp::ParameterInfo> list = shape.parameters(fsdp::DType::f64);
  const Parameters through_c = train_through_the_c_api(shape, rank);
  const Parameters through_cpp = fsdp::test::train_tiny_gpt_through_the_runtime(shape, rank);
  BOOST_TEST_REQUIRE(through_c.size() == list.size());
  double moved = 0;
  for (std::size_t p = 0; p < list.size(); ++p) {
    BOOST_TEST_CONTEXT(list[p].name) {
      BOOST_TEST(through_c[p] == through_cpp[p], boost::test_tools::per_element());
      for (std::size_t e = 0; e < through_c[p].size(); ++e) {
        moved = std::max(
            moved, std::abs(through_c[p][e] -
                            tiny_gpt_initial_value(list[p].name, p, static_cast<std::int64_t>(e))));
      }
    }
  }
  BOOST_TEST(moved > 1e-3);  // the steps trained: AdamW moves each weight by about lr
}
