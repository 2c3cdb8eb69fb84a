// fsdp-bench gather: gathering a unit of typical layer sizes against one raw MPI_Allgather of the
// same total bytes. fsdp-bench memory: per-rank peak of a sharded training step, as fsdp tracks it
// and as the kernel measures it (VmHWM), against the plan's estimate and unsharded training.
#include <malloc.h>

#include <cmath>
#include <cstdio>
#include <memory>
#include <utility>

#include "../common/plural.hpp"
#include "benchmark.hpp"
#include "fsdp/optim/adam.hpp"
#include "fsdp/shard/plan_estimate.hpp"
#include "fsdp/shard/sharding_strategy.hpp"
#include "fsdp/unit/sharded_model.hpp"
#include "peak_memory.hpp"

namespace fsdp::bench {
namespace {

void check(int rc, const char* what) {
  if (rc != MPI_SUCCESS) {
    throw Error(std::string("fsdp-bench: ") + what + " failed with MPI error " +
                std::to_string(rc));
  }
}

// The parameters of one transformer block of width hidden (attention and MLP, with biases and
// two layer norms), all in unit `layer`.
std::vector<ParameterInfo> transformer_block(std::int64_t hidden, const std::string& layer) {
  const std::int64_t h = hidden;
  return {{layer + ".ln1.weight", {h}, DType::f32, layer, false},
          {layer + ".ln1.bias", {h}, DType::f32, layer, false},
          {layer + ".attn.qkv.weight", {3 * h, h}, DType::f32, layer, false},
          {layer + ".attn.qkv.bias", {3 * h}, DType::f32, layer, false},
          {layer + ".attn.proj.weight", {h, h}, DType::f32, layer, false},
          {layer + ".attn.proj.bias", {h}, DType::f32, layer, false},
          {layer + ".ln2.weight", {h}, DType::f32, layer, false},
          {layer + ".ln2.bias", {h}, DType::f32, layer, false},
          {layer + ".mlp.fc.weight", {4 * h, h}, DType::f32, layer, false},
          {layer + ".mlp.fc.bias", {4 * h}, DType::f32, layer, false},
          {layer + ".mlp.proj.weight", {h, 4 * h}, DType::f32, layer, false},
          {layer + ".mlp.proj.bias", {h}, DType::f32, layer, false}};
}

struct GatherOptions {
  std::vector<std::int64_t> hidden = {256, 512, 1024, 2048};
  int repeats = 41;
};

void run_gather(const GatherOptions& options, const CommonOptions& common) {
  ProcessGroup group(MPI_COMM_WORLD);
  const int n = group.size();
  if (group.rank() == 0 && !common.json) {
    std::printf(
        "fsdp-bench gather: %s; a transformer block (12 parameters, fp32) gathered "
        "by ShardedUnit::gather against one MPI_Allgather of the same bytes, back to back in "
        "each round; times: median of the slowest rank; ratio: median over the rounds of raw "
        "time / unit time\n",
        fsdp_apps::count_of(n, "rank").c_str());
    std::printf("%8s %12s %14s %14s %10s\n", "hidden", "unit bytes", "unit (ms)", "raw (ms)",
                "ratio");
  }
  for (std::int64_t hidden : options.hidden) {
    ShardedModel<float> model(group,
                              FullSharding().make_plan(transformer_block(hidden, "block"), n));
    ShardedUnit<float>& unit = model.unit("block");
    std::int64_t flat = 0;  // one rank's padded pieces: what each rank contributes
    for (auto& p : unit.parameters()) {
      flat += model.plan().padded_shard_numel(p.name());
    }
    Kokkos::View<float*, Kokkos::HostSpace> chunk("chunk", static_cast<std::size_t>(flat));
    Kokkos::View<float*, Kokkos::HostSpace> full("full", static_cast<std::size_t>(flat * n));
    std::vector<double> unit_s, raw_s;
    for (int i = 0; i < options.repeats + 1; ++i) {
      double t_unit = 0, t_raw = 0;
      for (int half = 0; half < 2; ++half) {
        const bool raw_now = (half == 0) == (i % 2 == 0);
        check(MPI_Barrier(group.mpi_comm()), "MPI_Barrier");
        const double start = MPI_Wtime();
        if (raw_now) {
          check(MPI_Allgather(chunk.data(), static_cast<int>(flat), MPI_FLOAT, full.data(),
                              static_cast<int>(flat), MPI_FLOAT, group.mpi_comm()),
                "MPI_Allgather");
          t_raw = MPI_Wtime() - start;
        } else {
          unit.gather();
          t_unit = MPI_Wtime() - start;
          unit.release();
        }
      }
      if (i > 0) {
        unit_s.push_back(t_unit);
        raw_s.push_back(t_raw);
      }
    }
    const std::vector<double> unit_slowest = slowest_rank(unit_s, group.mpi_comm());
    const std::vector<double> raw_slowest = slowest_rank(raw_s, group.mpi_comm());
    const double unit_median = median(unit_slowest);
    const double raw_median = median(raw_slowest);
    // The ratio of each round's two gathers, back to back: the VM's pace drifts between rounds
    // by more than the difference measured, and a ratio of medians mixes rounds.
    std::vector<double> ratios;
    for (std::size_t i = 0; i < unit_slowest.size(); ++i) {
      ratios.push_back(raw_slowest[i] / unit_slowest[i]);
    }
    const double ratio = median(ratios);
    const std::int64_t bytes = unit.full_bytes();
    nlohmann::json result = {{"benchmark", "gather"},    {"ranks", n},
                             {"hidden", hidden},         {"unit_bytes", bytes},
                             {"unit_s", unit_median},    {"raw_allgather_s", raw_median},
                             {"throughput_ratio", ratio}};
    emit(common, group.rank(), result, [&] {
      std::printf("%8lld %12lld %14.3f %14.3f %10.3f\n", static_cast<long long>(hidden),
                  static_cast<long long>(bytes), unit_median * 1e3, raw_median * 1e3, ratio);
    });
  }
}

struct MemoryOptions {
  std::int64_t hidden = 2048;
  int layers = 12;
  std::string strategy = "full";
  std::vector<std::string> modes = {"full_shard", "shard_grad_op", "shard_optimizer", "no_shard"};
  std::vector<std::string> precisions = {"fp32", "bf16", "fp16"};
  // The 16-bit rows' UnitOptions::grad_dtype: fp32 or bf16 (kept gradients in 2 bytes).
  std::string grad_dtype = "fp32";
};

// What one way of training held on one rank at its peak, by fsdp's tracker and by the kernel.
struct MemoryRow {
  std::int64_t peak = 0, state = 0, transient = 0, resident_peak = 0, resident_added = 0;
};

// Training steps of an MLP of `layers` square layers with biases (a few hundred MB of fp32
// parameters) in `mode` and `precision` (16-bit gathers and reductions over fp32 masters), unit
// by unit as the runtime runs them: gather; release after the forward unless the mode keeps the
// unit gathered until its backward; gather again if released, write the gradients, release,
// reduce-scatter; then Adam on the pieces. The figures are those of the second step: the first
// makes Adam's moments and fills the buffer pool, which every later step holds.
MemoryRow memory_of_a_step(ProcessGroup& group, const ShardingPlan& plan, ShardingMode mode,
                           DType precision, DType grad_dtype) {
  const PeakMemory before_the_model;
  ShardedModelOptions options;
  options.unit.mode = mode;
  options.unit.param_dtype = precision;
  options.unit.reduce_dtype = precision;
  options.unit.grad_dtype = grad_dtype;
  ShardedModel<float> model(group, plan, options);
  for (const ParameterInfo& p : plan.parameters()) {
    model.init_with(p.name, [](std::int64_t first, float* values, std::int64_t count) {
      for (std::int64_t i = 0; i < count; ++i) {
        values[i] = static_cast<float>(1e-3 * std::sin(0.001 * static_cast<double>(first + i)));
      }
    });
  }
  Adam<float> adam(AdamOptions{});
  const auto step = [&] {
    for (std::size_t u = 0; u < model.unit_count(); ++u) {
      model.unit(u).gather();
      if (!model.unit(u).stays_gathered()) {
        model.unit(u).release();
      }
    }
    for (std::size_t u = model.unit_count(); u-- > 0;) {
      ShardedUnit<float>& unit = model.unit(u);
      if (unit.state() == UnitState::sharded) {
        unit.gather();
      }
      for (auto& p : unit.parameters()) {
        Kokkos::deep_copy(p.grad(), 1e-3f);
      }
      unit.release();
      unit.reduce_scatter_grads();
    }
    adam.step(model);
    model.zero_grad();
  };
  step();
  model.reset_memory_peaks();
  const PeakMemory resident;  // the kernel's count of the second step: an independent check
  step();
  const MemoryReport& report = model.memory();
  MemoryRow row;
  row.peak = report.total_peak;
  row.state = report.model_state();
  row.transient = report.peak_of(MemoryCategory::gathered_parameters) +
                  report.peak_of(MemoryCategory::full_gradients) +
                  report.peak_of(MemoryCategory::communication);
  row.resident_peak = std::int64_t{1024} * resident.peak_kb();
  row.resident_added = std::int64_t{1024} * (resident.peak_kb() - before_the_model.rss_before_kb());
  return row;
}

void run_memory(const MemoryOptions& options, const CommonOptions& common) {
  ProcessGroup group(MPI_COMM_WORLD);
  const int n = group.size();
  std::vector<ParameterInfo> parameters;
  for (int k = 0; k < options.layers; ++k) {
    const std::string layer = "layer" + std::to_string(k);
    parameters.push_back(
        {layer + ".weight", {options.hidden, options.hidden}, DType::f32, layer, false});
    parameters.push_back({layer + ".bias", {options.hidden}, DType::f32, layer, false});
  }
  const ShardingPlan plan = make_strategy(options.strategy)->make_plan(parameters, n);
  const PlanEstimate unsharded = estimate(plan, {OptimizerKind::adam, Precision::fp32});
  if (group.rank() == 0 && !common.json) {
    std::printf(
        "fsdp-bench memory: %s, %d layers of %lld x %lld fp32 (%.1f MB of parameters), "
        "strategy %s, Adam, 16-bit rows keep gradients in %s; the second training step of each "
        "row, the fullest rank's figures\n",
        fsdp_apps::count_of(n, "rank").c_str(), options.layers,
        static_cast<long long>(options.hidden), static_cast<long long>(options.hidden),
        unsharded.total_elements * 4 / 1e6, options.strategy.c_str(), options.grad_dtype.c_str());
    std::printf(
        "peak: fsdp's tracked buffers; estimate: fsdp::estimate's persistent + working set "
        "(fsdp-plan); resident: the kernel's peak resident set (VmHWM); added: minus the "
        "resident set before the model was built\n");
    std::printf("%-16s %5s %11s %14s %11s %15s %10s %14s %11s\n", "mode", "prec", "peak (MB)",
                "estimate (MB)", "state (MB)", "transient (MB)", "peak/unsh", "resident (MB)",
                "added (MB)");
  }
  for (const std::string& mode_name : options.modes) {
    const ShardingMode mode = parse_sharding_mode(mode_name);
    for (const std::string& precision_name : options.precisions) {
      const DType precision = parse_dtype(precision_name);
      const DType grad_dtype =
          precision == DType::f32 ? DType::f32 : parse_dtype(options.grad_dtype);
      const MemoryRow mine = memory_of_a_step(group, plan, mode, precision, grad_dtype);
      malloc_trim(0);  // the next row starts from a process that gave this one's memory back
      MemoryRow most;
      for (auto [field, out] : {std::pair{&MemoryRow::peak, &most.peak},
                                {&MemoryRow::state, &most.state},
                                {&MemoryRow::transient, &most.transient},
                                {&MemoryRow::resident_peak, &most.resident_peak},
                                {&MemoryRow::resident_added, &most.resident_added}}) {
        *out = mine.*field;
        group.all_reduce(Kokkos::DefaultHostExecutionSpace(), fsdp::host_view(out, 1),
                         ReduceOp::max);
      }
      EstimateOptions estimate_options{
          OptimizerKind::adam, precision == DType::f32 ? Precision::fp32 : Precision::mixed, mode};
      estimate_options.keeps_16_bit_gradients = grad_dtype == DType::bf16;
      const PlanEstimate planned = estimate(plan, estimate_options);
      const std::int64_t estimate_bytes = planned.peak_bytes();
      const double over_unsharded = static_cast<double>(most.peak) /
                                    static_cast<double>(unsharded.unsharded_persistent_bytes);
      nlohmann::json result = {{"benchmark", "memory"},
                               {"ranks", n},
                               {"mode", name_of(mode)},
                               {"precision", name_of(precision)},
                               {"grad_dtype", name_of(grad_dtype)},
                               {"peak_bytes", most.peak},
                               {"estimate_bytes", estimate_bytes},
                               {"model_state_bytes", most.state},
                               {"transient_peak_bytes", most.transient},
                               {"unsharded_bytes", unsharded.unsharded_persistent_bytes},
                               {"peak_over_unsharded", over_unsharded},
                               {"resident_peak_bytes", most.resident_peak},
                               {"resident_added_bytes", most.resident_added}};
      emit(common, group.rank(), result, [&] {
        std::printf("%-16s %5s %11.1f %14.1f %11.1f %15.1f %10.3f %14.1f %11.1f\n", name_of(mode),
                    name_of(precision), most.peak / 1e6, estimate_bytes / 1e6, most.state / 1e6,
                    most.transient / 1e6, over_unsharded, most.resident_peak / 1e6,
                    most.resident_added / 1e6);
      });
    }
  }
}

}  // namespace

void add_gather(CLI::App& app, const CommonOptions& common) {
  auto options = std::make_shared<GatherOptions>();
  CLI::App* sub = app.add_subcommand(
      "gather", "ShardedUnit::gather of a transformer block against one raw MPI_Allgather");
  sub->add_option("--hidden", options->hidden, "block widths to measure");
  sub->add_option("--repeats", options->repeats, "repeats per width")
      ->check(CLI::Range(1, 1 << 20));
  sub->callback([options, &common] { run_gather(*options, common); });
}

void add_memory(CLI::App& app, const CommonOptions& common) {
  auto options = std::make_shared<MemoryOptions>();
  CLI::App* sub = app.add_subcommand(
      "memory",
      "per-rank peak of one sharded training step (tracked and VmHWM) against the plan and "
      "unsharded");
  sub->add_option("--hidden", options->hidden, "width of the square layers");
  sub->add_option("--layers", options->layers, "number of layers");
  sub->add_option("--strategy", options->strategy, "full, layerwise or hybrid");
  sub->add_option("--mode", options->modes, "sharding modes, comma separated")
      ->delimiter(',')
      ->check(CLI::IsMember({"full_shard", "shard_grad_op", "shard_optimizer", "no_shard"}))
      ->capture_default_str();
  sub->add_option("--precision", options->precisions,
                  "precisions, comma separated: fp32, bf16, fp16 (16-bit gathers and reductions "
                  "over fp32 masters)")
      ->delimiter(',')
      ->check(CLI::IsMember({"fp32", "bf16", "fp16"}))
      ->capture_default_str();
  sub->add_option("--grad-dtype", options->grad_dtype,
                  "the 16-bit rows' kept gradients (UnitOptions::grad_dtype): fp32, or bf16 (2 "
                  "bytes, the ZeRO paper's)")
      ->check(CLI::IsMember({"fp32", "bf16"}))
      ->capture_default_str();
  sub->callback([options, &common] { run_memory(*options, common); });
}

}  // namespace fsdp::bench
