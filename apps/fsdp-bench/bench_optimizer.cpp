// fsdp-bench optimizer: the AdamW step on this rank's shards in GB/s of memory traffic, against a
// device-to-device copy of as many bytes in fsdp::MemorySpace, in the same run. An element-wise
// optimizer is bound by memory bandwidth: 0.8 of copy bandwidth or more means the update kernel
// is as good as memory allows.
#include <mpi.h>

#include <Kokkos_Core.hpp>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "../common/plural.hpp"
#include "benchmark.hpp"
#include "fsdp/comm/process_group.hpp"
#include "fsdp/core/memory_space.hpp"
#include "fsdp/optim/adam.hpp"
#include "fsdp/shard/sharding_strategy.hpp"
#include "fsdp/unit/sharded_model.hpp"

namespace fsdp::bench {
namespace {

struct OptimizerOptions {
  std::int64_t numel = 100'000'000;  // parameter elements of the model, sharded over the ranks
  int repeats = 5;
};

void run_optimizer(const OptimizerOptions& o, const CommonOptions& common) {
  require(o.numel >= 1 && o.repeats >= 1, "optimizer: --numel and --repeats must be >= 1");
  ProcessGroup group(MPI_COMM_WORLD);
  const std::vector<ParameterInfo> parameters = {{"weight", {o.numel}, DType::f32, "layer", false}};
  ShardedModel<float> model(group, make_strategy("full")->make_plan(parameters, group.size()));
  ShardedUnit<float>& unit = model.unit(0);
  // One gradient, reduce-scattered once: the step then reuses it (AdamW reads it every step).
  unit.gather();
  Kokkos::deep_copy(unit.parameter("weight").grad(), 1e-3f);
  unit.reduce_scatter_grads();
  unit.release();

  AdamOptions adamw;
  adamw.decoupled_weight_decay = true;
  adamw.weight_decay = 0.01;
  Adam<float> optimizer(adamw);
  optimizer.step(model);  // creates the moments: not timed
  const auto piece = static_cast<std::int64_t>(unit.parameter("weight").shard_size());

  // Per element AdamW reads parameter, gradient and both moments and writes parameter and both
  // moments: 7 floats. A copy of B bytes reads and writes them: 2 B.
  const double step_bytes = 7.0 * sizeof(float) * static_cast<double>(piece);
  DeviceView<float> from("fsdp-bench::copy_from", static_cast<std::size_t>(piece));
  DeviceView<float> to("fsdp-bench::copy_to", static_cast<std::size_t>(piece));
  Kokkos::deep_copy(from, 1.0f);
  Kokkos::deep_copy(to, 0.0f);
  const double copy_bytes = 2.0 * sizeof(float) * static_cast<double>(piece);

  std::vector<double> step_s, copy_s;
  for (int r = 0; r < o.repeats; ++r) {
    group.barrier();
    double start = MPI_Wtime();
    optimizer.step(model);  // fences before it returns
    step_s.push_back(MPI_Wtime() - start);
    start = MPI_Wtime();
    Kokkos::deep_copy(to, from);
    ExecutionSpace().fence();
    copy_s.push_back(MPI_Wtime() - start);
  }
  const double step_time = median(slowest_rank(step_s, MPI_COMM_WORLD));
  const double copy_time = median(slowest_rank(copy_s, MPI_COMM_WORLD));
  const double step_gbs = step_bytes / step_time / 1e9;
  const double copy_gbs = copy_bytes / copy_time / 1e9;
  const nlohmann::json result = {
      {"benchmark", "optimizer"},    {"optimizer", "adamw"},
      {"ranks", group.size()},       {"memory_space", MemorySpace::name()},
      {"elements_per_rank", piece},  {"step_s", step_time},
      {"step_gb_per_s", step_gbs},   {"copy_gb_per_s", copy_gbs},
      {"ratio", step_gbs / copy_gbs}};
  emit(common, group.rank(), result, [&] {
    std::printf("optimizer: AdamW step on %lld fp32 elements per rank (%s, %s), median of %d\n",
                static_cast<long long>(piece), fsdp_apps::count_of(group.size(), "rank").c_str(),
                MemorySpace::name(), o.repeats);
    std::printf("  step %.2f ms: %.1f GB/s of memory traffic (7 x 4 B per element)\n",
                step_time * 1e3, step_gbs);
    std::printf("  copy of %.0f MB in the same space: %.1f GB/s (read + write)\n",
                static_cast<double>(piece) * sizeof(float) / 1e6, copy_gbs);
    std::printf("  ratio %.2f (goal 0.8 or more)\n", step_gbs / copy_gbs);
  });
}

}  // namespace

void add_optimizer(CLI::App& app, const CommonOptions& common) {
  auto options = std::make_shared<OptimizerOptions>();
  CLI::App* sub = app.add_subcommand(
      "optimizer", "AdamW step in GB/s of memory traffic against a copy in the same memory space");
  sub->add_option("--numel", options->numel, "parameter elements, sharded over the ranks");
  sub->add_option("--repeats", options->repeats, "timed steps (the median is reported)")
      ->check(CLI::Range(1, 1 << 20));
  sub->callback([options, &common] { run_optimizer(*options, common); });
}

}  // namespace fsdp::bench
