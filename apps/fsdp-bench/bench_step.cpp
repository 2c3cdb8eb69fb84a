// fsdp-bench step: one training step of fsdp-train's MLP with FSDP (prefetch on and off) against
// replicated data parallelism (every rank holds everything, gradients all-reduced) and against one
// rank training the same global batch, in the same run, with peak memory per rank.
#include <cstdio>
#include <memory>

#include "../common/barrier_without_spinning.hpp"
#include "../fsdp-train/mlp.hpp"
#include "benchmark.hpp"
#include "fsdp/optim/adam.hpp"
#include "fsdp/runtime/runtime.hpp"
#include "fsdp/shard/sharding_strategy.hpp"

namespace fsdp::bench {
namespace {

using fsdp_train::Matrix;
using fsdp_train::MlpShape;

struct StepOptions {
  std::int64_t width = 512;
  int layers = 6;
  std::int64_t local_batch = 32;
  int steps = 9;
};

// One way of training: its model, runtime and activations.
struct Trainer {
  std::string name;
  std::unique_ptr<ShardedModel<float>> model;
  std::unique_ptr<Runtime<float>> runtime;
  std::unique_ptr<Adam<float>> adam;
  std::vector<Matrix<float>> activations, deltas;
  std::int64_t rows = 0;

  Trainer(std::string label, ProcessGroup group, const MlpShape& shape, bool replicated,
          RuntimeOptions options, std::int64_t batch_rows)
      : name(std::move(label)), rows(batch_rows) {
    std::vector<ParameterInfo> parameters = shape.parameters(DType::f32);
    for (ParameterInfo& p : parameters) {
      p.always_gather = replicated;  // replicated data parallelism: nothing sharded
    }
    model = std::make_unique<ShardedModel<float>>(
        group, FullSharding().make_plan(parameters, group.size()));
    for (const ParameterInfo& p : parameters) {
      model->init_with(p.name, [](std::int64_t first, float* values, std::int64_t count) {
        for (std::int64_t i = 0; i < count; ++i) {
          values[i] = 0.01f * static_cast<float>((first + i) % 17) - 0.08f;
        }
      });
    }
    std::vector<std::string> order;
    for (std::size_t l = 0; l < shape.layers(); ++l) {
      order.push_back(MlpShape::unit(l));
    }
    runtime = std::make_unique<Runtime<float>>(*model, order, options);
    adam = std::make_unique<Adam<float>>(AdamOptions{});
    // activations[l]: the input of layer l; deltas[l]: d loss / d (output of layer l).
    for (std::size_t l = 0; l <= shape.layers(); ++l) {
      activations.emplace_back("activation", static_cast<std::size_t>(rows),
                               static_cast<std::size_t>(shape.widths[l]));
    }
    for (std::size_t l = 0; l < shape.layers(); ++l) {
      deltas.emplace_back("delta", static_cast<std::size_t>(rows),
                          static_cast<std::size_t>(shape.widths[l + 1]));
    }
    Kokkos::deep_copy(activations[0], 0.5f);
  }

  void step(const MlpShape& shape) {
    const std::size_t layers = shape.layers();
    for (std::size_t l = 0; l < layers; ++l) {
      auto scope = runtime->forward(MlpShape::unit(l));
      fsdp_train::layer_forward<float>(scope.full(MlpShape::weight(l)),
                                       scope.full(MlpShape::bias(l)), activations[l],
                                       activations[l + 1], rows, l + 1 < layers);
      scope.close();
    }
    // A stand-in loss gradient: the step's cost does not depend on its value.
    Kokkos::deep_copy(deltas[layers - 1], 1e-3f);
    for (std::size_t l = layers; l-- > 0;) {
      auto scope = runtime->backward(MlpShape::unit(l));
      fsdp_train::layer_backward<float>(scope.full(MlpShape::weight(l)),
                                        scope.grad(MlpShape::weight(l)),
                                        scope.grad(MlpShape::bias(l)), activations[l], deltas[l],
                                        l > 0 ? &deltas[l - 1] : nullptr, rows);
      scope.close();
    }
    runtime->finish_step();
    adam->step(*model);
    model->zero_grad();
  }
};

void run(const StepOptions& options, const CommonOptions& common) {
  ProcessGroup group(MPI_COMM_WORLD);
  const int n = group.size();
  MlpShape shape;
  for (int l = 0; l <= options.layers; ++l) {
    shape.widths.push_back(options.width);
  }
  RuntimeOptions prefetch;
  RuntimeOptions no_prefetch;
  no_prefetch.prefetch = false;
  std::vector<std::unique_ptr<Trainer>> trainers;
  trainers.push_back(std::make_unique<Trainer>("fsdp_prefetch", group, shape, false, prefetch,
                                               options.local_batch));
  trainers.push_back(std::make_unique<Trainer>("fsdp_no_prefetch", group, shape, false, no_prefetch,
                                               options.local_batch));
  trainers.push_back(
      std::make_unique<Trainer>("replicated", group, shape, true, prefetch, options.local_batch));
  // One rank alone trains the whole global batch; the others wait, sleeping, until it is done.
  std::unique_ptr<Trainer> alone;
  if (group.rank() == 0) {
    alone = std::make_unique<Trainer>("one_rank", ProcessGroup(MPI_COMM_SELF), shape, false,
                                      prefetch, options.local_batch * n);
  }

  // Interleaved: every round times one step of each, in rotating order.
  const std::size_t modes = trainers.size() + 1;
  std::vector<std::vector<double>> seconds(modes);
  for (int round = 0; round < options.steps + 1; ++round) {
    for (std::size_t k = 0; k < modes; ++k) {
      const std::size_t mode = (k + static_cast<std::size_t>(round)) % modes;
      group.barrier();
      const double start = MPI_Wtime();
      if (mode < trainers.size()) {
        trainers[mode]->step(shape);
      } else if (alone) {
        alone->step(shape);
      }
      const double elapsed = MPI_Wtime() - start;
      if (round > 0) {  // the first round warms up
        seconds[mode].push_back(elapsed);
      }
      if (mode == trainers.size()) {
        // Rank 0 trained alone: the others wait without spinning on the cores it computed on, so
        // that the baseline is one rank's step on an otherwise idle machine.
        fsdp_apps::barrier_without_spinning(group);
      }
    }
  }
  std::vector<double> medians(modes);
  for (std::size_t mode = 0; mode < modes; ++mode) {
    medians[mode] = median(slowest_rank(seconds[mode], group.mpi_comm()));
  }
  const double replicated_s = medians[2];
  const double one_rank_s = medians[modes - 1];
  if (group.rank() == 0 && !common.json) {
    std::printf(
        "fsdp-bench step: %d ranks, MLP of %d layers %lld wide (%.1f MB fp32), local "
        "batch %lld, Adam; median of %d steps of the slowest rank\n",
        n, options.layers, static_cast<long long>(options.width),
        static_cast<double>(shape.parameter_count()) * 4 / 1e6,
        static_cast<long long>(options.local_batch), options.steps);
    std::printf("%-17s %10s %13s %14s %13s %14s %13s %10s\n", "mode", "step (ms)", "/ replicated",
                "one rank / it", "peak MB/rank", "state MB/rank", "ready/scopes", "wait (ms)");
  }
  for (std::size_t mode = 0; mode < modes; ++mode) {
    Trainer* trainer = mode < trainers.size() ? trainers[mode].get() : alone.get();
    double memory[2] = {0, 0};
    double stats[3] = {0, 0, 0};
    if (trainer != nullptr) {
      memory[0] = static_cast<double>(trainer->model->memory().total_peak);
      memory[1] = static_cast<double>(trainer->model->memory().model_state());
      stats[0] = static_cast<double>(trainer->runtime->stats().ready_on_entry);
      stats[1] = static_cast<double>(trainer->runtime->stats().scopes);
      // Per timed step: the time scopes waited for gathers (communication not hidden).
      stats[2] = trainer->runtime->stats().wait_s / (options.steps + 1);
    }
    group.all_reduce(memory, 2, ReduceOp::max);
    group.all_reduce(stats, 3, ReduceOp::max);
    const std::string name = mode < trainers.size() ? trainers[mode]->name : "one_rank";
    nlohmann::json result = {{"benchmark", "step"},
                             {"mode", name},
                             {"ranks", n},
                             {"step_s", medians[mode]},
                             {"over_replicated", medians[mode] / replicated_s},
                             {"speedup_over_one_rank", one_rank_s / medians[mode]},
                             {"peak_bytes_per_rank", memory[0]},
                             {"model_state_bytes_per_rank", memory[1]},
                             {"scopes_ready_on_entry", stats[0]},
                             {"scopes", stats[1]},
                             {"gather_wait_s_per_step", stats[2]}};
    emit(common, group.rank(), result, [&] {
      std::printf("%-17s %10.2f %13.3f %14.3f %13.2f %14.2f %6.0f/%-6.0f %10.2f\n", name.c_str(),
                  medians[mode] * 1e3, medians[mode] / replicated_s, one_rank_s / medians[mode],
                  memory[0] / 1e6, memory[1] / 1e6, stats[0], stats[1], stats[2] * 1e3);
    });
  }
}

}  // namespace

void add_step(CLI::App& app, const CommonOptions& common) {
  auto options = std::make_shared<StepOptions>();
  CLI::App* sub = app.add_subcommand(
      "step", "training step of fsdp-train's MLP: FSDP (prefetch on/off), replicated, one rank");
  sub->add_option("--width", options->width, "width of every layer");
  sub->add_option("--layers", options->layers, "number of layers");
  sub->add_option("--local-batch", options->local_batch, "samples per rank and step");
  sub->add_option("--steps", options->steps, "timed steps per mode");
  sub->callback([options, &common] { run(*options, common); });
}

}  // namespace fsdp::bench
