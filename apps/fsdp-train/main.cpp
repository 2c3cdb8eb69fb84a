// fsdp-train: the main job. Trains a GPT-2 transformer on text, or a multi-layer perceptron, with
// fully sharded data parallelism on every rank of MPI_COMM_WORLD: parameters, gradients and Adam
// state sharded by the strategy given on the command line, samples from the DistributedSampler,
// progress per epoch on rank 0.
// docs/train.md describes it.
#include <mpi.h>

#include <CLI/CLI.hpp>
#include <Kokkos_Core.hpp>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "../common/finite_number.hpp"
#include "../common/kokkos_session.hpp"
#include "../common/mpi_start.hpp"
#include "../common/output_written.hpp"
#include "../common/usage_exit.hpp"
#include "../common/whole_number.hpp"
#include "../common/wrapped_help.hpp"
#include "command_line_agreement.hpp"
#include "dataset.hpp"
#include "fsdp/comm/device_selection.hpp"
#include "fsdp/comm/process_group.hpp"
#include "fsdp/core/error.hpp"
#include "fsdp/io/hdf5_handle.hpp"
#include "fsdp/optim/lr_schedule.hpp"
#include "fsdp/shard/sharding_mode.hpp"
#include "models/blas_runtime.hpp"
#include "train.hpp"

namespace {

struct DataOptions {
  std::string text;             // --model gpt: the text file or directory ("" for the default)
  std::int64_t text_bytes = 0;  // --model gpt: only the first this many bytes (0: all)
  std::string path;
  std::string features = "features";
  std::string labels = "labels";
  std::string write_path;
  fsdp_train::SyntheticOptions synthetic;
};

int run(fsdp::ProcessGroup& group, const fsdp_train::TrainOptions& options,
        const DataOptions& data_options) {
  fsdp_train::Dataset whole;
  fsdp_train::agreed_on_every_rank(
      group, data_options.write_path.empty() ? "read the data" : "write the data", [&] {
        // Every rank reads (or generates) the whole set: it is small, and the --check reference on
        // rank 0 needs all of it.
        fsdp_train::Dataset all =
            options.model == "gpt"
                ? fsdp_train::read_text(
                      data_options.text.empty() ? fsdp_train::kDefaultCorpus : data_options.text,
                      options.seq, data_options.text_bytes)
            : data_options.path.empty()
                ? fsdp_train::make_synthetic(data_options.synthetic)
                : fsdp_train::read_hdf5(data_options.path, data_options.features,
                                        data_options.labels);
        if (data_options.write_path.empty()) {
          whole = std::move(all);
        } else if (group.rank() == 0) {
          fsdp_train::write_hdf5(all, data_options.write_path, data_options.features,
                                 data_options.labels);
          std::printf(
              "fsdp-train: wrote %s to %s (datasets '%s' [%lld, %lld] fp32, '%s' [%lld] "
              "int32)\n",
              all.description.c_str(), data_options.write_path.c_str(),
              data_options.features.c_str(), static_cast<long long>(all.samples),
              static_cast<long long>(all.dim), data_options.labels.c_str(),
              static_cast<long long>(all.samples));
        }
      });
  if (!data_options.write_path.empty()) {
    return fsdp_train::kExitOk;
  }
  fsdp_train::Split data;
  try {
    fsdp_train::agreed_on_every_rank(group, "use these options", [&] {
      data = fsdp_train::split(whole, options.eval_fraction);
      whole = fsdp_train::Dataset();
      fsdp_train::validate(options, group.size(), data);
    });
  } catch (const fsdp_train::AgreedError& error) {
    // Options that do not fit the job (the ranks, the data, the model): a usage error, agreed.
    throw CLI::ValidationError(error.what());
  }
  return fsdp_train::train(options, group, data);
}

}  // namespace

int main(int argc, char** argv) {
  if (!fsdp_apps::start_mpi(&argc, &argv, "fsdp-train")) {
    return 1;
  }
  int rank = 0, size = 1;
  if (MPI_Comm_rank(MPI_COMM_WORLD, &rank) != MPI_SUCCESS ||
      MPI_Comm_size(MPI_COMM_WORLD, &size) != MPI_SUCCESS) {
    std::fprintf(stderr, "fsdp-train: MPI_Comm_rank/MPI_Comm_size failed\n");
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  // fsdp reports every HDF5 failure itself; libhdf5's own leak on a damaged file (--data,
  // --init-from, --resume) must not print at exit after the clean error.
  fsdp::hdf5::stop_error_printing_for_the_process();
  // The kernels for this CPU, where OpenBLAS does not know it; one BLAS thread per rank: MPI
  // runs a rank per core (OPENBLAS_CORETYPE and OPENBLAS_NUM_THREADS override them).
  fsdp_models::choose_blas_kernels();
  fsdp_models::limit_blas_threads(1);
#if defined(KOKKOS_ENABLE_CUDA)
  // One GPU per rank, by node-local rank, chosen before Kokkos initializes (ranks share GPUs
  // when a node has fewer); a KOKKOS_DEVICE_ID the user set wins.
  try {
    fsdp::DeviceSelectionOptions selection;
    selection.allow_sharing = true;
    const int device = fsdp::select_device(MPI_COMM_WORLD, fsdp::visible_device_count(), selection);
    if (std::getenv("KOKKOS_DEVICE_ID") == nullptr &&
        setenv("KOKKOS_DEVICE_ID", std::to_string(device).c_str(), 1) != 0) {
      throw fsdp::Error("fsdp-train: could not set KOKKOS_DEVICE_ID");
    }
  } catch (const std::exception& error) {
    std::fprintf(stderr, "fsdp-train: rank %d of %d: %s\n", rank, size, error.what());
    MPI_Finalize();
    return 1;
  }
#endif
  int code = 0;
  {
    fsdp_apps::KokkosSession kokkos(argc, argv);
    if (kokkos.refused("fsdp-train", rank == 0)) {
      MPI_Finalize();
      return fsdp_apps::kExitUsage;
    }
    fsdp_train::TrainOptions o;
    DataOptions d;
    int layers = 0;
    CLI::App app{
        "fsdp-train: trains a multi-layer perceptron, or a GPT-2 transformer on text, with fully "
        "sharded data parallelism on every MPI rank (parameters, gradients and optimizer state "
        "split across the ranks). Run it under mpiexec; docs/train.md describes it."};
    app.footer(fsdp_apps::kKokkosOptions);
    fsdp_apps::wrap_help(app);
    fsdp_apps::add_version_flag(app, "fsdp-train");
    app.add_option("--model", o.model,
                   "mlp: a classifier on --data or synthetic data; gpt: a GPT-2 transformer "
                   "predicting the next byte of --text (--layers blocks of width --hidden)")
        ->check(CLI::IsMember({"mlp", "gpt"}))
        ->capture_default_str();
    app.add_option("--heads", o.heads, "gpt: attention heads (a divisor of --hidden)")
        ->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 16))
        ->capture_default_str();
    app.add_option("--seq", o.seq, "gpt: bytes per sequence (the context length)")
        ->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 16))
        ->capture_default_str();
    app.add_flag("--keep-subnormals", o.keep_subnormals,
                 "compute with subnormal floats (below 1.2e-38 in fp32) instead of flushing them "
                 "to zero, which x86 CPUs process many times slower");
    app.add_flag("--activation-checkpointing", o.activation_checkpointing,
                 "gpt: keep only each block's input from the forward pass and recompute the "
                 "block inside its backward scope");
    auto* text =
        app.add_option("--text", d.text,
                       "gpt: a text file, or a directory of them, to learn (default: " +
                           std::string(fsdp_train::kDefaultCorpus) + ", Debian's fortunes)");
    auto* text_bytes = app.add_option("--text-bytes", d.text_bytes,
                                      "gpt: learn only the first this many bytes of the text")
                           ->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 40));
    app.add_option("--hidden", o.hidden, "hidden layer widths, comma separated")
        ->delimiter(',')
        ->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 20))
        ->capture_default_str();
    app.add_option("--layers", layers,
                   "number of hidden layers (repeats a single --hidden width; default: as many "
                   "as --hidden lists)")
        ->check(CLI::Range(1, 1000));
    app.add_option("--dtype", o.dtype, "element type of parameters and computation")
        ->check(CLI::IsMember({"fp32", "fp64"}))
        ->capture_default_str();
    app.add_option("--optimizer", o.optimizer, "adam, adamw (decoupled weight decay) or sgd")
        ->check(CLI::IsMember({"adam", "adamw", "sgd"}))
        ->capture_default_str();
    app.add_option("--lr", o.lr, "learning rate")
        ->check(fsdp_apps::finite_number(0))
        ->capture_default_str();
    app.add_option("--lr-schedule", o.lr_schedule,
                   "learning rate after the warm-up: constant, linear or cosine (decay to "
                   "--min-lr at the run's end), or step (times --lr-gamma every "
                   "--lr-step-size steps)")
        ->check(fsdp_apps::parsed_by(fsdp::parse_lr_decay, "DECAY"))
        ->capture_default_str();
    app.add_option("--warmup-steps", o.warmup_steps,
                   "steps of linear warm-up: step t (from 0) takes lr (t + 1) / warmup")
        ->check(CLI::NonNegativeNumber)
        ->capture_default_str();
    app.add_option("--min-lr", o.min_lr,
                   "linear, cosine: the rate the decay reaches at the run's end")
        ->check(fsdp_apps::finite_number(0))
        ->capture_default_str();
    app.add_option("--lr-step-size", o.lr_step_size, "step: steps between decays")
        ->check(CLI::PositiveNumber)
        ->capture_default_str();
    app.add_option("--lr-gamma", o.lr_gamma, "step: the factor of each decay")
        ->check(fsdp_apps::finite_number(0))
        ->capture_default_str();
    app.add_option("--weight-decay", o.weight_decay, "weight decay (L2 for adam and sgd)")
        ->check(fsdp_apps::finite_number(0))
        ->capture_default_str();
    app.add_option("--momentum", o.momentum, "sgd momentum")
        ->check(fsdp_apps::finite_number(0))
        ->capture_default_str();
    app.add_option("--strategy", o.strategy,
                   "sharding strategy: full (every parameter split across all ranks), "
                   "layerwise (each layer whole on one rank) or hybrid")
        ->check(CLI::IsMember({"full", "layerwise", "hybrid"}))
        ->capture_default_str();
    app.add_option("--mode", o.mode,
                   "what stays sharded: full_shard (ZeRO-3), shard_grad_op (ZeRO-2), "
                   "shard_optimizer (ZeRO-1) or no_shard (replicated data parallel)")
        ->check(fsdp_apps::parsed_by(fsdp::parse_sharding_mode, "MODE"))
        ->capture_default_str();
    app.add_option("--mixed-precision", o.mixed_precision,
                   "bf16 or fp16: parameters gathered and gradients reduced in 16 bits over "
                   "fp32 master pieces (fp16 with dynamic loss scaling); needs --dtype fp32")
        ->check(CLI::IsMember({"bf16", "fp16"}));
    app.add_option("--grad-dtype", o.grad_dtype,
                   "with --mixed-precision: keep the reduced gradients (and shard_optimizer's "
                   "whole ones) in fp32 or bf16, the ZeRO paper's 2 bytes")
        ->check(CLI::IsMember({"fp32", "bf16"}))
        ->capture_default_str();
    auto* shard_group = app.add_option(
        "--shard-group-size", o.shard_group_size,
        "hybrid sharding: shard within groups of this many consecutive ranks and replicate "
        "across the groups (0: the ranks of each node)");
    shard_group->check(CLI::NonNegativeNumber);
    app.add_option("--replicate-groups", o.replicate_groups,
                   "hybrid sharding: this many replica groups, each sharding over ranks / "
                   "groups ranks")
        ->check(CLI::PositiveNumber)
        ->excludes(shard_group);
    app.add_option("--full-shard", o.full_shard_patterns,
                   "hybrid: layer-name globs to split across all ranks (layers are layer0, "
                   "layer1, ...)");
    app.add_option("--layer-wise", o.layer_wise_patterns,
                   "hybrid: layer-name globs to place whole on one rank");
    app.add_option("--freeze", o.freeze_patterns,
                   "parameter-name globs to freeze (fine-tuning, e.g. 'layer0.*' or "
                   "'wte.weight'): gathered for compute, never reduced or stepped, no optimizer "
                   "state");
    app.add_option("--epochs", o.epochs, "passes over the training split")
        ->check(CLI::Range(1, 1000000))
        ->capture_default_str();
    app.add_option("--batch-size", o.batch_size,
                   "global batch size, split evenly across the ranks (a multiple of the ranks)")
        ->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 40))
        ->capture_default_str();
    app.add_option("--grad-accumulation", o.grad_accumulation,
                   "each rank's share of a step in this many forward and backward passes (micro-"
                   "batches), their gradients reduced once: the same step, less activation memory")
        ->check(CLI::Range(1, 1 << 20))
        ->capture_default_str();
    app.add_option("--seed", o.seed,
                   "seed of the initial parameters, the sampler's shuffle and "
                   "the synthetic data")
        ->check(fsdp_apps::whole_number_64())
        ->capture_default_str();
    app.add_option("--clip", o.clip, "clip the global gradient norm to this (0: no clipping)")
        ->check(fsdp_apps::finite_number(0))
        ->capture_default_str();
    app.add_option("--prefetch-limit", o.prefetch_limit,
                   "units gathered at once, the computing one included (prefetch depth + 1)")
        ->check(CLI::PositiveNumber);
    app.add_flag("--no-prefetch", o.no_prefetch,
                 "gather each unit only when its scope opens (no overlap)");
    app.add_option("--backward-prefetch-limit", o.backward_prefetch_limit,
                   "units gathered at once while the backward pass runs (0: --prefetch-limit)")
        ->check(CLI::Range(0, 1 << 20))
        ->capture_default_str();
    app.add_option("--reductions-in-flight", o.reductions_in_flight,
                   "gradient reductions left in flight after each backward scope (0: wait for "
                   "each)")
        ->check(CLI::Range(0, 1 << 20))
        ->capture_default_str();
    app.add_flag("--optimizer-in-backward", o.optimizer_in_backward,
                 "step each unit's optimizer as soon as its gradient reduction lands, while the "
                 "backward computes (not with --clip or --mixed-precision fp16)");
    app.add_option("--eval-fraction", o.eval_fraction,
                   "share of the samples held out for evaluation (the last ones)")
        ->check(fsdp_apps::finite_number(0, 1))
        ->capture_default_str();
    app.add_flag("--json", o.json, "print one JSON object per line instead of a table");
    CLI::Option* check =
        app.add_flag("--check", o.check,
                     "after training, train again unsharded on rank 0 and compare the parameters "
                     "(exit code 5 beyond the tolerance)");
    app.add_option("--check-tolerance", o.check_tolerance,
                   "--check's tolerance: the largest relative parameter difference (default 1e-4 "
                   "in fp32, 1e-9 in fp64), or with --mixed-precision the difference of the last "
                   "epoch's mean loss in nats (default 5e-3)")
        ->check(fsdp_apps::finite_number(0, 1e300))
        ->needs(check);
    app.add_flag("--expect-loss-drop", o.expect_loss_drop,
                 "exit with code 3 unless the last epoch's mean loss is below the first step's");
    app.add_option("--init-from", o.init_from,
                   "start from the parameters in this HDF5 file instead of random ones: one "
                   "dataset per parameter named as the parameter (layer0.weight, ...), e.g. from "
                   "fsdp-ckpt export, or an fsdp checkpoint");
    auto* dir = app.add_option("--checkpoint-dir", o.checkpoint_dir,
                               "save checkpoints (parallel HDF5) in this directory: at the end, "
                               "when stopped, and every --checkpoint-every steps; "
                               "docs/checkpoints.md");
    app.add_option("--checkpoint-every", o.checkpoint_every,
                   "steps between checkpoints (0: only at the end or when stopped)")
        ->check(CLI::NonNegativeNumber)
        ->needs(dir);
    app.add_option("--keep-last", o.keep_last, "keep only this many newest checkpoints (0: all)")
        ->check(CLI::NonNegativeNumber)
        ->needs(dir);
    app.add_flag("--sync-checkpoints", o.sync_checkpoints,
                 "write every checkpoint before training goes on (by default those of "
                 "--checkpoint-every are written in the background and published when written)")
        ->needs(dir);
    app.add_flag("--resume", o.resume,
                 "continue from the newest checkpoint in --checkpoint-dir (on any number of ranks "
                 "that divides --batch-size); start from step 0 when there is none")
        ->needs(dir);
    app.add_option("--stop-after", o.stop_after,
                   "stop once this many steps are done in all, resumed ones included (saving a "
                   "checkpoint with --checkpoint-dir)")
        ->check(CLI::PositiveNumber);
    app.add_option("--time-budget", o.time_budget,
                   "seconds this run may take: stop early enough to save a checkpoint, and exit "
                   "with code 4 when training is not finished")
        ->check(fsdp_apps::positive_number());
    auto* data = app.add_option("--data", d.path,
                                "HDF5 file with a 2-D float features dataset and a 1-D integer "
                                "labels dataset (default: built-in synthetic data)");
    app.add_option("--features", d.features, "--data: the features dataset [samples, features]")
        ->capture_default_str();
    app.add_option("--labels", d.labels, "--data: the labels dataset [samples], classes 0..K-1")
        ->capture_default_str();
    auto* samples = app.add_option("--samples", d.synthetic.samples, "synthetic: samples")
                        ->check(CLI::Range(std::int64_t{2}, std::int64_t{1} << 30))
                        ->capture_default_str();
    auto* dim = app.add_option("--features-dim", d.synthetic.dim, "synthetic: features")
                    ->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 20))
                    ->capture_default_str();
    auto* classes = app.add_option("--classes", d.synthetic.classes, "synthetic: classes")
                        ->check(CLI::Range(std::int64_t{2}, fsdp_train::kMaxClasses))
                        ->capture_default_str();
    auto* write = app.add_option("--write-data", d.write_path,
                                 "write the synthetic data set to this HDF5 file (datasets "
                                 "--features and --labels) and exit");
    for (CLI::Option* option : {samples, dim, classes, write}) {
      option->excludes(data);
    }
    for (CLI::Option* option : {data, samples, dim, classes, write}) {
      option->excludes(text);
      option->excludes(text_bytes);
    }
    try {
      // Collective: the ranks also agree here on checking collectives (FSDP_CHECK_COLLECTIVES),
      // which the command line cannot show.
      fsdp::ProcessGroup group(MPI_COMM_WORLD);
      // Every rank parses its own command line; a rank that cannot still takes part in the
      // agreement below (with its error as its options), so no rank is left waiting.
      std::string parsed;
      try {
        app.parse(argc, argv);
        parsed = app.config_to_str(true, false);
      } catch (const CLI::ParseError& error) {
        parsed = fsdp_train::kUnparsable + std::string(error.what());
        fsdp_train::require_same_command_line(group, parsed);
        throw;
      }
      fsdp_train::require_same_command_line(group, parsed);
      if (layers > 0) {
        if (o.hidden.size() == 1) {
          o.hidden.assign(static_cast<std::size_t>(layers), o.hidden[0]);
        } else if (static_cast<int>(o.hidden.size()) != layers) {
          throw CLI::ValidationError("--layers " + std::to_string(layers) +
                                     " disagrees with --hidden, which lists " +
                                     std::to_string(o.hidden.size()) +
                                     " widths: give one width to repeat, or as many as layers");
        }
      }
      if (o.eval_fraction <= 0 || o.eval_fraction >= 1) {
        throw CLI::ValidationError("--eval-fraction must be strictly between 0 and 1");
      }
      if (o.model != "gpt" && (!d.text.empty() || d.text_bytes > 0)) {
        throw CLI::ValidationError(
            "--text and --text-bytes are what --model gpt learns: add "
            "--model gpt, or give the MLP --data");
      }
      if (o.model == "gpt" && !d.path.empty()) {
        throw CLI::ValidationError("--model gpt learns text: give --text FILE, not --data");
      }
      d.synthetic.seed = o.seed;
      code = run(group, o, d);
    } catch (const CLI::ParseError& error) {
      // Every rank parsed the same arguments: rank 0 speaks, every rank exits.
      code = fsdp_apps::usage_exit(app, error, "fsdp-train", rank == 0);
    } catch (const fsdp_train::CommandLineDisagreement& error) {
      if (rank == 0) {
        std::fprintf(stderr, "fsdp-train: %s\n", error.what());
      }
      code = fsdp_apps::kExitUsage;
    } catch (const fsdp_train::AgreedError& error) {
      if (rank == 0) {
        std::fprintf(stderr, "fsdp-train: %s\n", error.what());
      }
      code = fsdp_train::kExitError;
    } catch (const std::exception& error) {
      const auto* ours = dynamic_cast<const fsdp::Error*>(&error);
      if (ours != nullptr && ours->kind() == fsdp::ErrorKind::mismatch) {
        // Ranks that disagree (on a collective, on the settings of a model, runtime, optimizer
        // or sampler, on checking collectives) are told so on every rank alike: rank 0 speaks.
        if (rank == 0) {
          std::fprintf(stderr, "fsdp-train: %s\n", ours->message());
        }
      } else {
        // Not known to have happened on every rank: the others may be waiting in a collective.
        std::fprintf(stderr, "fsdp-train: rank %d of %d: %s\n", rank, size, error.what());
        std::fflush(stderr);
        if (size > 1) {
          MPI_Abort(MPI_COMM_WORLD, fsdp_train::kExitError);
        }
      }
      code = fsdp_train::kExitError;
    }
  }
  code = fsdp_apps::output_written("fsdp-train", code);
  MPI_Finalize();
  return code;
}
