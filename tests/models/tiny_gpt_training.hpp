// The training that the C API's and the Fortran module's transformer tests compare with: the tiny
// GPT (tiny_gpt_shape.hpp) in fp64, its initial values and batches, trained kSteps AdamW steps
// through the C++ Runtime (full sharding, the head tied to wte.weight, every block recomputed in
// its backward scope). Each binding trains the same steps through its own calls and must end with
// these parameters, bit for bit.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "device_access.hpp"
#include "fsdp/optim/optimizer.hpp"
#include "fsdp/runtime/runtime.hpp"
#include "fsdp/shard/sharding_strategy.hpp"
#include "models/gpt_passes.hpp"
#include "tiny_gpt_shape.hpp"

namespace fsdp::test {

// Sequences per rank and step, the steps and AdamW's settings.
constexpr std::int64_t kTinyGptBatch = 2;
constexpr int kTinyGptSteps = 3;
constexpr double kTinyGptLr = 1e-2, kTinyGptWeightDecay = 0.1;

// Every block recomputed inside its backward scope (activation checkpointing).
using TinyGptPasses = fsdp_models::GptPasses<double>;

// Element e of parameter p: LayerNorm weights 1, everything else small and varied.
inline double tiny_gpt_initial_value(const std::string& name, std::size_t p, std::int64_t e) {
  if (name.find("ln_") != std::string::npos && name.find(".weight") != std::string::npos) {
    return 1.0;
  }
  return 0.02 * static_cast<double>((e * 7 + static_cast<std::int64_t>(p) * 13) % 23 - 11) / 11;
}

// Rank `rank`'s kTinyGptBatch windows of seq bytes at step `step`.
inline void load_tiny_gpt_batch(TinyGptPasses& passes, int rank, int step) {
  auto tokens = Kokkos::create_mirror_view(passes.tokens());
  auto targets = Kokkos::create_mirror_view(passes.targets());
  for (std::size_t r = 0; r < tokens.size(); ++r) {
    const auto byte = static_cast<std::int64_t>((r * 31 + rank * 17 + step * 5) % 256);
    tokens(r) = byte;
    targets(r) = (byte * 3 + 1) % 256;
  }
  Kokkos::deep_copy(passes.tokens(), tokens);
  Kokkos::deep_copy(passes.targets(), targets);
}

// The whole of every parameter after the steps, in the order of shape.parameters().
inline std::vector<std::vector<double>> train_tiny_gpt_through_the_runtime(
    const fsdp_models::GptShape& shape, int rank) {
  const std::vector<ParameterInfo> list = shape.parameters(DType::f64);
  ProcessGroup group(MPI_COMM_WORLD);
  ShardedModel<double> model(group, FullSharding().make_plan(list, group.size()));
  for (std::size_t i = 0; i < list.size(); ++i) {
    const std::string& name = list[i].name;
    model.init_with(name, [&](std::int64_t first, double* values, std::int64_t count) {
      for (std::int64_t k = 0; k < count; ++k) {
        values[k] = tiny_gpt_initial_value(name, i, first + k);
      }
    });
  }
  RuntimeOptions options;
  options.tied_parameters = {{"wte.weight", {fsdp_models::GptShape::head_unit()}}};
  Runtime<double> runtime(model, shape.units(), options);
  OptimizerSettings settings;
  settings.lr = kTinyGptLr;
  settings.weight_decay = kTinyGptWeightDecay;
  Optimizer<double> adamw("adamw", settings);
  TinyGptPasses passes(shape, true, kTinyGptBatch);
  for (int step = 0; step < kTinyGptSteps; ++step) {
    load_tiny_gpt_batch(passes, rank, step);
    passes.train(runtime, kTinyGptBatch, 1.0);
    runtime.finish_step();
    adamw.step(model);
    model.zero_grad();
  }
  std::vector<std::vector<double>> whole;
  for (const ParameterInfo& p : list) {
    ShardedUnit<double>& unit = model.unit_of(p.name);
    unit.gather();
    const auto values = on_host(model.parameter(p.name).full());
    whole.emplace_back(values.data(), values.data() + values.size());
    unit.release();
  }
  return whole;
}

}  // namespace fsdp::test
