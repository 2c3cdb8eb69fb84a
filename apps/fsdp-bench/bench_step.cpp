// fsdp-bench step: one training step of fsdp-train's MLP or GPT-2 transformer in every sharding
// mode (full_shard with prefetch on and off, shard_grad_op, shard_optimizer, and no_shard:
// replicated data parallelism, the baseline), in fp32 and in mixed precision (bf16, fp16 with a
// loss scaler), optionally hybrid-sharded over groups of G ranks, and one rank training the same
// global batch, all in the same run: step time, memory per rank, and the bytes each rank sends per
// step against the formula of the plan's estimate (docs/plans.md).
#include <algorithm>
#include <cstdio>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>
#ifdef __GLIBC__  // defined by the C library's headers: after <cstdio>
#include <malloc.h>
#endif

#include "../common/barrier_without_spinning.hpp"
#include "../common/plural.hpp"
#include "benchmark.hpp"
#include "counting_backend.hpp"
#include "fsdp/comm/hybrid_groups.hpp"
#include "fsdp/core/error.hpp"
#include "fsdp/optim/adam.hpp"
#include "fsdp/optim/loss_scaler.hpp"
#include "fsdp/runtime/runtime.hpp"
#include "fsdp/shard/plan_estimate.hpp"
#include "fsdp/shard/sharding_strategy.hpp"
#include "models/gpt.hpp"
#include "models/gpt_passes.hpp"
#include "models/mlp.hpp"
#include "peak_memory.hpp"

namespace fsdp::bench {
namespace {

using fsdp_models::GptShape;
using fsdp_models::Matrix;
using fsdp_models::MlpShape;

struct StepOptions {
  // "mlp": layers of width x width; "gpt": GPT-2 blocks of hidden width, heads, seq tokens.
  std::string model = "mlp";
  std::int64_t width = 512;
  int layers = 6;
  std::int64_t heads = 8;
  std::int64_t seq = 64;
  std::int64_t local_batch = 32;  // samples (gpt: sequences) per rank and step
  int steps = 9;
  int shard_group_size = 0;  // > 0 and < ranks: also every mode hybrid-sharded over groups of G
  // The units' precisions: fp32, bf16, fp16 (16-bit gathers and reductions over fp32 masters).
  std::vector<std::string> precisions = {"fp32", "bf16", "fp16"};
  // The collective signature check (FSDP_CHECK_COLLECTIVES): "on" (the library's default),
  // "off", or "both": every way over all ranks also without it, to measure what it costs.
  std::string collective_check = "on";
  // RuntimeOptions::max_gathered_units of every way: how far prefetching runs ahead.
  int max_gathered_units = RuntimeOptions{}.max_gathered_units;
  // RuntimeOptions::max_reductions_in_flight of every way: 0 waits for each unit's gradient
  // reduction when its backward scope closes.
  int max_reductions_in_flight = RuntimeOptions{}.max_reductions_in_flight;
  // CollectiveOptions::network, "BANDWIDTH,LATENCY"; empty: collectives complete when MPI's do.
  std::string network;
  // The 16-bit ways' UnitOptions::grad_dtype: "fp32" or "bf16" (kept gradients in 2 bytes).
  std::string grad_dtype = "fp32";
};

// One way of training: a row of the table.
struct Way {
  std::string name;
  ShardingMode mode = ShardingMode::full_shard;
  // The units' param_dtype and reduce_dtype: f32 (no cast), bf16 or f16. fp16 steps take a loss
  // scaler.
  DType dtype = DType::f32;
  bool prefetch = true;
  int shard_group_size = 1;  // G; the group's size: no replicas
  bool one_rank = false;     // rank 0 alone, the whole global batch
  bool checked = true;       // collectives check their signature (CollectiveOptions)
  // Under --network, full_shard's baselines from the same run: each unit's gradient reduction
  // waited for when its backward scope closes (max_reductions_in_flight 0), and communication
  // free (the network off).
  bool waits_for_reductions = false;
  bool free_network = false;
  // Under --network: Adam steps each unit as its reduction lands
  // (Runtime::set_optimizer_in_backward).
  bool optimizer_in_backward = false;
  DType grad_dtype = DType::f32;  // the units' grad_dtype (16-bit ways: --grad-dtype)
  // "fp32", "bf16", "fp16"; and the estimate's name for it: fp32 or mixed.
  const char* precision_name() const { return dtype == DType::f32 ? "fp32" : name_of(dtype); }
  Precision precision() const { return dtype == DType::f32 ? Precision::fp32 : Precision::mixed; }
};

DType parse_units_dtype(const std::string& name) {
  return name == "bf16" ? DType::bf16 : name == "fp16" ? DType::f16 : DType::f32;
}

// Bytes this rank sent in a step, by the estimate's categories, and the loss scaler's overflow
// check (one all-reduce of a flag; fp16 only), which is not the units' traffic.
struct StepBytes {
  std::int64_t gather = 0;            // parameter gathers in the shard group
  std::int64_t gradient = 0;          // gradient reductions in the shard group
  std::int64_t replica_gradient = 0;  // everything the units sent to the replicas
  std::int64_t loss_scaler = 0;       // LossScaler::unscale_and_check
  // The units' bytes: what the estimate counts.
  std::int64_t total() const { return gather + gradient + replica_gradient; }
  bool same_units_bytes(const StepBytes& o) const {
    return gather == o.gather && gradient == o.gradient && replica_gradient == o.replica_gradient;
  }
  bool operator==(const StepBytes& o) const {
    return same_units_bytes(o) && loss_scaler == o.loss_scaler;
  }
  StepBytes operator-(const StepBytes& o) const {
    return {gather - o.gather, gradient - o.gradient, replica_gradient - o.replica_gradient,
            loss_scaler - o.loss_scaler};
  }
};

// What every way trains: its parameters, units and the units the runtime keeps gathered from
// their forward scope to their backward scope (the last unit, and the owner of a tied parameter),
// whose second gather the estimate's formula counts and the runtime never makes.
struct BenchModel {
  std::string description;  // "MLP of 6 layers 512 wide", "GPT-2 of 2 blocks, hidden 768, ..."
  std::vector<ParameterInfo> parameters;
  std::vector<std::string> order;
  std::map<std::string, std::set<std::string>> tied;
  std::set<std::string> kept_units;
};

// The activations of one way and its forward and backward passes through the runtime's scopes,
// with a loss gradient scaled by loss_scale (fp16).
class Passes {
 public:
  virtual ~Passes() = default;
  virtual void run(Runtime<float>& runtime, double loss_scale) = 0;
};

// The MLP: a stand-in loss gradient, since the step's cost does not depend on its value.
class MlpPasses : public Passes {
 public:
  MlpPasses(MlpShape shape, std::int64_t rows) : shape_(std::move(shape)), rows_(rows) {
    // activations_[l]: the input of layer l; deltas_[l]: d loss / d (output of layer l).
    for (std::size_t l = 0; l <= shape_.layers(); ++l) {
      activations_.emplace_back("activation", static_cast<std::size_t>(rows_),
                                static_cast<std::size_t>(shape_.widths[l]));
    }
    for (std::size_t l = 0; l < shape_.layers(); ++l) {
      deltas_.emplace_back("delta", static_cast<std::size_t>(rows_),
                           static_cast<std::size_t>(shape_.widths[l + 1]));
    }
    Kokkos::deep_copy(activations_[0], 0.5f);
  }
  void run(Runtime<float>& runtime, double loss_scale) override {
    const std::size_t layers = shape_.layers();
    for (std::size_t l = 0; l < layers; ++l) {
      auto scope = runtime.forward(MlpShape::unit(l));
      fsdp_models::layer_forward_in<float>(scope, l, scratch_, activations_[l], activations_[l + 1],
                                           rows_, l + 1 < layers);
      scope.close();
    }
    Kokkos::deep_copy(deltas_[layers - 1], static_cast<float>(1e-3 * loss_scale));
    for (std::size_t l = layers; l-- > 0;) {
      auto scope = runtime.backward(MlpShape::unit(l));
      fsdp_models::layer_backward_in<float>(scope, l, scratch_, scope.grad(MlpShape::weight(l)),
                                            scope.grad(MlpShape::bias(l)), activations_[l],
                                            deltas_[l], l > 0 ? &deltas_[l - 1] : nullptr, rows_);
      scope.close();
    }
  }

 private:
  MlpShape shape_;
  std::int64_t rows_;
  std::vector<Matrix<float>> activations_, deltas_;
  fsdp_models::WideningScratch<float> scratch_;  // 16-bit parameters' panels
};

// The transformer: fsdp-train's passes (models/gpt_passes.hpp; its tied head reads wte.weight in
// the head's scopes) on fixed bytes, with the real softmax cross-entropy.
class GptStepPasses : public Passes {
 public:
  GptStepPasses(const GptShape& shape, std::int64_t sequences)
      : passes_(shape, false, sequences), sequences_(sequences) {
    const fsdp_models::Labels tokens = passes_.tokens(), targets = passes_.targets();
    const std::int64_t vocab = shape.vocab;
    Kokkos::parallel_for(
        "fsdp_bench::gpt_bytes",
        device_range(ExecutionSpace(), 0, static_cast<std::int64_t>(tokens.size())),
        KOKKOS_LAMBDA(std::int64_t r) {
          tokens(r) = (r * 37) % vocab;
          targets(r) = (tokens(r) + 1) % vocab;
        });
    ExecutionSpace().fence();
  }
  void run(Runtime<float>& runtime, double loss_scale) override {
    passes_.train(runtime, sequences_, loss_scale);
  }

 private:
  fsdp_models::GptPasses<float> passes_;
  std::int64_t sequences_;
};

GptShape gpt_shape(const StepOptions& options) {
  GptShape shape;
  shape.layers = options.layers;
  shape.hidden = options.width;
  shape.heads = options.heads;
  shape.seq = options.seq;
  return shape;
}

MlpShape mlp_shape(const StepOptions& options) {
  MlpShape shape;
  for (int l = 0; l <= options.layers; ++l) {
    shape.widths.push_back(options.width);
  }
  return shape;
}

BenchModel bench_model(const StepOptions& options) {
  BenchModel model;
  char size[64];
  if (options.model == "gpt") {
    const GptShape shape = gpt_shape(options);
    const std::string problem = shape.validation_error();
    if (!problem.empty()) {
      throw CLI::ValidationError("--heads", problem);
    }
    model.parameters = shape.parameters(DType::f32);
    model.order = shape.units();
    model.tied = {{"wte.weight", {GptShape::head_unit()}}};
    model.kept_units = {GptShape::embed_unit(), GptShape::head_unit()};
    std::snprintf(size, sizeof size, " (%.1f MB fp32)",
                  static_cast<double>(shape.parameter_count()) * 4 / 1e6);
    model.description = "GPT-2 of " + fsdp_apps::count_of(options.layers, "block") + ", hidden " +
                        std::to_string(options.width) + ", " + std::to_string(options.heads) +
                        " heads, seq " + std::to_string(options.seq) + size;
  } else {
    const MlpShape shape = mlp_shape(options);
    model.parameters = shape.parameters(DType::f32);
    for (std::size_t l = 0; l < shape.layers(); ++l) {
      model.order.push_back(MlpShape::unit(l));
    }
    model.kept_units = {model.order.back()};
    std::snprintf(size, sizeof size, " (%.1f MB fp32)",
                  static_cast<double>(shape.parameter_count()) * 4 / 1e6);
    model.description = "MLP of " + std::to_string(options.layers) + " layers " +
                        std::to_string(options.width) + " wide" + size;
  }
  return model;
}

std::unique_ptr<Passes> make_passes(const StepOptions& options, std::int64_t rows) {
  if (options.model == "gpt") {
    return std::make_unique<GptStepPasses>(gpt_shape(options), rows);
  }
  return std::make_unique<MlpPasses>(mlp_shape(options), rows);
}

// One way of training: its groups, model, runtime and activations.
struct Trainer {
  Way way;
  ProcessGroup shard;                    // the ranks the model is split over
  std::optional<ProcessGroup> replicas;  // hybrid sharding: the ranks holding the same pieces
  std::unique_ptr<ShardedModel<float>> model;
  std::unique_ptr<Runtime<float>> runtime;
  std::unique_ptr<Adam<float>> adam;
  std::optional<LossScaler> scaler;  // fp16
  std::int64_t scaler_bytes = 0;     // what unscale_and_check sent so far
  std::int64_t settling_skips = 0;   // steps skipped before the scale settled (settle())
  std::unique_ptr<Passes> passes;
  std::vector<StepBytes> sent;  // per timed step

  // group: a counting group (counting_group) of every rank that trains this way.
  Trainer(Way how, ProcessGroup group, const BenchModel& bench, std::unique_ptr<Passes> passes_,
          const StepOptions& step_options)
      : way(std::move(how)), shard(group), passes(std::move(passes_)) {
    ShardedModelOptions options;
    options.unit.mode = way.mode;
    options.unit.param_dtype = way.dtype;
    options.unit.reduce_dtype = way.dtype;
    options.unit.grad_dtype = way.grad_dtype;
    if (way.dtype == DType::f16) {
      scaler.emplace();
    }
    if (way.shard_group_size < group.size()) {
      HybridGroups groups = make_hybrid_groups(group, way.shard_group_size);
      shard = groups.shard;
      replicas = groups.replicate;
      options.unit.replicas = groups.replicate;
    }
    const std::vector<ParameterInfo>& parameters = bench.parameters;
    model = std::make_unique<ShardedModel<float>>(
        shard, FullSharding().make_plan(parameters, shard.size()), options);
    for (const ParameterInfo& p : parameters) {
      model->init_with(p.name, [](std::int64_t first, float* values, std::int64_t count) {
        for (std::int64_t i = 0; i < count; ++i) {
          values[i] = 0.01f * static_cast<float>((first + i) % 17) - 0.08f;
        }
      });
    }
    RuntimeOptions runtime_options;
    runtime_options.prefetch = way.prefetch;
    runtime_options.max_gathered_units = step_options.max_gathered_units;
    runtime_options.max_reductions_in_flight =
        way.waits_for_reductions ? 0 : step_options.max_reductions_in_flight;
    runtime_options.tied_parameters = bench.tied;
    runtime = std::make_unique<Runtime<float>>(*model, bench.order, runtime_options);
    // lr 0: Adam does all its work but leaves the weights as they are, so that every step computes
    // the same values. With a learning rate the constant stand-in loss gradient pushes every
    // weight the same way, step after step, until the gradients overflow fp16 at any loss scale.
    AdamOptions adam_options;
    adam_options.lr = 0.0;
    adam = std::make_unique<Adam<float>>(adam_options);
    if (way.optimizer_in_backward) {
      runtime->set_optimizer_in_backward(adam.get());
    }
  }

  // What this rank sent so far on the model's groups.
  StepBytes sent_so_far() const {
    const SentBytes in_group = sent_by(shard);
    // The units average their gradients over a split of the replica group of their own.
    const ProcessGroup* averages = model->replica_reductions();
    const std::int64_t to_replicas =
        (replicas ? sent_by(*replicas).total() : 0) + (averages ? sent_by(*averages).total() : 0);
    // A runtime that checks ahead gathers over a split of the model's group, which counts apart.
    const ProcessGroup& gathers = runtime->gather_group();
    const std::int64_t split_gathers =
        gathers.backend() != shard.backend() ? sent_by(gathers).gathers : 0;
    // The scaler all-reduces on the model's group: its bytes are in the group's reductions.
    return {in_group.gathers + split_gathers, in_group.reductions - scaler_bytes, to_replicas,
            scaler_bytes};
  }

  // fp16: steps until one is not skipped, so that the timed steps run the optimizer. The scaler
  // starts at 2^16 and halves on every overflow (7 times for the stand-in gradient at width 512);
  // every step computes the same values (Adam's lr is 0), so no later step overflows.
  void settle() {
    for (int guard = 0; scaler && scaler->state().clean_steps == 0 && guard < 64; ++guard) {
      step();
    }
    settling_skips = scaler ? scaler->state().skipped_steps : 0;
  }

  void step() {
    passes->run(*runtime, scaler ? scaler->scale() : 1.0);
    runtime->finish_step();
    if (scaler) {
      const std::int64_t before = sent_by(model->group()).total();
      const bool overflow = scaler->unscale_and_check(*model);
      scaler_bytes += sent_by(model->group()).total() - before;
      scaler->update(overflow);
      if (overflow) {  // skipped on every rank
        model->zero_grad();
        return;
      }
    }
    if (!runtime->optimizer_in_backward()) {  // else finish_step took the step
      adam->step(*model);
    }
    model->zero_grad();
  }
};

// What the estimate says this rank sends per step in one way of training (Full sharding of the
// model over `world` ranks, Adam), and what the runtime is expected to send: the kept units (the
// last unit of the forward, and a tied parameter's owner) stay gathered for their backward, so
// their second gather, which the formula counts, never happens.
struct Formula {
  RankEstimate estimate;
  // The largest unit's transient bytes (and, in mixed precision under shard_grad_op and
  // shard_optimizer, the 16-bit whole parameters): on top of the model state at the peak.
  std::int64_t working_set_bytes = 0;
  std::int64_t kept_unit_gather = 0;  // the formula's backward gathers of the kept units
  StepBytes expected;
};

Formula formula(const Way& way, const BenchModel& bench, int world, int rank) {
  EstimateOptions options{OptimizerKind::adam, way.precision(), way.mode, way.shard_group_size};
  options.keeps_16_bit_gradients = way.grad_dtype == DType::bf16;
  const std::vector<ParameterInfo>& parameters = bench.parameters;
  std::vector<ParameterInfo> kept;
  for (const ParameterInfo& p : parameters) {
    if (bench.kept_units.count(p.unit()) != 0) {
      kept.push_back(p);
    }
  }
  const auto r = static_cast<std::size_t>(rank);
  Formula f;
  const PlanEstimate whole = estimate(FullSharding().make_plan(parameters, world), options);
  f.estimate = whole.ranks[r];
  f.working_set_bytes = whole.gathered_working_set_bytes;
  f.kept_unit_gather =
      estimate(FullSharding().make_plan(kept, world), options).ranks[r].backward_gather_send_bytes;
  f.expected = {f.estimate.forward_gather_send_bytes + f.estimate.backward_gather_send_bytes -
                    f.kept_unit_gather,
                f.estimate.gradient_send_bytes, f.estimate.replica_gradient_send_bytes, 0};
  return f;
}

// The rows, per precision asked for: every mode over all ranks (full_shard also without
// prefetch), every mode hybrid-sharded over groups of G when asked; then one rank in fp32. The
// baseline, no_shard in fp32 over all ranks, is always there. Every mode is tried in every
// precision: a combination the library refuses is dropped when its model is made (run()).
std::vector<Way> ways(const StepOptions& options, int ranks) {
  const ShardingMode modes[] = {ShardingMode::full_shard, ShardingMode::shard_grad_op,
                                ShardingMode::shard_optimizer, ShardingMode::no_shard};
  std::vector<DType> dtypes;
  for (const std::string& name : options.precisions) {
    const DType dtype = parse_units_dtype(name);
    if (std::find(dtypes.begin(), dtypes.end(), dtype) == dtypes.end()) {
      dtypes.push_back(dtype);
    }
  }
  std::vector<Way> result;
  if (std::find(dtypes.begin(), dtypes.end(), DType::f32) == dtypes.end()) {
    result.push_back(
        {name_of(ShardingMode::no_shard), ShardingMode::no_shard, DType::f32, true, ranks, false});
  }
  for (DType dtype : dtypes) {
    std::vector<int> group_sizes = {ranks};
    if (options.shard_group_size > 0 && options.shard_group_size < ranks) {
      group_sizes.push_back(options.shard_group_size);
    }
    for (int g : group_sizes) {
      for (ShardingMode mode : modes) {
        const std::string hybrid =
            g < ranks ? " " + std::to_string(ranks / g) + "x" + std::to_string(g) : "";
        result.push_back({name_of(mode) + hybrid, mode, dtype, true, g, false});
        if (mode == ShardingMode::full_shard && g == ranks) {
          result.push_back(
              {name_of(mode) + std::string(" no prefetch"), mode, dtype, false, g, false});
          if (!options.network.empty()) {
            Way waited{name_of(mode) + std::string(" reductions waited"), mode, dtype, true, g};
            waited.waits_for_reductions = true;
            Way free{name_of(mode) + std::string(" network off"), mode, dtype, true, g};
            free.free_network = true;
            result.push_back(waited);
            result.push_back(free);
            if (dtype != DType::f16) {  // fp16's loss scaler must see every gradient first
              Way in_backward{name_of(mode) + std::string(" optimizer in backward"), mode, dtype,
                              true, g};
              in_backward.optimizer_in_backward = true;
              result.push_back(in_backward);
            }
          }
        }
      }
    }
  }
  if (options.collective_check != "on") {
    // Off: every way without the check; both: each followed by its twin without it.
    std::vector<Way> unchecked;
    for (Way way : result) {
      if (options.collective_check == "both") {
        unchecked.push_back(way);
        way.name += " unchecked";
      }
      way.checked = false;
      unchecked.push_back(way);
    }
    result = std::move(unchecked);
  }
  for (Way& way : result) {
    way.grad_dtype = way.dtype == DType::f32 ? DType::f32 : parse_dtype(options.grad_dtype);
  }
  result.push_back({"one_rank", ShardingMode::full_shard, DType::f32, true, 1, true});
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
  DialledNetwork network;
  if (!options.network.empty()) {
    try {
      network = parse_network(options.network);
    } catch (const Error& error) {
      throw CLI::ValidationError("--network", error.message());
    }
  }
  const BenchModel bench = bench_model(options);
  std::vector<Way> rows = ways(options, n);

  // Each way is made and takes one step while the kernel measures the resident memory it adds.
  // A way whose model the library refuses (ErrorKind::usage: a mode or precision it does not
  // support) is dropped with a note; every rank makes the same models and refuses the same ways.
  std::vector<std::unique_ptr<Trainer>> trainers(rows.size());
  std::vector<double> resident_kb(rows.size(), 0.0);  // the resident memory it added
  std::vector<int> resident_ok(rows.size(), 1);       // the kernel's peak was reset before it
  std::vector<int> refused(rows.size(), 0);
  std::vector<std::string> reasons(rows.size());
  for (std::size_t k = 0; k < rows.size(); ++k) {
    const Way& way = rows[k];
    if (way.one_rank && group.rank() != 0) {
      continue;
    }
    PeakMemory window;
    try {
      // The checked ways follow FSDP_CHECK_COLLECTIVES, as fsdp-bench collectives does: with it
      // 0, "--collective-check both" times every way against an unchecked twin of itself (A/A).
      CollectiveOptions collective_options = CollectiveOptions::from_environment();
      collective_options.check_arguments = collective_options.check_arguments && way.checked;
      collective_options.network = way.free_network ? DialledNetwork{} : network;
      rows[k].checked = collective_options.check_arguments;
      trainers[k] = std::make_unique<Trainer>(
          way, counting_group(way.one_rank ? MPI_COMM_SELF : MPI_COMM_WORLD, collective_options),
          bench, make_passes(options, way.one_rank ? options.local_batch * n : options.local_batch),
          options);
    } catch (const Error& error) {
      if (error.kind() != ErrorKind::usage) {
        throw;
      }
      refused[k] = 1;
      reasons[k] = error.message();
      continue;
    }
    trainers[k]->step();
    resident_kb[k] = static_cast<double>(window.added_kb());
    resident_ok[k] = window.reset_ok() ? 1 : 0;
    trainers[k]->settle();
  }
  group.all_reduce(Kokkos::DefaultHostExecutionSpace(),
                   fsdp::host_view(refused.data(), refused.size()), ReduceOp::max);
  std::size_t kept = 0;
  for (std::size_t k = 0; k < rows.size(); ++k) {
    if (refused[k]) {
      if (group.rank() == 0) {
        std::fprintf(stderr, "fsdp-bench step: skipped %s %s: the library refuses it: %s\n",
                     rows[k].name.c_str(), rows[k].precision_name(),
                     reasons[k].empty() ? "(on another rank)" : reasons[k].c_str());
      }
      continue;
    }
    rows[kept] = rows[k];
    trainers[kept] = std::move(trainers[k]);
    resident_kb[kept] = resident_kb[k];
    resident_ok[kept] = resident_ok[k];
    ++kept;
  }
  rows.resize(kept);
  trainers.resize(kept);
  resident_kb.resize(kept);
  resident_ok.resize(kept);
  const std::size_t count = rows.size();
  // no_shard in fp32 over all ranks: replicated data parallelism, the baseline of every ratio.
  std::size_t baseline = 0;
  while (baseline < count &&
         !(rows[baseline].mode == ShardingMode::no_shard && rows[baseline].dtype == DType::f32 &&
           rows[baseline].shard_group_size == n && !rows[baseline].one_rank)) {
    ++baseline;
  }
  require(baseline < count, "fsdp-bench step: no baseline (no_shard in fp32)", ErrorKind::state);
  fsdp_apps::barrier_without_spinning(group);

  // Interleaved: every round times one step of each way, in rotating order, backwards every
  // other round, so that each way follows its neighbours as often as it precedes them (a way's
  // "unchecked" twin would otherwise always run right after it).
  std::vector<std::vector<double>> seconds(count);
  // Per timed step, the time this rank's scopes waited for gathers and reductions.
  std::vector<std::vector<double>> waited(count);
  for (int round = 0; round < options.steps + 1; ++round) {
    for (std::size_t i = 0; i < count; ++i) {
      const std::size_t turn = round % 2 == 0 ? i : count - 1 - i;
      const std::size_t k = (turn + static_cast<std::size_t>(round)) % count;
      Trainer* trainer = trainers[k].get();
      group.barrier();
      const StepBytes before = trainer ? trainer->sent_so_far() : StepBytes{};
      const RuntimeStats stats_before = trainer ? trainer->runtime->stats() : RuntimeStats{};
      const double start = MPI_Wtime();
      if (trainer) {
        trainer->step();
      }
      const double elapsed = MPI_Wtime() - start;
      if (round > 0) {  // the first round warms up
        seconds[k].push_back(elapsed);
        // A rank that does not train this way (one_rank's others) leaves the least to the others.
        double waits = std::numeric_limits<double>::infinity();
        if (trainer) {
          trainer->sent.push_back(trainer->sent_so_far() - before);
          const RuntimeStats step = trainer->runtime->stats().since(stats_before);
          waits = step.wait_s + step.reduce_s;
        }
        waited[k].push_back(waits);
      }
      if (rows[k].one_rank) {
        // Rank 0 trained alone: the others wait without spinning on the cores it computed on, so
        // that the baseline is one rank's step on an otherwise idle machine.
        fsdp_apps::barrier_without_spinning(group);
      }
    }
  }
  std::vector<double> medians(count);
  // Exposed communication: per step, the least any rank waited. A rank that waits while a slower
  // peer still computes (ranks are never equally fast, least of all two ranks on two cores) has
  // time to spare, not communication in the way; what the least waiting rank waited, every rank
  // waited, and no compute could have used it.
  std::vector<double> exposed(count);
  for (std::size_t k = 0; k < count; ++k) {
    medians[k] = median(slowest_rank(seconds[k], group.mpi_comm()));
    group.all_reduce(Kokkos::DefaultHostExecutionSpace(),
                     fsdp::host_view(waited[k].data(), waited[k].size()), ReduceOp::min);
    exposed[k] = median(waited[k]);
  }
  group.all_reduce(Kokkos::DefaultHostExecutionSpace(), fsdp::host_view(resident_kb.data(), count),
                   ReduceOp::max);
  group.all_reduce(Kokkos::DefaultHostExecutionSpace(), fsdp::host_view(resident_ok.data(), count),
                   ReduceOp::min);

  // Per way, the largest over ranks of: memory (tracker and kernel), the runtime's statistics,
  // the bytes sent and the formula's; and on every rank whether they agree.
  constexpr std::size_t kFigures = 23;
  std::vector<double> figures(kFigures * count, 0.0);
  std::vector<int> agree(2 * count, 1);  // sent == expected; every step sent the same
  for (std::size_t k = 0; k < count; ++k) {
    const Trainer* t = trainers[k].get();
    if (t == nullptr) {
      continue;
    }
    const Formula f =
        formula(rows[k], bench, rows[k].one_rank ? 1 : n, rows[k].one_rank ? 0 : group.rank());
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
    x[15] = static_cast<double>(f.estimate.persistent_bytes());  // the formula's model state
    x[16] = static_cast<double>(sent.loss_scaler);
    x[17] =
        t->scaler ? static_cast<double>(t->scaler->state().skipped_steps - t->settling_skips) : 0.0;
    x[18] = t->scaler ? t->scaler->scale() : 0.0;
    x[19] = static_cast<double>(f.estimate.persistent_bytes() + f.working_set_bytes);
    x[20] = static_cast<double>(t->settling_skips);
    // Per step: the time end_backward and finish_step waited for gradient reductions, and the
    // reductions still in flight when finish_step began.
    x[21] = t->runtime->stats().reduce_s / (options.steps + 2);
    x[22] = static_cast<double>(t->runtime->stats().incomplete_at_finish) / (options.steps + 2);
    agree[2 * k] = sent.same_units_bytes(f.expected) ? 1 : 0;
    for (const StepBytes& s : t->sent) {
      agree[2 * k + 1] &= s == sent ? 1 : 0;
    }
  }
  group.all_reduce(Kokkos::DefaultHostExecutionSpace(),
                   fsdp::host_view(figures.data(), figures.size()), ReduceOp::max);
  group.all_reduce(Kokkos::DefaultHostExecutionSpace(), fsdp::host_view(agree.data(), agree.size()),
                   ReduceOp::min);

  const double* base = &figures[kFigures * baseline];
  const double one_rank_s = medians[count - 1];
  if (group.rank() == 0 && !common.json) {
    std::printf(
        "fsdp-bench step: %s, %s, local batch %lld, "
        "Adam; median of %s of the slowest rank; ratios to %s fp32; per rank: the largest\n"
        "prec: the units' param_dtype and reduce_dtype over fp32 masters (fp16 with a loss "
        "scaler); state form: fsdp::estimate's model state (mixed for bf16 and fp16)\n"
        "sent: bytes of the collectives the units issued, as ring algorithms move them; formula: "
        "fsdp::estimate (docs/plans.md); exact: sent equals the formula less the backward "
        "gathers the runtime skips (the last unit's, a tied parameter owner's), on every rank "
        "and step\n",
        fsdp_apps::count_of(n, "rank").c_str(), bench.description.c_str(),
        static_cast<long long>(options.local_batch),
        fsdp_apps::count_of(options.steps, "step").c_str(), rows[baseline].name.c_str());
    if (network.on()) {
      std::printf("dialled network (bytes per second, seconds per collective): %s\n",
                  network.text().c_str());
    }
    std::printf(
        "wait ms: scopes waiting for gathers; rwait ms: waiting for gradient reductions "
        "(at most %d in flight), both on the rank that waited most, including for slower peers; "
        "exp%%: exposed communication, the least any rank waited (both), of the step\n",
        options.max_reductions_in_flight);
    std::printf("%-32s %4s %9s %9s %9s %8s %9s %8s %10s %8s %9s %10s %9s %5s %8s %8s %5s\n", "mode",
                "prec", "step (ms)", "/no_shard", "1 rank/it", "peak MB", "/no_shard", "state MB",
                "state form", "RSS+ MB", "sent MB", "formula MB", "sent/form", "exact", "wait ms",
                "rwait ms", "exp%");
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
        {"precision", way.precision_name()},
        {"grad_dtype", name_of(way.grad_dtype)},
        {"formula_precision", name_of(way.precision())},
        {"prefetch", way.prefetch},
        {"optimizer_in_backward", way.optimizer_in_backward},
        {"max_gathered_units", options.max_gathered_units},
        {"max_reductions_in_flight",
         way.waits_for_reductions ? 0 : options.max_reductions_in_flight},
        {"network",
         network.on() && !way.free_network ? nlohmann::json(network.text()) : nlohmann::json()},
        {"collective_check", way.checked},
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
        {"formula_model_state_bytes_per_rank", bytes(x[15])},
        {"formula_peak_bytes_per_rank", bytes(x[19])},
        {"resident_added_bytes_per_rank",
         resident_ok[k] ? nlohmann::json(resident_kb[k] * 1024) : nlohmann::json()},
        {"scopes_ready_on_entry", x[2]},
        {"scopes", x[3]},
        {"gather_wait_s_per_step", x[4]},
        {"reduce_wait_s_per_step", x[21]},
        {"most_waiting_rank_fraction", (x[4] + x[21]) / medians[k]},
        {"exposed_communication_s_per_step", exposed[k]},
        {"exposed_communication_fraction", exposed[k] / medians[k]},
        {"reductions_incomplete_at_finish_per_step", x[22]},
        {"sent_bytes_per_step",
         {{"gather", bytes(x[5])},
          {"gradient", bytes(x[6])},
          {"replica_gradient", bytes(x[7])},
          {"total", bytes(x[8])},
          {"loss_scaler", bytes(x[16])}}},
        {"formula_send_bytes_per_step",
         {{"forward_gather", bytes(x[9])},
          {"backward_gather", bytes(x[10])},
          {"gradient", bytes(x[11])},
          {"replica_gradient", bytes(x[12])},
          {"total", bytes(x[13])},
          {"kept_units_backward_gather", bytes(x[14])}}},
        {"sent_over_formula", x[13] > 0 ? nlohmann::json(x[8] / x[13]) : nlohmann::json()},
        {"sent_equals_formula_less_kept_units", agree[2 * k] == 1},
        {"sent_same_every_step", agree[2 * k + 1] == 1}};
    if (way.dtype == DType::f16) {
      result["loss_scaler"] = {{"skipped_before_timing", bytes(x[20])},
                               {"skipped_timed_steps", bytes(x[17])},
                               {"scale", x[18]}};
    }
    emit(common, group.rank(), result, [&] {
      char added[16] = "-";
      if (resident_ok[k]) {
        std::snprintf(added, sizeof added, "%.2f", resident_kb[k] * 1024 / 1e6);
      }
      char ratio[16] = "-";
      if (x[13] > 0) {
        std::snprintf(ratio, sizeof ratio, "%.3f", x[8] / x[13]);
      }
      std::printf(
          "%-32s %4s %9.2f %9.3f %9.3f %8.2f %9.3f %8.2f %10.2f %8s %9.2f %10.2f %9s %5s %8.2f "
          "%8.2f %5.1f\n",
          way.name.c_str(), way.precision_name(), medians[k] * 1e3, medians[k] / medians[baseline],
          one_rank_s / medians[k], x[0] / 1e6, x[0] / base[0], x[1] / 1e6, x[15] / 1e6, added,
          x[8] / 1e6, x[13] / 1e6, ratio, agree[2 * k] == 1 && agree[2 * k + 1] == 1 ? "yes" : "no",
          x[4] * 1e3, x[21] * 1e3, 100 * exposed[k] / medians[k]);
    });
  }
  if (group.rank() == 0 && !common.json) {
    for (std::size_t k = 0; k < count; ++k) {
      const double* x = &figures[kFigures * k];
      if (rows[k].dtype == DType::f16) {
        std::printf(
            "%s fp16: loss scale %g after %.0f skipped steps before timing; %.0f timed "
            "steps skipped; the scaler's check sent %.0f bytes per step\n",
            rows[k].name.c_str(), x[18], x[20], x[17], x[16]);
      }
    }
  }
}

}  // namespace

void add_step(CLI::App& app, const CommonOptions& common) {
  auto options = std::make_shared<StepOptions>();
  CLI::App* sub = app.add_subcommand(
      "step",
      "training step of fsdp-train's MLP or transformer in every sharding mode and precision "
      "(optionally "
      "hybrid) against no_shard in fp32 (replicated data parallel) and one rank: time, memory, "
      "bytes sent per step");
  sub->add_option("--model", options->model,
                  "mlp (layers of --width) or gpt (fsdp-train's GPT-2: --layers blocks of hidden "
                  "--width, --heads, --seq tokens, output head tied to the token embedding)")
      ->check(CLI::IsMember({"mlp", "gpt"}))
      ->capture_default_str();
  sub->add_option("--width", options->width, "width of every layer (gpt: the hidden width)")
      ->check(CLI::Range(1, 1 << 30));
  sub->add_option("--layers", options->layers, "number of layers (gpt: blocks)")
      ->check(CLI::Range(1, 1 << 30));
  sub->add_option("--heads", options->heads, "gpt: attention heads (a divisor of --width)")
      ->check(CLI::Range(1, 1 << 30))
      ->capture_default_str();
  sub->add_option("--seq", options->seq, "gpt: tokens per sequence")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  sub->add_option("--local-batch", options->local_batch,
                  "samples per rank and step (gpt: sequences)")
      ->check(CLI::Range(1, 1 << 30));
  sub->add_option("--steps", options->steps, "timed steps per mode")->check(CLI::Range(1, 1 << 30));
  sub->add_option("--precision", options->precisions,
                  "the units' precisions, comma separated: fp32, bf16, fp16 (16-bit gathers and "
                  "reductions over fp32 masters; fp16 with a loss scaler); no_shard in fp32, the "
                  "baseline, always runs")
      ->delimiter(',')
      ->check(CLI::IsMember({"fp32", "bf16", "fp16"}))
      ->capture_default_str();
  sub->add_option("--grad-dtype", options->grad_dtype,
                  "the 16-bit ways' kept gradients (UnitOptions::grad_dtype): fp32, or bf16 (2 "
                  "bytes, the ZeRO paper's)")
      ->check(CLI::IsMember({"fp32", "bf16"}))
      ->capture_default_str();
  sub->add_option(
         "--collective-check", options->collective_check,
         "the collectives' signature check: on (the default, as the library), off, or "
         "both (every way also without it, named '... unchecked'); FSDP_CHECK_COLLECTIVES=0 "
         "turns it off in the checked ways too (an A/A control)")
      ->check(CLI::IsMember({"on", "off", "both"}))
      ->capture_default_str();
  sub->add_option("--max-gathered-units", options->max_gathered_units,
                  "units gathered or being gathered at once (RuntimeOptions::max_gathered_units): "
                  "how far prefetching runs ahead")
      ->check(CLI::Range(1, 1 << 30))
      ->capture_default_str();
  sub->add_option("--reductions-in-flight", options->max_reductions_in_flight,
                  "gradient reductions in flight at once (the runtime option "
                  "max_reductions_in_flight); 0 waits for each when its backward scope closes")
      ->check(CLI::Range(0, 1 << 30))
      ->capture_default_str();
  sub->add_option("--network", options->network,
                  "a network to dial in, BANDWIDTH,LATENCY (bytes per second, seconds per "
                  "collective; e.g. 25e9,5e-6): every collective completes no earlier than such a "
                  "link would deliver it (CollectiveOptions::network, docs/collectives.md); adds "
                  "the rows 'full_shard reductions waited' (--reductions-in-flight 0), "
                  "'full_shard network off' and 'full_shard optimizer in backward' (Adam steps "
                  "each unit as its reduction lands; not with fp16)");
  sub->add_option("--shard-group-size", options->shard_group_size,
                  "also every mode hybrid-sharded: shard within groups of G consecutive ranks, "
                  "ranks / G replicas (0 or the number of ranks: not)")
      ->check(CLI::Range(0, 1 << 30));
  sub->callback([options, &common] { run(*options, common); });
}

}  // namespace fsdp::bench
