#include "train.hpp"

#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <type_traits>
#include <utility>

#include "../common/barrier_without_spinning.hpp"
#include "../common/plural.hpp"
#include "../common/process_status.hpp"
#include "fsdp/comm/hybrid_groups.hpp"
#include "fsdp/core/error.hpp"
#include "fsdp/core/text.hpp"
#include "fsdp/data/distributed_sampler.hpp"
#include "fsdp/io/checkpoint.hpp"
#include "fsdp/io/checkpoint_directory.hpp"
#include "fsdp/optim/grad_norm.hpp"
#include "fsdp/optim/loss_scaler.hpp"
#include "fsdp/optim/lr_schedule.hpp"
#include "fsdp/optim/optimizer.hpp"
#include "fsdp/runtime/runtime.hpp"
#include "fsdp/shard/plan_agreement.hpp"
#include "fsdp/shard/plan_estimate.hpp"
#include "fsdp/shard/shard_range.hpp"
#include "fsdp/shard/sharding_mode.hpp"
#include "fsdp/shard/sharding_strategy.hpp"
#include "fsdp/unit/sharded_model.hpp"
#include "models/blas_runtime.hpp"
#include "models/gemm_rate.hpp"
#include "models/mlp.hpp"
#include "models/onednn_gemm.hpp"
#include "models/subnormals.hpp"
#include "progress_bar.hpp"
#include "trained_gpt.hpp"
#include "trained_mlp.hpp"

namespace fsdp_train {
namespace {

using fsdp_models::LossSums;

// --model gpt: hidden.size() blocks of width hidden[0] (validate() checks they are all equal).
fsdp_models::GptShape gpt_shape(const TrainOptions& o) {
  fsdp_models::GptShape shape;
  shape.layers = static_cast<std::int64_t>(o.hidden.size());
  shape.hidden = o.hidden.front();
  shape.heads = o.heads;
  shape.seq = o.seq;
  return shape;
}

// The model the options ask for (validate() has checked them).
template <class T>
std::unique_ptr<TrainedModel<T>> make_trained_model(const TrainOptions& o, const Split& data) {
  if (o.model == "gpt") {
    return std::make_unique<TrainedGpt<T>>(gpt_shape(o), o.activation_checkpointing);
  }
  fsdp_models::MlpShape shape;
  shape.widths.push_back(data.train.dim);
  shape.widths.insert(shape.widths.end(), o.hidden.begin(), o.hidden.end());
  shape.widths.push_back(data.train.classes);
  return std::make_unique<TrainedMlp<T>>(shape);
}

// The model's parameters, those matching a --freeze glob frozen (ParameterInfo::trainable).
// Errors: a pattern that matches no parameter (a typo would otherwise train everything), and
// patterns that freeze every parameter (nothing would train).
template <class T>
std::vector<fsdp::ParameterInfo> trained_parameters(const TrainedModel<T>& trained,
                                                    const TrainOptions& o, fsdp::DType dtype) {
  std::vector<fsdp::ParameterInfo> parameters = trained.parameters(dtype);
  std::size_t frozen = 0;
  for (const std::string& pattern : o.freeze_patterns) {
    bool matched = false;
    for (fsdp::ParameterInfo& p : parameters) {
      if (fsdp::glob_match(pattern, p.name)) {
        matched = true;
        frozen += p.trainable ? 1 : 0;
        p.trainable = false;
      }
    }
    fsdp::require(matched, "--freeze '" + pattern + "' matches no parameter of the " +
                               trained.description() + " (its parameters are named like '" +
                               parameters.front().name + "' and '" + parameters.back().name + "')");
  }
  fsdp::require(frozen < parameters.size(),
                "--freeze freezes every parameter: nothing would train; leave some out");
  return parameters;
}

// ---- the optimizer chosen on the command line ----

fsdp::OptimizerSettings optimizer_settings(const TrainOptions& o) {
  fsdp::OptimizerSettings settings;
  settings.lr = o.lr;
  settings.momentum = o.momentum;
  settings.weight_decay = o.weight_decay;
  return settings;
}

// The learning-rate schedule the options ask for, over the whole run (scheduled_steps).
fsdp::LrSchedule lr_schedule(const TrainOptions& o, const Split& data) {
  fsdp::LrScheduleOptions options;
  options.decay = fsdp::parse_lr_decay(o.lr_schedule);
  options.warmup_steps = o.warmup_steps;
  options.total_steps = scheduled_steps(o, data);
  options.min_lr = o.min_lr;
  options.step_size = o.lr_step_size;
  options.gamma = o.lr_gamma;
  return fsdp::LrSchedule(o.lr, options);
}

// ---- one training step: the scopes are where units are gathered, released and reduce-scattered

// Forward, loss, backward, (clip), optimizer step on this process's samples `indices` of a
// global batch of `batch_samples` over `ranks` ranks. Each rank's gradient is the mean over its
// positions weighted by its share of the global batch, rows * ranks / batch_samples (1 when every
// rank has as many samples; a short last batch of an epoch gives some ranks one sample less, or
// none): averaged over the ranks by the reduce-scatter, it is the global batch's mean. With
// micro_batches > 1 (--grad-accumulation) the samples go through forward and backward in that
// many parts of nearly equal size (fewer when the fullest rank has fewer samples; every rank runs
// as many, some perhaps empty), each loss weighted by its share, and the gradients of all but the
// last part wait unreduced (Runtime::set_requires_gradient_sync): the step's gradient is the same
// mean, reduced once. With a loss scaler (fp16), the loss gradient is scaled before the backward
// pass and a step whose gradients overflowed on any rank is skipped on every rank.
template <class T>
LossSums train_step(fsdp::ShardedModel<T>& model, fsdp::Runtime<T>& runtime, Batch<T>& batch,
                    const Dataset& data, const std::vector<std::int64_t>& indices,
                    std::int64_t batch_samples, int ranks, int micro_batches,
                    fsdp::Optimizer<T>& optimizer, const fsdp::LrSchedule& schedule, double clip,
                    fsdp::LossScaler* scaler) {
  const auto rows = static_cast<std::int64_t>(indices.size());
  // Every rank runs as many parts: the fullest rank's rows (the first rank's, in the strided
  // order of a global batch) decide, and no part is empty there.
  const std::int64_t fullest = fsdp::ceil_div(batch_samples, std::int64_t{ranks});
  const auto parts =
      static_cast<int>(std::max<std::int64_t>(1, std::min<std::int64_t>(micro_batches, fullest)));
  // The optimizer in backward steps in the last part's backward: its rate is set before.
  const bool in_backward = runtime.optimizer_in_backward();
  if (in_backward) {
    schedule.apply(optimizer);
  }
  LossSums sums;
  std::vector<std::int64_t> part;
  for (int m = 0; m < parts; ++m) {
    const std::int64_t first = rows * m / parts;
    const std::int64_t end = rows * (m + 1) / parts;
    part.assign(indices.begin() + first, indices.begin() + end);
    batch.load(data, part);
    if (micro_batches > 1) {
      runtime.set_requires_gradient_sync(m + 1 == parts);
    }
    // One rounding of the exact share: bit for bit the old (end - first) / rows when every rank
    // has batch_samples / ranks rows.
    const double share = batch_samples > 0 ? static_cast<double>((end - first) * ranks) /
                                                 static_cast<double>(batch_samples)
                                           : 0;
    const LossSums part_sums =
        batch.train(runtime, end - first, (scaler != nullptr ? scaler->scale() : 1.0) * share);
    runtime.finish_step();
    sums.loss += part_sums.loss;
    sums.correct += part_sums.correct;
  }
  if (scaler != nullptr) {
    const bool overflow = scaler->unscale_and_check(model);
    scaler->update(overflow);
    if (overflow) {
      model.zero_grad();
      return sums;
    }
  }
  if (clip > 0) {
    fsdp::clip_grad_norm(model, clip);
  }
  if (!in_backward) {  // else the last finish_step took the step
    schedule.apply(optimizer);
    optimizer.step(model);
  }
  model.zero_grad();
  return sums;
}

// The runtime of a model: its units in forward order, its tied parameters, prefetch as the
// options say.
template <class T>
fsdp::Runtime<T> make_runtime(fsdp::ShardedModel<T>& model, const TrainedModel<T>& trained,
                              const TrainOptions& o) {
  fsdp::RuntimeOptions options;
  options.prefetch = !o.no_prefetch;
  options.max_gathered_units = o.prefetch_limit;
  options.max_gathered_units_backward = o.backward_prefetch_limit;
  options.max_reductions_in_flight = o.reductions_in_flight;
  options.tied_parameters = trained.tied_parameters();
  return fsdp::Runtime<T>(model, trained.order(), options);
}

// ---- which samples each step takes ----

// One sampler per rank whose samples this process trains on: its own (sharded run), or every
// rank's (the unsharded reference of --check, whose step s takes the union of the ranks' local
// batches of step s, in rank order). The samplers cut each epoch into global batches of
// --batch-size (SamplerOptions::batch_size), so the batches are the same at every rank count.
class Schedule {
 public:
  explicit Schedule(std::vector<fsdp::DistributedSampler> samplers)
      : samplers_(std::move(samplers)) {}
  void set_epoch(std::int64_t epoch) {
    for (auto& sampler : samplers_) {
      sampler.set_epoch(epoch);
    }
  }
  // The same on every rank: the global batches left in the epoch.
  std::int64_t steps() const { return samplers_[0].steps(); }
  // The global batch's samples in step `step` (every rank's together): --batch-size but in a
  // short last step of an epoch.
  std::int64_t samples(std::int64_t step) const { return samplers_[0].step(step).samples; }
  // Where the sampler stands once steps [0, step] of this epoch are done: at the epoch's end, the
  // start of the next epoch (so a resumed run does not enter an epoch with nothing left in it).
  fsdp::SamplerState state_after_step(std::int64_t step) const {
    fsdp::SamplerState state = samplers_[0].state_after_steps(step + 1);
    if (step + 1 == steps()) {
      state.epoch += 1;
      state.samples_consumed = 0;
    }
    return state;
  }
  void indices(std::int64_t step, std::vector<std::int64_t>& out) const {
    out.clear();
    for (const auto& sampler : samplers_) {
      const fsdp::SamplerStep mine = sampler.step(step);
      for (std::int64_t i = mine.begin; i < mine.end; ++i) {
        out.push_back(sampler.index(i));
      }
    }
  }

 private:
  std::vector<fsdp::DistributedSampler> samplers_;
};

// Every parameter whole, on every rank. Collective.
template <class T>
std::map<std::string, std::vector<double>> full_parameters(fsdp::ShardedModel<T>& model) {
  std::map<std::string, std::vector<double>> out;
  for (std::size_t u = 0; u < model.unit_count(); ++u) {
    fsdp::ShardedUnit<T>& unit = model.unit(u);
    unit.gather();
    for (auto& parameter : unit.parameters()) {
      // The comparison runs on the host: a copy of the gathered parameter (none when
      // fsdp::MemorySpace is host memory).
      const auto full = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), parameter.full());
      out[parameter.name()].assign(full.data(), full.data() + full.size());
    }
    unit.release();
  }
  return out;
}

// --time-budget: rank 0 decides after each step whether another step and a checkpoint still fit
// in the budget, from the slowest step and the slowest save seen so far, and every rank follows
// (clocks differ between ranks; they must not disagree on when to stop).
class StopClock {
 public:
  StopClock(fsdp::ProcessGroup& group, double budget, double start)
      : group_(group), budget_(budget), last_(start), start_(start) {}
  void saved(double seconds) {
    save_took(seconds);
    last_ = MPI_Wtime();  // the save is not a step
  }
  // A save in the background, from its start to its publication: longer than a save alone (it
  // shared the cores with the steps meanwhile), so the budget keeps room for one at least as long.
  void save_took(double seconds) { slowest_save_ = std::max(slowest_save_, seconds); }
  bool must_stop() {
    if (budget_ <= 0) {
      return false;
    }
    const double now = MPI_Wtime();
    slowest_step_ = std::max(slowest_step_, now - last_);
    last_ = now;
    // Room for two more steps (the next one and an epoch's evaluation) and a save; the first save
    // is assumed to take at least a second.
    int stop = now - start_ + 2 * slowest_step_ + std::max(slowest_save_, 1.0) > budget_;
    group_.broadcast(Kokkos::DefaultHostExecutionSpace(), fsdp::host_view(&stop, 1), 0);
    return stop != 0;
  }

 private:
  fsdp::ProcessGroup& group_;
  double budget_;
  double last_;
  double start_;
  double slowest_step_ = 0;
  double slowest_save_ = 0;
};

struct Evaluation {
  double accuracy = 0;
  double loss = 0;  // mean over the held-out positions, in nats
};

// What the summary needs of the epochs run: their number and the last one's line (not every
// line: a run of 10,000 epochs keeps its memory flat).
struct Trained {
  std::int64_t epochs = 0;
  nlohmann::json last_epoch;
  double first_step_loss = 0;
};

// ---- the run ----

template <class T>
class Run {
 public:
  Run(const TrainOptions& o, fsdp::ProcessGroup& group, const Split& data)
      : o_(o), group_(group), data_(data), ranks_(group.size()), rank_(group.rank()) {
    validate(o, ranks_, data);
    lr_schedule_ = lr_schedule(o, data);
    trained_ = make_trained_model<T>(o, data);
    parameters_ = trained_parameters(*trained_, o, fsdp::dtype_of<T>());
    positions_ = trained_->positions_per_sample();
    local_batch_ = o.batch_size / ranks_;
    // The most samples one step of one rank loads: a batch larger than the training split takes
    // the whole split, and the buffers are sized for that (--batch-size 2^40 on 205 samples
    // asked for 64 TiB).
    step_rows_ = std::min(local_batch_, fsdp::ceil_div(data.train.samples, std::int64_t{ranks_}));
    eval_first_ = data.eval.samples * rank_ / ranks_;
    eval_rows_ = data.eval.samples * (rank_ + 1) / ranks_ - eval_first_;
    // The held-out slice is evaluated in passes of at most this many samples (about 4096
    // positions, at least a micro-batch): a transformer's activations grow with positions times
    // the sequence, and a whole slice in one pass took 616 MiB per rank for scripts/demo's model.
    eval_chunk_ = std::max(micro_rows(), 4096 / positions_);
    // Every rank runs as many passes (each gathers every unit), the fullest slice's count.
    eval_passes_ =
        fsdp::ceil_div(fsdp::ceil_div(data.eval.samples, std::int64_t{ranks_}), eval_chunk_);
  }

  int run() {
    const double start = MPI_Wtime();
    const fsdp::StrategyOptions strategy_options{o_.full_shard_patterns, o_.layer_wise_patterns};
    const auto strategy = fsdp::make_strategy(o_.strategy, strategy_options);
    // Hybrid sharding: the model shards over its shard group and averages over the replicas;
    // the data is split over every rank either way.
    std::optional<fsdp::HybridGroups> hybrid;
    fsdp::ShardedModelOptions model_options;
    model_options.unit.mode = fsdp::parse_sharding_mode(o_.mode);
    std::optional<fsdp::LossScaler> scaler;
    if (!o_.mixed_precision.empty()) {
      const fsdp::DType half = fsdp::parse_dtype(o_.mixed_precision);
      model_options.unit.param_dtype = half;
      model_options.unit.reduce_dtype = half;
      model_options.unit.grad_dtype = fsdp::parse_dtype(o_.grad_dtype);
      if (half == fsdp::DType::f16) {
        scaler.emplace();
      }
    }
    const int shards = hybrid_shard_group_size(o_, ranks_);
    if (shards >= 0) {
      hybrid = fsdp::make_hybrid_groups(group_, shards);
      model_options.unit.replicas = hybrid->replicate;
    }
    fsdp::ProcessGroup& shard_group = hybrid ? hybrid->shard : group_;
    const fsdp::ShardingPlan plan = fsdp::agree_on_plan(*strategy, parameters_, shard_group);
    fsdp::ShardedModel<T> model(shard_group, plan, model_options);
    fsdp::Runtime<T> runtime = make_runtime(model, *trained_, o_);
    trained_->initialize(model, o_.seed);
    if (!o_.init_from.empty()) {
      agreed_on_every_rank(group_, "read --init-from",
                           [&] { fsdp::load_parameters(o_.init_from, model); });
    }
    fsdp::Optimizer<T> optimizer(o_.optimizer, optimizer_settings(o_));
    if (o_.optimizer_in_backward) {
      runtime.set_optimizer_in_backward(&optimizer);
    }
    fsdp::SamplerOptions sampler_options;
    sampler_options.seed = o_.seed;
    sampler_options.batch_size = o_.batch_size;
    fsdp::DistributedSampler sampler(group_, data_.train.samples, sampler_options);

    std::optional<fsdp::CheckpointDirectory> checkpoints;
    std::int64_t step_count = 0;  // steps taken since the start of training, resumed ones included
    std::int64_t first_epoch = 0;
    if (!o_.checkpoint_dir.empty()) {
      checkpoints.emplace(group_, o_.checkpoint_dir, o_.keep_last);
      if (o_.resume) {
        // Every rank loads the same file and reaches the same verdict: a refusal is reported once.
        agreed_on_every_rank(group_, "resume", [&] {
          resume(*checkpoints, model, optimizer, sampler, step_count, first_epoch, scaler);
        });
      }
      if (first_epoch < o_.epochs) {
        // A directory that takes no checkpoint (read-only, full) fails the run now, not at its
        // first save after hours of training.
        fsdp::CheckpointState state;
        state.step = step_count;
        agreed_on_every_rank(group_, "check --checkpoint-dir",
                             [&] { checkpoints->require_room(model, &optimizer, state); });
      }
    }
    seed_ = sampler.seed();
    std::vector<fsdp::DistributedSampler> mine{sampler};
    Schedule schedule(std::move(mine));
    const std::unique_ptr<Batch<T>> batch =
        trained_->make_batch(std::max(micro_rows(), std::min(eval_chunk_, eval_rows_)));

    fsdp::EstimateOptions estimate_options;
    estimate_options.optimizer = optimizer.kind();
    estimate_options.accumulates_whole_gradients = o_.grad_accumulation > 1;
    unsharded_bytes_ = fsdp::estimate(plan, estimate_options).unsharded_persistent_bytes;
    // The peak that MFU is measured against. One rank: its best GEMM rate. Several: the rate of
    // every rank's GEMMs at once, their flops over the wall time from a barrier before to one
    // after (ranks that share a core share its rate; GemmTimer says why not their own times).
    // Where bf16 weights multiply in bf16 (oneDNN), that rate: the one a bf16 run's products
    // reach, as a GPU's MFU counts against its tensor cores.
    fsdp_models::GemmTimer<T> gemm_timer(1024, bf16_products());
    gemm_timer.time(0);  // warm-up: the BLAS's buffers, the caches
    fsdp_apps::barrier_without_spinning(group_);
    const double gemm_start = MPI_Wtime();
    const fsdp_models::GemmRate rate = gemm_timer.time(3, false);
    fsdp_apps::barrier_without_spinning(group_);
    const double gemm_seconds = MPI_Wtime() - gemm_start;
    double flops = rate.flops;
    group_.all_reduce(Kokkos::DefaultHostExecutionSpace(), fsdp::host_view(&flops, 1));
    peak_flops_ = ranks_ == 1 ? rate.flops_per_s : flops / gemm_seconds;
    print_header(plan, schedule.steps(), batch->activation_bytes());

    Trained trained;
    double train_seconds = 0;
    double trained_samples = 0;  // all ranks
    bool stopped = false, out_of_time = false;
    StopClock clock(group_, o_.time_budget, start);
    ProgressBar progress(rank_ == 0 && !o_.json);
    // The save being written in the background, and when it started.
    std::optional<fsdp::CheckpointState> in_background;
    double background_start = 0;
    const auto published = [&](const std::string& file) {
      if (file.empty()) {
        return;
      }
      clock.save_took(MPI_Wtime() - background_start);
      progress.clear();
      print_checkpoint(file, *in_background, checkpoints->snapshot_bytes());
      in_background.reset();
    };
    // final: the run stops after it, so it is written before the run goes on.
    const auto save = [&](const fsdp::SamplerState& position, bool final) {
      fsdp::CheckpointState state;
      state.step = step_count;
      state.epoch = position.epoch;
      state.sampler = position;
      state.metadata = {{"fsdp-train.batch_size", std::to_string(o_.batch_size)},
                        {"fsdp-train.dtype", o_.dtype},
                        {"fsdp-train.lr_schedule", lr_schedule_.describe()}};
      state.objects = stateful_objects(scaler);
      // A save raises its failures on every rank (a full disk, a directory gone): reported once.
      std::string file;
      agreed_on_every_rank(group_, "save a checkpoint", [&] { file = checkpoints->finish_save(); });
      published(file);
      const double save_start = MPI_Wtime();
      if (final || o_.sync_checkpoints) {
        agreed_on_every_rank(group_, "save a checkpoint",
                             [&] { file = checkpoints->save(model, &optimizer, state); });
        clock.saved(MPI_Wtime() - save_start);
        progress.clear();
        print_checkpoint(file, state, 0);
      } else {
        agreed_on_every_rank(group_, "save a checkpoint",
                             [&] { checkpoints->save_in_background(model, &optimizer, state); });
        clock.saved(MPI_Wtime() - save_start);  // the time the step waited
        in_background = state;
        background_start = save_start;
      }
    };
    bool first_step = true;
    for (std::int64_t epoch = first_epoch; epoch < o_.epochs && !stopped; ++epoch) {
      schedule.set_epoch(epoch);
      progress.start_epoch(epoch, o_.epochs, schedule.steps());
      const double epoch_start = MPI_Wtime();
      LossSums sums;
      double samples = 0;
      std::vector<std::int64_t> indices;
      for (std::int64_t step = 0; step < schedule.steps(); ++step) {
        schedule.indices(step, indices);
        const auto rows = static_cast<std::int64_t>(indices.size());
        const LossSums step_sums = train_step(
            model, runtime, *batch, data_.train, indices, schedule.samples(step), ranks_,
            o_.grad_accumulation, optimizer, lr_schedule_, o_.clip, scaler ? &*scaler : nullptr);
        ++step_count;
        progress.step(step + 1);
        // The step's loss over every rank: a non-finite one ends the run on every rank alike.
        // (fp16 loss scaling skips steps whose 16-bit gradients overflow; the loss itself is
        // computed in fp32, so a non-finite loss is divergence that no skipped step repairs.)
        double global[2] = {step_sums.loss, static_cast<double>(rows * positions_)};
        group_.all_reduce(Kokkos::DefaultHostExecutionSpace(), fsdp::host_view(global, 2));
        if (!std::isfinite(global[0])) {
          progress.clear();
          char lr[32];
          std::snprintf(lr, sizeof lr, "%g", o_.lr);
          throw AgreedError("the loss of step " + std::to_string(step_count) + " (epoch " +
                            std::to_string(epoch + 1) + ", step " + std::to_string(step + 1) +
                            " of " + std::to_string(schedule.steps()) + ") is " +
                            (std::isnan(global[0]) ? "NaN" : "infinite") +
                            ": training diverged; lower --lr (" + lr +
                            ") or clip the gradients (--clip)");
        }
        if (first_step) {
          trained.first_step_loss = global[0] / global[1];
          first_step = false;
        }
        sums.loss += step_sums.loss;
        sums.correct += step_sums.correct;
        samples += static_cast<double>(rows);
        const bool last = epoch + 1 == o_.epochs && step + 1 == schedule.steps();
        stopped = !last && o_.stop_after > 0 && step_count >= o_.stop_after;
        out_of_time = !last && !stopped && clock.must_stop();
        stopped = stopped || out_of_time;
        if (checkpoints && (stopped || last ||
                            (o_.checkpoint_every > 0 && step_count % o_.checkpoint_every == 0))) {
          save(schedule.state_after_step(step), stopped || last);
        }
        if (checkpoints && checkpoints->pending_save()) {
          std::string file;
          agreed_on_every_rank(group_, "save a checkpoint",
                               [&] { file = checkpoints->try_finish_save(); });
          published(file);
        }
        if (stopped) {
          break;
        }
      }
      double totals[3] = {sums.loss, sums.correct, samples};
      group_.all_reduce(Kokkos::DefaultHostExecutionSpace(), fsdp::host_view(totals, 3));
      const double seconds = MPI_Wtime() - epoch_start;
      train_seconds += seconds;
      trained_samples += totals[2];
      if (totals[2] == 0) {
        continue;  // resumed at the very end of training: nothing was left to do
      }
      progress.clear();
      const Evaluation eval = evaluate(runtime, *batch);
      const double positions = totals[2] * static_cast<double>(positions_);
      const double positions_per_s = positions / seconds;
      nlohmann::json line = {
          {"type", "epoch"},
          {"epoch", epoch + 1},
          {"steps", schedule.steps()},
          {"loss", totals[0] / positions},
          {"train_accuracy", totals[1] / positions},
          {"eval_accuracy", eval.accuracy},
          {"eval_loss", eval.loss},
          {"samples_per_s", totals[2] / seconds},
          {"lr", optimizer.settings().lr},  // the rate of the epoch's last step
          {trained_->position_name() + "s_per_s", positions_per_s},
          {"mfu", positions_per_s * trained_->flops_per_position() / peak_flops_},
          {"seconds", seconds}};
      if (positions_ > 1) {  // a language model over bytes: the loss in bits per byte
        line["bits_per_byte"] = totals[0] / positions / std::log(2.0);
        line["eval_bits_per_byte"] = eval.loss / std::log(2.0);
      }
      if (stopped) {
        line["partial"] = true;  // the run stopped inside this epoch
      }
      add_memory(model, line);
      print_epoch(line);
      ++trained.epochs;
      trained.last_epoch = std::move(line);
    }
    const double total_seconds = MPI_Wtime() - start;

    int code = kExitOk;
    nlohmann::json summary = trained.epochs == 0 ? nlohmann::json::object() : trained.last_epoch;
    summary["type"] = "summary";
    summary.erase("seconds");
    summary["epochs"] = trained.epochs;  // run by this process
    summary["first_step_loss"] = trained.first_step_loss;
    summary["train_seconds"] = train_seconds;
    summary["total_seconds"] = total_seconds;
    summary["samples_per_s"] = train_seconds > 0 ? trained_samples / train_seconds : 0.0;
    summary["ranks"] = ranks_;
    summary["strategy"] = plan.strategy();
    summary["mode"] = fsdp::name_of(model.mode());
    summary["mixed_precision"] = o_.mixed_precision.empty() ? "none" : o_.mixed_precision;
    summary["grad_dtype"] = o_.mixed_precision.empty() ? o_.dtype : o_.grad_dtype;
    if (scaler) {
      summary["skipped_steps"] = scaler->state().skipped_steps;
      summary["loss_scale"] = scaler->scale();
    }
    summary["shard_group_size"] = plan.world_size();
    summary["dtype"] = o_.dtype;
    summary["parameters"] = trained_->parameter_count();
    summary["peak_bytes_per_rank_max"] = max_over_ranks(model.memory().total_peak);
    // Communication that compute waited for: the scopes' waits for their unit's gather, over
    // training and evaluation, on the rank that waited longest (docs/train.md).
    double waited_s[2] = {runtime.stats().wait_s, runtime.stats().reduce_s};
    group_.all_reduce(Kokkos::DefaultHostExecutionSpace(), fsdp::host_view(waited_s, 2),
                      fsdp::ReduceOp::max);
    summary["gather_wait_seconds_max"] = waited_s[0];
    summary["reduce_seconds_max"] = waited_s[1];
    summary["scopes"] = runtime.stats().scopes;
    summary["scopes_ready_on_entry"] = runtime.stats().ready_on_entry;
    const bool dropped =
        trained.epochs > 0 && trained.last_epoch["loss"].get<double>() < trained.first_step_loss;
    summary["loss_dropped"] = dropped;
    summary["steps_done"] = step_count;
    summary["stopped"] = stopped;
    if (o_.expect_loss_drop && !dropped) {
      code = kExitLossDidNotDrop;
    }
    print_summary(summary);
    if (stopped && rank_ == 0) {
      std::printf("fsdp-train: stopped after step %lld (%s)%s\n",
                  static_cast<long long>(step_count),
                  out_of_time ? "--time-budget" : "--stop-after",
                  checkpoints ? "; continue with --resume" : "");
      std::fflush(stdout);
    }
    if (out_of_time) {
      code = kExitOutOfTime;
    }

    if (o_.check && !stopped) {
      const double final_loss =
          trained.epochs == 0 ? 0.0 : trained.last_epoch["loss"].get<double>();
      const int check_code = check(model, final_loss);
      if (code == kExitOk) {
        code = check_code;
      }
    }
    if (o_.expect_loss_drop && !dropped && rank_ == 0) {
      std::fprintf(stderr,
                   "fsdp-train: the loss did not fall (--expect-loss-drop): last epoch's mean "
                   "%.6g is not below the first step's %.6g\n",
                   trained.epochs == 0 ? 0.0 : trained.last_epoch["loss"].get<double>(),
                   trained.first_step_loss);
    }
    return code;
  }

 private:
  double max_over_ranks(std::int64_t bytes) {
    double value = static_cast<double>(bytes);
    group_.all_reduce(Kokkos::DefaultHostExecutionSpace(), fsdp::host_view(&value, 1),
                      fsdp::ReduceOp::max);
    return value;
  }

  void add_memory(fsdp::ShardedModel<T>& model, nlohmann::json& line) {
    // Both figures in one all-reduce, issued by every rank alike (a rank without /proc gives -1).
    // The resident size is the whole process as the kernel sees it (fsdp's buffers, MPI's, the
    // data, the program): what shows a leak that fsdp's own accounting cannot (tests/train:
    // flat over 10,000 epochs).
    const long rss_kb = fsdp_apps::status_kb("VmRSS:");
    double largest[2] = {static_cast<double>(model.memory().model_state()),
                         rss_kb >= 0 ? static_cast<double>(rss_kb) * 1024 : -1.0};
    group_.all_reduce(Kokkos::DefaultHostExecutionSpace(), fsdp::host_view(largest, 2),
                      fsdp::ReduceOp::max);
    const double state = largest[0];
    line["model_state_bytes_per_rank_max"] = state;
    line["unsharded_model_state_bytes"] = unsharded_bytes_;
    line["model_state_ratio"] =
        state / static_cast<double>(std::max<std::int64_t>(1, unsharded_bytes_));
    if (largest[1] >= 0) {
      line["rss_bytes_per_rank_max"] = largest[1];
    }
  }

  // What a checkpoint saves and restores beside the tensors: the loss scaler of an fp16 run.
  static fsdp::StatefulObjects stateful_objects(std::optional<fsdp::LossScaler>& scaler) {
    fsdp::StatefulObjects objects;
    if (scaler) {
      objects["loss_scaler"] = &*scaler;
    }
    return objects;
  }

  // Continues from the newest checkpoint in the directory, if there is one: parameters,
  // optimizer state and step count, the sampler's position, the step and epoch counts, the loss
  // scaler's state.
  void resume(fsdp::CheckpointDirectory& checkpoints, fsdp::ShardedModel<T>& model,
              fsdp::Optimizer<T>& optimizer, fsdp::DistributedSampler& sampler,
              std::int64_t& step_count, std::int64_t& epoch,
              std::optional<fsdp::LossScaler>& scaler) {
    const std::string file = checkpoints.latest();
    if (file.empty()) {
      if (rank_ == 0) {
        std::printf("fsdp-train: no checkpoint in '%s' yet: starting from step 0\n",
                    checkpoints.path().c_str());
      }
      return;
    }
    // Loading checks names, shapes and dtypes on every rank alike; the model is this process's
    // own, so a refusal below leaves nothing behind.
    const fsdp::CheckpointHeader loaded =
        fsdp::load_checkpoint(file, model, &optimizer, stateful_objects(scaler));
    const auto& metadata = loaded.state.metadata;
    const auto batch = metadata.find("fsdp-train.batch_size");
    fsdp::require(batch == metadata.end() || batch->second == std::to_string(o_.batch_size),
                  "--resume: '" + file + "' was trained with --batch-size " +
                      (batch == metadata.end() ? "?" : batch->second) +
                      ", this run has --batch-size " + std::to_string(o_.batch_size) +
                      ": resume with the same global batch size (on any number of ranks that "
                      "divides it)",
                  fsdp::ErrorKind::mismatch);
    fsdp::require(loaded.state.sampler.has_value(),
                  "--resume: '" + file +
                      "' holds no sampler position: it was not written by "
                      "fsdp-train",
                  fsdp::ErrorKind::mismatch);
    sampler.restore(*loaded.state.sampler);
    // A schedule is the options' to choose on each run (a longer run, a lower rate after a
    // divergence); it continues from the optimizer's step count. Say when it changed.
    const auto schedule = metadata.find("fsdp-train.lr_schedule");
    if (schedule != metadata.end() && schedule->second != lr_schedule_.describe() && rank_ == 0) {
      std::printf("fsdp-train: note: '%s' was trained with lr %s; continuing with lr %s\n",
                  file.c_str(), schedule->second.c_str(), lr_schedule_.describe().c_str());
    }
    step_count = loaded.state.step;
    epoch = loaded.state.epoch;
    if (rank_ == 0) {
      std::printf("fsdp-train: resumed from '%s': step %lld, epoch %lld, written by %s (%s)\n",
                  file.c_str(), static_cast<long long>(step_count),
                  static_cast<long long>(epoch + 1),
                  fsdp_apps::count_of(loaded.world_size, "rank").c_str(), loaded.strategy.c_str());
      std::fflush(stdout);
    }
  }

  // snapshot_bytes: of a save in the background, the host memory its snapshot holds on rank 0
  // (0: a save written before training went on).
  void print_checkpoint(const std::string& file, const fsdp::CheckpointState& state,
                        std::int64_t snapshot_bytes) {
    if (rank_ != 0) {
      return;
    }
    if (o_.json) {
      const nlohmann::json line = {{"type", "checkpoint"},
                                   {"file", file},
                                   {"step", state.step},
                                   {"epoch", state.epoch},
                                   {"background", snapshot_bytes > 0},
                                   {"snapshot_bytes", snapshot_bytes}};
      std::printf("%s\n", line.dump().c_str());
    } else if (snapshot_bytes > 0) {
      std::printf("checkpoint: step %lld saved to %s (in the background; snapshot %.2f MB)\n",
                  static_cast<long long>(state.step), file.c_str(),
                  static_cast<double>(snapshot_bytes) / 1e6);
    } else {
      std::printf("checkpoint: step %lld saved to %s\n", static_cast<long long>(state.step),
                  file.c_str());
    }
    std::fflush(stdout);
  }

  // Accuracy and mean loss on the held-out split, per position: each rank takes a contiguous
  // slice, the sums are added over the ranks.
  Evaluation evaluate(fsdp::Runtime<T>& runtime, Batch<T>& batch) {
    LossSums sums;
    std::vector<std::int64_t> indices;
    for (std::int64_t pass = 0; pass < eval_passes_; ++pass) {
      indices.clear();
      const std::int64_t first = std::min(pass * eval_chunk_, eval_rows_);
      const std::int64_t end = std::min(first + eval_chunk_, eval_rows_);
      for (std::int64_t i = first; i < end; ++i) {
        indices.push_back(eval_first_ + i);
      }
      batch.load(data_.eval, indices);
      // Every rank gathers every unit, even with no rows.
      const LossSums part = batch.evaluate(runtime, end - first);
      runtime.finish_step();  // an evaluation step: forward scopes only
      sums.loss += part.loss;
      sums.correct += part.correct;
    }
    double totals[2] = {sums.correct, sums.loss};
    group_.all_reduce(Kokkos::DefaultHostExecutionSpace(), fsdp::host_view(totals, 2));
    const double positions = static_cast<double>(data_.eval.samples * positions_);
    return Evaluation{totals[0] / positions, totals[1] / positions};
  }

  // The same training unsharded on rank 0 (a 1-rank group holds every parameter whole), from
  // the same initial values, with the same optimizer and the same global batches in the same
  // order; then the largest relative difference of each parameter (max |sharded - unsharded| /
  // max |unsharded|). A 16-bit run (--mixed-precision) is compared with fp32 training: its
  // rounding sends the weights along a different path to an equally good model, so the verdict
  // is the last epoch's mean loss (final_loss) against the reference's, and the parameter
  // difference is only reported. So is an fp32 transformer's: Adam turns the round-off of
  // gradients that are zero in exact arithmetic (a key bias shifts every score of a row alike)
  // into whole steps of the learning rate, so its fp32 weights part ways within tens of steps
  // (fp64 ones stay within 1e-9) while the loss does not. Collective; returns the same code on
  // every rank.
  int check(fsdp::ShardedModel<T>& model, double final_loss) {
    const auto sharded = full_parameters(model);
    // largest relative difference, the parameter's index, the reference's last-epoch mean loss,
    // and the elements of frozen parameters (--freeze) that the sharded run changed
    double result[4] = {0, 0, 0, 0};
    if (rank_ == 0) {
      fsdp::ProcessGroup alone(MPI_COMM_SELF);
      const fsdp::ShardingPlan plan = fsdp::FullSharding().make_plan(parameters_, 1);
      fsdp::ShardedModel<T> reference(alone, plan);
      fsdp::Runtime<T> reference_runtime = make_runtime(reference, *trained_, o_);
      trained_->initialize(reference, o_.seed);
      if (!o_.init_from.empty()) {
        fsdp::load_parameters(o_.init_from, reference);
      }
      // A frozen parameter ends where it started, to the bit.
      const auto initial = full_parameters(reference);
      for (const fsdp::ParameterInfo& p : parameters_) {
        if (!p.trainable) {
          const auto& start = initial.at(p.name);
          const auto& end = sharded.at(p.name);
          for (std::size_t i = 0; i < start.size(); ++i) {
            result[3] += start[i] == end[i] ? 0 : 1;
          }
        }
      }
      fsdp::Optimizer<T> optimizer(o_.optimizer, optimizer_settings(o_));
      if (o_.optimizer_in_backward) {
        reference_runtime.set_optimizer_in_backward(&optimizer);
      }
      fsdp::SamplerOptions sampler_options;
      sampler_options.seed = seed_;
      sampler_options.batch_size = o_.batch_size;
      std::vector<fsdp::DistributedSampler> every_rank;
      for (int r = 0; r < ranks_; ++r) {
        every_rank.emplace_back(data_.train.samples, ranks_, r, sampler_options);
      }
      Schedule schedule(std::move(every_rank));
      const std::unique_ptr<Batch<T>> batch = trained_->make_batch(step_rows_ * ranks_);
      std::vector<std::int64_t> indices;
      LossSums last_epoch;
      double last_epoch_samples = 0;
      for (int epoch = 0; epoch < o_.epochs; ++epoch) {
        schedule.set_epoch(epoch);
        last_epoch = LossSums{};
        last_epoch_samples = 0;
        for (std::int64_t step = 0; step < schedule.steps(); ++step) {
          schedule.indices(step, indices);
          const auto rows = static_cast<std::int64_t>(indices.size());
          // The whole global batch at once: what --grad-accumulation must equal.
          last_epoch.loss += train_step(reference, reference_runtime, *batch, data_.train, indices,
                                        rows, 1, 1, optimizer, lr_schedule_, o_.clip, nullptr)
                                 .loss;
          last_epoch_samples += static_cast<double>(rows * positions_);
        }
      }
      result[2] = last_epoch.loss / std::max(last_epoch_samples, 1.0);
      const auto unsharded = full_parameters(reference);
      int index = 0;
      for (const auto& [name, values] : unsharded) {
        const auto& other = sharded.at(name);
        double largest = 0, difference = 0;
        for (std::size_t i = 0; i < values.size(); ++i) {
          largest = std::max(largest, std::abs(values[i]));
          difference = std::max(difference, std::abs(values[i] - other[i]));
        }
        const double relative = difference / std::max(largest, 1e-30);
        if (relative >= result[0]) {
          result[0] = relative;
          result[1] = index;
        }
        ++index;
      }
    }
    // The other ranks wait without spinning on the cores rank 0 computes on.
    fsdp_apps::barrier_without_spinning(group_);
    group_.broadcast(Kokkos::DefaultHostExecutionSpace(), fsdp::host_view(result, 4), 0);
    // Judged by the last epoch's loss: 16-bit runs and fp32 transformers (above).
    const bool half = !o_.mixed_precision.empty();
    const bool by_loss = half || (positions_ > 1 && o_.dtype == "fp32");
    const std::string kind = half ? o_.mixed_precision : by_loss ? "fp32 by loss" : o_.dtype;
    const double tolerance = o_.check_tolerance >= 0 ? o_.check_tolerance : check_tolerance(kind);
    const double loss_difference = std::abs(final_loss - result[2]);
    const bool pass =
        (by_loss ? loss_difference <= tolerance : result[0] <= tolerance) && result[3] == 0;
    const std::string worst = std::next(sharded.begin(), static_cast<long>(result[1]))->first;
    if (rank_ == 0) {
      if (o_.json) {
        nlohmann::json line = {{"type", "check"},
                               {"max_relative_difference", result[0]},
                               {"parameter", worst},
                               {"tolerance", tolerance},
                               {"pass", pass}};
        if (!o_.freeze_patterns.empty()) {
          line["frozen_elements_changed"] = result[3];
        }
        if (by_loss) {
          line["loss"] = final_loss;
          line["reference_loss"] = result[2];
          line["loss_difference"] = loss_difference;
        }
        std::printf("%s\n", line.dump().c_str());
      } else if (by_loss) {
        std::printf(
            "check: last epoch's mean loss %.4f, fp32 training unsharded on one rank %.4f: "
            "difference %.2g, tolerance %.0e: %s (largest relative parameter difference %.3g, "
            "%s)\n",
            final_loss, result[2], loss_difference, tolerance, pass ? "PASS" : "FAIL", result[0],
            worst.c_str());
      } else {
        std::printf(
            "check: largest relative parameter difference to unsharded training on one rank: "
            "%.3g (%s), tolerance %.0e: %s\n",
            result[0], worst.c_str(), tolerance, pass ? "PASS" : "FAIL");
      }
      if (result[3] > 0) {
        std::printf("check: FAIL: %.0f elements of frozen parameters (--freeze) changed\n",
                    result[3]);
      }
      std::fflush(stdout);
    }
    return pass ? kExitOk : kExitCheckFailed;
  }

  // ---- printing (rank 0) ----

  static std::string human(double bytes) { return fsdp::bytes_text(bytes, 1); }

  void print_header(const fsdp::ShardingPlan& plan, std::int64_t steps,
                    std::int64_t activation_bytes) {
    if (rank_ != 0) {
      return;
    }
    if (o_.json) {
      nlohmann::json line = {
          {"type", "config"},
          {"ranks", ranks_},
          {"strategy", plan.strategy()},
          {"mode", o_.mode},
          {"shard_group_size", plan.world_size()},
          {"transport", group_.transport_name()},
          {"blas", fsdp_models::blas_description()},
          {"half_compute", o_.mixed_precision.empty() ? "" : fsdp_models::half_gemm_description()},
          {"subnormals_flushed", fsdp_models::flushes_subnormals()},
          {"peak_flops", peak_flops_},
          {"model", trained_->description()},
          {"parameters", trained_->parameter_count()},
          {"flops_per_" + trained_->position_name(), trained_->flops_per_position()},
          {"activation_bytes_per_rank", activation_bytes},
          {"dtype", o_.dtype},
          {"optimizer", o_.optimizer},
          {"lr", o_.lr},
          {"lr_schedule", lr_schedule_.describe()},
          {"data", data_.train.description},
          {"train_samples", data_.train.samples},
          {"eval_samples", data_.eval.samples},
          {"global_batch", o_.batch_size},
          {"local_batch", local_batch_},
          {"grad_accumulation", o_.grad_accumulation},
          {"steps_per_epoch", steps},
          {"seed", seed_}};
      if (const auto* mlp = dynamic_cast<const TrainedMlp<T>*>(trained_.get())) {
        line["mlp"] = mlp->widths();
      }
      std::printf("%s\n", line.dump().c_str());
    } else {
      const std::string arrangement = plan.world_size() == ranks_
                                          ? std::string()
                                          : " (" + std::to_string(ranks_ / plan.world_size()) +
                                                " replicas of " +
                                                std::to_string(plan.world_size()) + ")";
      std::printf("fsdp-train: %s%s, strategy %s, mode %s, %s (%lld parameters, %s), %s lr %s\n",
                  fsdp_apps::count_of(ranks_, "rank").c_str(), arrangement.c_str(),
                  plan.strategy().c_str(), fsdp::name_of(fsdp::parse_sharding_mode(o_.mode)),
                  trained_->description().c_str(),
                  static_cast<long long>(trained_->parameter_count()), o_.dtype.c_str(),
                  o_.optimizer.c_str(), lr_schedule_.describe().c_str());
      std::printf("transport: %s\n", group_.transport_name());
      std::printf("blas: %s; peak %.1f GFLOP/s over %s (measured %s GEMMs at once)%s\n",
                  fsdp_models::blas_description().c_str(), peak_flops_ / 1e9,
                  fsdp_apps::count_of(ranks_, "rank").c_str(),
                  bf16_products() ? "bf16 (oneDNN)" : o_.dtype.c_str(),
                  fsdp_models::flushes_subnormals() ? "; subnormal floats flushed to zero" : "");
      if (!o_.mixed_precision.empty()) {
        std::printf("%s compute: %s\n", o_.mixed_precision.c_str(),
                    fsdp_models::half_gemm_description().c_str());
      }
      std::printf("activations: %s per rank\n",
                  human(static_cast<double>(activation_bytes)).c_str());
      std::printf("data: %s\n", data_.train.description.c_str());
      std::printf(
          "train %lld samples, eval %lld; global batch %lld (%lld per rank), %s per "
          "epoch\n\n",
          static_cast<long long>(data_.train.samples), static_cast<long long>(data_.eval.samples),
          static_cast<long long>(o_.batch_size), static_cast<long long>(local_batch_),
          fsdp_apps::count_of(steps, "step").c_str());
      if (positions_ > 1) {
        std::printf("%5s %6s %9s %9s %9s %10s %6s %24s\n", "epoch", "steps", "loss", "eval bpb",
                    "eval acc", "tokens/s", "MFU", "model state/rank (ratio)");
      } else {
        std::printf("%5s %6s %9s %9s %9s %10s %6s %24s\n", "epoch", "steps", "loss", "train acc",
                    "eval acc", "samples/s", "MFU", "model state/rank (ratio)");
      }
    }
    std::fflush(stdout);
  }

  void print_epoch(const nlohmann::json& line) {
    if (rank_ != 0) {
      return;
    }
    if (o_.json) {
      std::printf("%s\n", line.dump().c_str());
    } else {
      const std::string memory = human(line["model_state_bytes_per_rank_max"].get<double>()) +
                                 " of " + human(static_cast<double>(unsharded_bytes_));
      char ratio[32];
      std::snprintf(ratio, sizeof ratio, " (%.2f)", line["model_state_ratio"].get<double>());
      const double mfu = 100 * line["mfu"].get<double>();
      if (positions_ > 1) {
        std::printf("%5d %6lld %9.4f %9.4f %8.2f%% %10.0f %5.1f%% %24s\n", line["epoch"].get<int>(),
                    static_cast<long long>(line["steps"].get<std::int64_t>()),
                    line["loss"].get<double>(), line["eval_bits_per_byte"].get<double>(),
                    100 * line["eval_accuracy"].get<double>(), line["tokens_per_s"].get<double>(),
                    mfu, (memory + ratio).c_str());
      } else {
        std::printf(
            "%5d %6lld %9.4f %8.2f%% %8.2f%% %10.0f %5.1f%% %24s\n", line["epoch"].get<int>(),
            static_cast<long long>(line["steps"].get<std::int64_t>()), line["loss"].get<double>(),
            100 * line["train_accuracy"].get<double>(), 100 * line["eval_accuracy"].get<double>(),
            line["samples_per_s"].get<double>(), mfu, (memory + ratio).c_str());
      }
    }
    std::fflush(stdout);
  }

  void print_summary(const nlohmann::json& summary) {
    if (rank_ != 0) {
      return;
    }
    if (o_.json) {
      std::printf("%s\n", summary.dump().c_str());
    } else if (!o_.json && summary.contains("loss")) {
      std::printf(
          "\nsummary: %s%s in %.2f s (%.0f samples/s training), loss %.4f (first step "
          "%.4f), train accuracy %.2f%%, eval accuracy %.2f%%\n",
          fsdp_apps::count_of(summary["epochs"].get<std::int64_t>(), "epoch").c_str(),
          summary["stopped"].get<bool>() ? " (the last one partly)" : "",
          summary["total_seconds"].get<double>(), summary["samples_per_s"].get<double>(),
          summary["loss"].get<double>(), summary["first_step_loss"].get<double>(),
          100 * summary["train_accuracy"].get<double>(),
          100 * summary["eval_accuracy"].get<double>());
      std::printf(
          "model state per rank (parameters + gradients + optimizer state, largest rank): %s, "
          "unsharded %s: %.3f of it on %s; peak of all fsdp buffers per rank %s\n",
          human(summary["model_state_bytes_per_rank_max"].get<double>()).c_str(),
          human(static_cast<double>(unsharded_bytes_)).c_str(),
          summary["model_state_ratio"].get<double>(), fsdp_apps::count_of(ranks_, "rank").c_str(),
          human(summary["peak_bytes_per_rank_max"].get<double>()).c_str());
    }
    std::fflush(stdout);
  }

  // The most samples one forward and backward pass of one rank takes (--grad-accumulation).
  std::int64_t micro_rows() const {
    return fsdp::ceil_div(step_rows_, std::int64_t{o_.grad_accumulation});
  }

  const TrainOptions& o_;
  fsdp::ProcessGroup& group_;
  const Split& data_;
  int ranks_;
  int rank_;
  std::unique_ptr<TrainedModel<T>> trained_;
  fsdp::LrSchedule lr_schedule_{0.0, fsdp::LrScheduleOptions{}};  // the options' (constructor)
  std::int64_t positions_ = 1;                                    // loss terms per sample
  double peak_flops_ = 0;  // the GEMM rate of every rank together, measured at the start
  // Whether the models multiply their bf16 weights in bf16 (models/onednn_gemm.hpp).
  bool bf16_products() const {
    return std::is_same_v<T, float> && o_.mixed_precision == "bf16" &&
           fsdp_models::onednn_bf16_gemm_available();
  }
  std::vector<fsdp::ParameterInfo> parameters_;
  std::int64_t local_batch_ = 1;
  std::int64_t step_rows_ = 1;  // min(local batch, a rank's share of the training split)
  std::int64_t eval_first_ = 0;
  std::int64_t eval_rows_ = 0;
  std::int64_t eval_chunk_ = 1;   // samples per evaluation pass
  std::int64_t eval_passes_ = 0;  // evaluation passes, the same on every rank
  std::int64_t unsharded_bytes_ = 0;
  std::uint64_t seed_ = 0;
};

}  // namespace

std::int64_t scheduled_steps(const TrainOptions& o, const Split& data) {
  return o.epochs * fsdp::ceil_div(data.train.samples, o.batch_size);
}

int hybrid_shard_group_size(const TrainOptions& o, int ranks) {
  if (o.replicate_groups > 0) {
    fsdp::require(ranks % o.replicate_groups == 0,
                  "--replicate-groups " + std::to_string(o.replicate_groups) +
                      " does not divide the " + std::to_string(ranks) +
                      " ranks; give a divisor of " + std::to_string(ranks));
    return ranks / o.replicate_groups;
  }
  return o.shard_group_size;
}

double check_tolerance(const std::string& dtype) {
  // bf16 and fp16 runs: the largest difference of the last epoch's mean loss (in nats) to fp32
  // training. The built-in data reaches about 0.0075 in 10 epochs and 16-bit rounding moves
  // that by about 1e-4 (measured, 1-4 ranks); a broken cast or reduction moves it by 1e-1.
  if (dtype == "bf16" || dtype == "fp16") {
    return 5e-3;
  }
  // An fp32 transformer: its trajectory parts from the reference's as round-off grows (fp64
  // weights differ by 5e-10 after 51 steps of scripts/demo's model, fp32 ones by 0.56), and the
  // last epoch's loss of scripts/demo (206 steps) differs by 0.026. The same training without
  // the output head's share of the tied embedding's gradient ends 0.45 away.
  if (dtype == "fp32 by loss") {
    return 5e-2;
  }
  return dtype == "fp64" ? 1e-9 : 1e-4;
}

void validate(const TrainOptions& o, int ranks, const Split& data) {
  fsdp::require(o.epochs >= 1, "--epochs must be at least 1, got " + std::to_string(o.epochs));
  fsdp::require(o.dtype == "fp32" || o.dtype == "fp64",
                "--dtype '" + o.dtype + "' is not supported: use fp32 or fp64");
  fsdp::require(!o.hidden.empty(), "--hidden needs at least one layer width, e.g. 64,64");
  for (std::int64_t width : o.hidden) {
    fsdp::require(width >= 1, "--hidden widths must be >= 1, got " + std::to_string(width));
  }
  fsdp::require(o.clip >= 0, "--clip must be >= 0 (0: no clipping)");
  fsdp::require(!o.optimizer_in_backward || o.clip == 0,
                "--optimizer-in-backward steps each unit before the last gradients are reduced, "
                "so it cannot clip by the global norm: leave out --clip or "
                "--optimizer-in-backward");
  fsdp::require(!o.optimizer_in_backward || o.mixed_precision != "fp16",
                "--optimizer-in-backward steps each unit before the fp16 loss scaler has seen "
                "every gradient: use --mixed-precision bf16, or leave out "
                "--optimizer-in-backward");
  fsdp::parse_sharding_mode(o.mode);
  fsdp::require(o.mixed_precision.empty() || o.dtype == "fp32",
                "--mixed-precision " + o.mixed_precision +
                    " keeps fp32 master weights: use --dtype fp32 (the default), not --dtype " +
                    o.dtype);
  fsdp::require(o.grad_dtype == "fp32" || !o.mixed_precision.empty(),
                "--grad-dtype " + o.grad_dtype +
                    " keeps mixed precision's gradients in 16 bits: give --mixed-precision bf16 "
                    "or fp16 with it");
  const int shards = hybrid_shard_group_size(o, ranks);
  fsdp::require(shards <= 0 || ranks % shards == 0,
                "--shard-group-size " + std::to_string(shards) + " does not divide the " +
                    std::to_string(ranks) + " ranks; give a divisor of " + std::to_string(ranks));
  fsdp::Optimizer<double>(o.optimizer, optimizer_settings(o));  // checks lr, weight decay, momentum
  const fsdp::LrDecay decay = fsdp::parse_lr_decay(o.lr_schedule);
  if (decay == fsdp::LrDecay::linear || decay == fsdp::LrDecay::cosine) {
    const std::int64_t steps = scheduled_steps(o, data);
    fsdp::require(o.warmup_steps < steps, "--warmup-steps " + std::to_string(o.warmup_steps) +
                                              " leaves no step for the " + o.lr_schedule +
                                              " decay: the run has " + std::to_string(steps) +
                                              " steps (--epochs " + std::to_string(o.epochs) +
                                              " of " + std::to_string(steps / o.epochs) +
                                              "); give fewer warm-up steps or more --epochs");
    fsdp::require(o.min_lr <= o.lr, "--min-lr " + fsdp::number_text(o.min_lr) + " is above --lr " +
                                        fsdp::number_text(o.lr) + ": the " + o.lr_schedule +
                                        " decay ends at --min-lr; give one <= --lr");
  }
  fsdp::require(decay != fsdp::LrDecay::step || o.lr_gamma > 0,
                "--lr-schedule step multiplies by --lr-gamma: give one > 0");
  lr_schedule(o, data);  // whatever else the schedule refuses
  fsdp::require(data.train.classes >= 2, "the data needs at least 2 classes");
  fsdp::require(o.model == "mlp" || o.model == "gpt",
                "--model '" + o.model + "' is not a model fsdp-train has: use mlp or gpt");
  if (o.model == "gpt") {
    fsdp::require(std::all_of(o.hidden.begin(), o.hidden.end(),
                              [&](std::int64_t width) { return width == o.hidden.front(); }),
                  "--model gpt: every block has the same width; give one --hidden width and "
                  "--layers for the number of blocks");
    fsdp::require(data.train.classes == 256 && data.train.dim == o.seq + 1,
                  "--model gpt trains on text (--text FILE, default " +
                      std::string(kDefaultCorpus) + "), not on --data");
    const std::string problem = gpt_shape(o).validation_error();
    fsdp::require(problem.empty(), "--model gpt: " + problem);
  } else {
    fsdp::require(!o.activation_checkpointing,
                  "--activation-checkpointing recomputes transformer blocks: use it with "
                  "--model gpt");
  }
  const fsdp::StrategyOptions strategy_options{o.full_shard_patterns, o.layer_wise_patterns};
  fsdp::make_strategy(o.strategy, strategy_options)
      ->make_plan(trained_parameters(*make_trained_model<float>(o, data), o, fsdp::DType::f32),
                  ranks);
  const bool has_dir = !o.checkpoint_dir.empty();
  fsdp::require(has_dir || (o.checkpoint_every == 0 && !o.resume && o.keep_last == 0),
                "--checkpoint-every, --keep-last and --resume need --checkpoint-dir");
  // A save of its step would replace it, --keep-last remove it, and --check reads it again at
  // the end.
  fsdp::require(!has_dir || o.init_from.empty() ||
                    !fsdp::CheckpointDirectory::manages(o.checkpoint_dir, o.init_from),
                "--init-from '" + o.init_from + "' is a file of --checkpoint-dir '" +
                    o.checkpoint_dir +
                    "', which this run's saves replace and --keep-last removes: copy it out of "
                    "the directory first, give another --checkpoint-dir, or continue that run "
                    "with --resume");
  fsdp::require(
      o.checkpoint_every >= 0 && o.keep_last >= 0 && o.stop_after >= 0 && o.time_budget >= 0,
      "--checkpoint-every, --keep-last, --stop-after and --time-budget must be >= 0");
  fsdp::require(!o.check || (o.stop_after == 0 && o.time_budget == 0),
                "--check compares a finished run with unsharded training: it cannot be combined "
                "with --stop-after or --time-budget");
  fsdp::require(o.batch_size >= ranks && o.batch_size % ranks == 0,
                "--batch-size " + std::to_string(o.batch_size) + " cannot be split evenly over " +
                    std::to_string(ranks) + " ranks: give a multiple of " + std::to_string(ranks) +
                    " (e.g. " +
                    std::to_string(std::max<std::int64_t>(1, o.batch_size / ranks) * ranks) +
                    "), so that every rank's local batch has the same size");
  const std::int64_t local = o.batch_size / ranks;
  fsdp::require(o.grad_accumulation <= local,
                "--grad-accumulation " + std::to_string(o.grad_accumulation) +
                    " splits each rank's " + std::to_string(local) + " samples (--batch-size " +
                    std::to_string(o.batch_size) + " over " + std::to_string(ranks) +
                    " ranks) into more micro-batches than samples: give at most " +
                    std::to_string(local));
}

int train(const TrainOptions& options, fsdp::ProcessGroup& group, const Split& data) {
  if (!options.keep_subnormals) {
    fsdp_models::flush_subnormals_to_zero();  // this thread computes every step
                                              // (models/subnormals.hpp)
  }
  if (options.dtype == "fp64") {
    return Run<double>(options, group, data).run();
  }
  return Run<float>(options, group, data).run();
}

}  // namespace fsdp_train
