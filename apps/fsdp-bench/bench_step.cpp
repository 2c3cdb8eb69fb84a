// fsdp-bench step: one training step of fsdp-train's MLP in every sharding mode (full_shard with
// prefetch on and off, shard_grad_op, shard_optimizer, and no_shard: replicated data parallelism,
// the baseline), optionally hybrid-sharded over groups of G ranks, and one rank training the same
// global batch, all in the same run: step time, memory per rank, and the bytes each rank sends
// per step against the formula of the plan's estimate (docs/plans.md).
#include <cstdio>
#include <memory>
#include <optional>
#ifdef __GLIBC__  // defined by the C library's headers: after <cstdio>
#include <malloc.h>
#endif

#include "../common/barrier_without_spinning.hpp"
#include "../fsdp-train/mlp.hpp"
#include "benchmark.hpp"
#include "counting_backend.hpp"
#include "fsdp/comm/hybrid_groups.hpp"
#include "fsdp/core/error.hpp"
#include "fsdp/optim/adam.hpp"
#include "fsdp/runtime/runtime.hpp"
#include "fsdp/shard/plan_estimate.hpp"
#include "fsdp/shard/sharding_strategy.hpp"
#include "peak_memory.hpp"

namespace fsdp::bench {
namespace {

using fsdp_train::Matrix;
using fsdp_train::MlpShape;

struct StepOptions {
  std::int64_t width = 512;
  int layers = 6;
  std::int64_t local_batch = 32;
  int steps = 9;
  int shard_group_size = 0;  // > 0 and < ranks: also every mode hybrid-sharded over groups of G
};

// One way of training: a row of the table.
struct Way {
  std::string name;
  ShardingMode mode = ShardingMode::full_shard;
  // fp32 is the units' only precision today. Mixed precision would be one more value here: a row
  // per mode with Precision::mixed, which sets the units' option and gives the estimate's bytes.
  Precision precision = Precision::fp32;
  bool prefetch = true;
  int shard_group_size = 1;  // G; the group's size: no replicas
  bool one_rank = false;     // rank 0 alone, the whole global batch
};

// Bytes this rank sent in a step, by the estimate's categories.
struct StepBytes {
  std::int64_t gather = 0;            // parameter gathers in the shard group
  std::int64_t gradient = 0;          // gradient reductions in the shard group
  std::int64_t replica_gradient = 0;  // everything sent to the replicas
  std::int64_t total() const { return gather + gradient + replica_gradient; }
  bool operator==(const StepBytes& o) const {
    return gather == o.gather && gradient == o.gradient && replica_gradient == o.replica_gradient;
  }
};

// One way of training: its groups, model, runtime and activations.
struct Trainer {
  Way way;
  ProcessGroup shard;                    // the ranks the model is split over
  std::optional<ProcessGroup> replicas;  // hybrid sharding: the ranks holding the same pieces
  std::unique_ptr<ShardedModel<float>> model;
  std::unique_ptr<Runtime<float>> runtime;
  std::unique_ptr<Adam<float>> adam;
  std::vector<Matrix<float>> activations, deltas;
  std::int64_t rows = 0;
  std::vector<StepBytes> sent;  // per timed step

  // group: a counting group (counting_group) of every rank that trains this way.
  Trainer(Way how, ProcessGroup group, const MlpShape& shape, std::int64_t batch_rows)
      : way(std::move(how)), shard(group), rows(batch_rows) {
    // Mixed precision: set the units' option from way.precision here once they have one.
    require(way.precision == Precision::fp32, "fsdp-bench step: the units train in fp32 only");
    ShardedModelOptions options;
    options.unit.mode = way.mode;
    if (way.shard_group_size < group.size()) {
      HybridGroups groups = make_hybrid_groups(group, way.shard_group_size);
      shard = groups.shard;
      replicas = groups.replicate;
      options.unit.replicas = groups.replicate;
    }
    const std::vector<ParameterInfo> parameters = shape.parameters(DType::f32);
    model = std::make_unique<ShardedModel<float>>(
        shard, FullSharding().make_plan(parameters, shard.size()), options);
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
    RuntimeOptions runtime_options;
    runtime_options.prefetch = way.prefetch;
    runtime = std::make_unique<Runtime<float>>(*model, order, runtime_options);
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

  // What this rank sent so far on the model's groups.
  StepBytes sent_so_far() const {
    const SentBytes in_group = sent_by(shard);
    return {in_group.gathers, in_group.reductions, replicas ? sent_by(*replicas).total() : 0};
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

// What the estimate says this rank sends per step in one way of training (Full sharding of the
// MLP over `world` ranks, Adam), and what the runtime is expected to send: the last unit of the
// forward stays gathered for its backward (RuntimeOptions::keep_gathered_until_backward), so its
// second gather, which the formula counts, never happens.
struct Formula {
  RankEstimate estimate;
  std::int64_t kept_unit_gather = 0;  // the formula's backward gather of the last unit
  StepBytes expected;
};

Formula formula(const Way& way, const MlpShape& shape, int world, int rank) {
  const EstimateOptions options{OptimizerKind::adam, way.precision, way.mode, way.shard_group_size};
  const std::vector<ParameterInfo> parameters = shape.parameters(DType::f32);
  std::vector<ParameterInfo> last_unit;
  for (const ParameterInfo& p : parameters) {
    if (p.unit() == MlpShape::unit(shape.layers() - 1)) {
      last_unit.push_back(p);
    }
  }
  const auto r = static_cast<std::size_t>(rank);
  Formula f;
  f.estimate = estimate(FullSharding().make_plan(parameters, world), options).ranks[r];
  f.kept_unit_gather = estimate(FullSharding().make_plan(last_unit, world), options)
                           .ranks[r]
                           .backward_gather_send_bytes;
  f.expected = {f.estimate.forward_gather_send_bytes + f.estimate.backward_gather_send_bytes -
                    f.kept_unit_gather,
                f.estimate.gradient_send_bytes, f.estimate.replica_gradient_send_bytes};
  return f;
}

// The rows: every mode over all ranks (full_shard also without prefetch), every mode hybrid-sharded
// over groups of G when asked, and one rank.
std::vector<Way> ways(const StepOptions& options, int ranks) {
  const ShardingMode modes[] = {ShardingMode::full_shard, ShardingMode::shard_grad_op,
                                ShardingMode::shard_optimizer, ShardingMode::no_shard};
  std::vector<Way> result;
  for (Precision precision : {Precision::fp32}) {
    std::vector<int> group_sizes = {ranks};
    if (options.shard_group_size > 0 && options.shard_group_size < ranks) {
      group_sizes.push_back(options.shard_group_size);
    }
    for (int g : group_sizes) {
      for (ShardingMode mode : modes) {
        const std::string hybrid =
            g < ranks ? " " + std::to_string(ranks / g) + "x" + std::to_string(g) : "";
        result.push_back({name_of(mode) + hybrid, mode, precision, true, g, false});
        if (mode == ShardingMode::full_shard && g == ranks) {
          result.push_back(
              {name_of(mode) + std::string(" no prefetch"), mode, precision, false, g, false});
        }
      }
    }
  }
  result.push_back({"one_rank", ShardingMode::full_shard, Precision::fp32, true, 1, true});
  return result;
}

void run(const StepOptions& options, const CommonOptions& common) {
  ProcessGroup group(MPI_COMM_WORLD);
  const int n = group.size();
  if (options.shard_group_size > 0 && n % options.shard_group_size != 0) {
    throw CLI::ValidationError("--shard-group-size", std::to_string(options.shard_group_size) +
                                                         " does not divide the " +
                                                         std::to_string(n) + " ranks");
  }
#ifdef __GLIBC__
  // Every buffer from 128 KiB up is mapped on its own and unmapped when freed (no dynamic
  // threshold), so that the resident memory a model adds is its own, not memory that another
  // model freed into the heap.
  mallopt(M_MMAP_THRESHOLD, 128 * 1024);
#endif
  MlpShape shape;
  for (int l = 0; l <= options.layers; ++l) {
    shape.widths.push_back(options.width);
  }
  const std::vector<Way> rows = ways(options, n);
  const std::size_t count = rows.size();
  std::size_t baseline = 0;  // no_shard over all ranks: replicated data parallelism
  while (rows[baseline].mode != ShardingMode::no_shard) {
    ++baseline;
  }

  // Each way is made and takes one step while the kernel measures the resident memory it adds.
  std::vector<std::unique_ptr<Trainer>> trainers(count);
  std::vector<double> resident_kb(count, 0.0);  // the resident memory it added
  std::vector<int> resident_ok(count, 1);       // the kernel's peak was reset before it
  for (std::size_t k = 0; k < count; ++k) {
    const Way& way = rows[k];
    if (way.one_rank && group.rank() != 0) {
      continue;
    }
    PeakMemory window;
    trainers[k] = std::make_unique<Trainer>(
        way, counting_group(way.one_rank ? MPI_COMM_SELF : MPI_COMM_WORLD), shape,
        way.one_rank ? options.local_batch * n : options.local_batch);
    trainers[k]->step(shape);
    resident_kb[k] = static_cast<double>(window.added_kb());
    resident_ok[k] = window.reset_ok() ? 1 : 0;
  }
  fsdp_apps::barrier_without_spinning(group);

  // Interleaved: every round times one step of each way, in rotating order.
  std::vector<std::vector<double>> seconds(count);
  for (int round = 0; round < options.steps + 1; ++round) {
    for (std::size_t i = 0; i < count; ++i) {
      const std::size_t k = (i + static_cast<std::size_t>(round)) % count;
      Trainer* trainer = trainers[k].get();
      group.barrier();
      const StepBytes before = trainer ? trainer->sent_so_far() : StepBytes{};
      const double start = MPI_Wtime();
      if (trainer) {
        trainer->step(shape);
      }
      const double elapsed = MPI_Wtime() - start;
      if (round > 0) {  // the first round warms up
        seconds[k].push_back(elapsed);
        if (trainer) {
          const StepBytes after = trainer->sent_so_far();
          trainer->sent.push_back({after.gather - before.gather, after.gradient - before.gradient,
                                   after.replica_gradient - before.replica_gradient});
        }
      }
      if (rows[k].one_rank) {
        // Rank 0 trained alone: the others wait without spinning on the cores it computed on, so
        // that the baseline is one rank's step on an otherwise idle machine.
        fsdp_apps::barrier_without_spinning(group);
      }
    }
  }
  std::vector<double> medians(count);
  for (std::size_t k = 0; k < count; ++k) {
    medians[k] = median(slowest_rank(seconds[k], group.mpi_comm()));
  }
  group.all_reduce(resident_kb.data(), count, ReduceOp::max);
  group.all_reduce(resident_ok.data(), count, ReduceOp::min);

  // Per way, the largest over ranks of: memory (tracker and kernel), the runtime's statistics,
  // the bytes sent and the formula's; and on every rank whether they agree.
  constexpr std::size_t kFigures = 15;
  std::vector<double> figures(kFigures * count, 0.0);
  std::vector<int> agree(2 * count, 1);  // sent == expected; every step sent the same
  for (std::size_t k = 0; k < count; ++k) {
    const Trainer* t = trainers[k].get();
    if (t == nullptr) {
      continue;
    }
    const Formula f =
        formula(rows[k], shape, rows[k].one_rank ? 1 : n, rows[k].one_rank ? 0 : group.rank());
    const StepBytes sent = t->sent.empty() ? StepBytes{} : t->sent.front();
    double* x = &figures[kFigures * k];
    x[0] = static_cast<double>(t->model->memory().total_peak);
    x[1] = static_cast<double>(t->model->memory().model_state());
    x[2] = static_cast<double>(t->runtime->stats().ready_on_entry);
    x[3] = static_cast<double>(t->runtime->stats().scopes);
    // Per step: the time scopes waited for gathers (communication not hidden).
    x[4] = t->runtime->stats().wait_s / (options.steps + 2);
    x[5] = static_cast<double>(sent.gather);
    x[6] = static_cast<double>(sent.gradient);
    x[7] = static_cast<double>(sent.replica_gradient);
    x[8] = static_cast<double>(sent.total());
    x[9] = static_cast<double>(f.estimate.forward_gather_send_bytes);
    x[10] = static_cast<double>(f.estimate.backward_gather_send_bytes);
    x[11] = static_cast<double>(f.estimate.gradient_send_bytes);
    x[12] = static_cast<double>(f.estimate.replica_gradient_send_bytes);
    x[13] = static_cast<double>(f.estimate.send_bytes());
    x[14] = static_cast<double>(f.kept_unit_gather);
    agree[2 * k] = sent == f.expected ? 1 : 0;
    for (const StepBytes& s : t->sent) {
      agree[2 * k + 1] &= s == sent ? 1 : 0;
    }
  }
  group.all_reduce(figures.data(), figures.size(), ReduceOp::max);
  group.all_reduce(agree.data(), agree.size(), ReduceOp::min);

  const double* base = &figures[kFigures * baseline];
  const double one_rank_s = medians[count - 1];
  if (group.rank() == 0 && !common.json) {
    std::printf(
        "fsdp-bench step: %d ranks, MLP of %d layers %lld wide (%.1f MB fp32), local batch %lld, "
        "Adam; median of %d steps of the slowest rank; ratios to %s; per rank: the largest\n"
        "sent: bytes of the collectives the units issued, as ring algorithms move them; formula: "
        "fsdp::estimate (docs/plans.md); exact: sent equals the formula less the last unit's "
        "backward gather, which the runtime skips, on every rank and step\n",
        n, options.layers, static_cast<long long>(options.width),
        static_cast<double>(shape.parameter_count()) * 4 / 1e6,
        static_cast<long long>(options.local_batch), options.steps, rows[baseline].name.c_str());
    std::printf("%-24s %4s %9s %9s %9s %8s %9s %8s %8s %9s %10s %9s %5s %8s\n", "mode", "prec",
                "step (ms)", "/no_shard", "1 rank/it", "peak MB", "/no_shard", "state MB",
                "RSS+ MB", "sent MB", "formula MB", "sent/form", "exact", "wait ms");
  }
  for (std::size_t k = 0; k < count; ++k) {
    const Way& way = rows[k];
    const double* x = &figures[kFigures * k];
    const int world = way.one_rank ? 1 : n;
    const auto bytes = [](double value) { return static_cast<std::int64_t>(value); };
    nlohmann::json result = {
        {"benchmark", "step"},
        {"name", way.name},
        {"mode", way.one_rank ? "one_rank" : name_of(way.mode)},
        {"precision", name_of(way.precision)},
        {"prefetch", way.prefetch},
        {"ranks", world},
        {"shard_group_size", way.shard_group_size},
        {"replicas", world / way.shard_group_size},
        {"step_s", medians[k]},
        {"over_no_shard", medians[k] / medians[baseline]},
        {"speedup_over_one_rank", one_rank_s / medians[k]},
        {"peak_bytes_per_rank", x[0]},
        {"peak_over_no_shard", x[0] / base[0]},
        {"model_state_bytes_per_rank", x[1]},
        {"model_state_over_no_shard", x[1] / base[1]},
        {"resident_added_bytes_per_rank",
         resident_ok[k] ? nlohmann::json(resident_kb[k] * 1024) : nlohmann::json()},
        {"scopes_ready_on_entry", x[2]},
        {"scopes", x[3]},
        {"gather_wait_s_per_step", x[4]},
        {"sent_bytes_per_step",
         {{"gather", bytes(x[5])},
          {"gradient", bytes(x[6])},
          {"replica_gradient", bytes(x[7])},
          {"total", bytes(x[8])}}},
        {"formula_send_bytes_per_step",
         {{"forward_gather", bytes(x[9])},
          {"backward_gather", bytes(x[10])},
          {"gradient", bytes(x[11])},
          {"replica_gradient", bytes(x[12])},
          {"total", bytes(x[13])},
          {"last_unit_backward_gather", bytes(x[14])}}},
        {"sent_over_formula", x[13] > 0 ? nlohmann::json(x[8] / x[13]) : nlohmann::json()},
        {"sent_equals_formula_less_kept_unit", agree[2 * k] == 1},
        {"sent_same_every_step", agree[2 * k + 1] == 1}};
    emit(common, group.rank(), result, [&] {
      char added[16] = "-";
      if (resident_ok[k]) {
        std::snprintf(added, sizeof added, "%.2f", resident_kb[k] * 1024 / 1e6);
      }
      char ratio[16] = "-";
      if (x[13] > 0) {
        std::snprintf(ratio, sizeof ratio, "%.3f", x[8] / x[13]);
      }
      std::printf("%-24s %4s %9.2f %9.3f %9.3f %8.2f %9.3f %8.2f %8s %9.2f %10.2f %9s %5s %8.2f\n",
                  way.name.c_str(), name_of(way.precision), medians[k] * 1e3,
                  medians[k] / medians[baseline], one_rank_s / medians[k], x[0] / 1e6,
                  x[0] / base[0], x[1] / 1e6, added, x[8] / 1e6, x[13] / 1e6, ratio,
                  agree[2 * k] == 1 && agree[2 * k + 1] == 1 ? "yes" : "no", x[4] * 1e3);
    });
  }
}

}  // namespace

void add_step(CLI::App& app, const CommonOptions& common) {
  auto options = std::make_shared<StepOptions>();
  CLI::App* sub = app.add_subcommand(
      "step",
      "training step of fsdp-train's MLP in every sharding mode (optionally hybrid) against "
      "no_shard (replicated data parallel) and one rank: time, memory, bytes sent per step");
  sub->add_option("--width", options->width, "width of every layer")->check(CLI::Range(1, 1 << 30));
  sub->add_option("--layers", options->layers, "number of layers")->check(CLI::Range(1, 1 << 30));
  sub->add_option("--local-batch", options->local_batch, "samples per rank and step")
      ->check(CLI::Range(1, 1 << 30));
  sub->add_option("--steps", options->steps, "timed steps per mode")->check(CLI::Range(1, 1 << 30));
  sub->add_option("--shard-group-size", options->shard_group_size,
                  "also every mode hybrid-sharded: shard within groups of G consecutive ranks, "
                  "ranks / G replicas (0 or the number of ranks: not)")
      ->check(CLI::Range(0, 1 << 30));
  sub->callback([options, &common] { run(*options, common); });
}

}  // namespace fsdp::bench
