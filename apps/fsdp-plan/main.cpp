// fsdp-plan: makes a sharding plan for a model at any world size and prints what each rank holds
// and sends per step. Runs on one process, without mpiexec: the plan and its estimates are
// arithmetic, so a plan for 1024 ranks needs no 1024 ranks.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "../common/not_input.hpp"
#include "../common/output_written.hpp"
#include "../common/usage_exit.hpp"
#include "../common/wrapped_help.hpp"
#include "fsdp/core/error.hpp"
#include "fsdp/core/text.hpp"
#include "fsdp/io/plan_file.hpp"
#include "fsdp/shard/model_description.hpp"
#include "fsdp/shard/plan_estimate.hpp"
#include "fsdp/shard/sharding_mode.hpp"
#include "fsdp/shard/sharding_strategy.hpp"

namespace {

struct Options {
  std::string model_path;
  std::string preset;
  std::string preset_config;
  std::string plan_path;
  int layers = 0, heads = 0, kv_heads = 0;
  std::int64_t hidden = 0, vocab = 0, intermediate = 0, max_positions = 0;
  std::string dtype;
  std::string strategy = "full";
  std::vector<std::string> full_shard_patterns, layer_wise_patterns;
  int world_size = 0;
  std::string optimizer = "adam";
  std::string precision = "fp32";
  std::string grad_dtype = "fp32";
  std::string mode = "full_shard";
  int shard_group_size = 0;
  bool json = false;
  bool all_ranks = false;
  std::string output;
};

// The model: a description file, or a preset with the user's overrides.
std::vector<fsdp::ParameterInfo> model_parameters(const Options& o, std::string& description) {
  if (!o.model_path.empty()) {
    description = "model '" + o.model_path + "'";
    return fsdp::read_model_description(o.model_path);
  }
  fsdp::TransformerConfig config;
  if (!o.preset_config.empty()) {
    config = fsdp::transformer_config_from_json(
        fsdp::read_text_file(o.preset_config, "model configuration"),
        "preset config '" + o.preset_config + "'");
  } else {
    config = fsdp::parse_family(o.preset) == fsdp::TransformerFamily::llama
                 ? fsdp::TransformerConfig::llama2_7b()
                 : fsdp::TransformerConfig::gpt2_small();
  }
  if (o.layers > 0)
    config.layers = o.layers;
  if (o.hidden > 0)
    config.hidden = o.hidden;
  if (o.heads > 0)
    config.heads = o.heads;
  if (o.kv_heads > 0)
    config.kv_heads = o.kv_heads;
  if (o.vocab > 0)
    config.vocab = o.vocab;
  if (o.intermediate > 0)
    config.intermediate = o.intermediate;
  if (o.max_positions > 0)
    config.max_positions = o.max_positions;
  if (!o.dtype.empty())
    config.dtype = fsdp::parse_dtype(o.dtype);
  description = std::string(fsdp::name_of(config.family)) + " preset (layers " +
                std::to_string(config.layers) + ", hidden " + std::to_string(config.hidden) +
                ", heads " + std::to_string(config.heads) + ", vocab " +
                std::to_string(config.vocab) + ", " + fsdp::name_of(config.dtype) + ")";
  return fsdp::transformer_parameters(config);
}

// Bytes in the largest binary unit that keeps the figure >= 1: "7.42 MiB".
std::string human(std::int64_t bytes) {
  return fsdp::bytes_text(static_cast<double>(bytes));
}

std::string grouped(std::int64_t value) {
  std::string digits = std::to_string(value), out;
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) {
      out += ',';
    }
    out += digits[i];
  }
  return out;
}

nlohmann::json rank_json(const fsdp::RankEstimate& r) {
  return {{"rank", r.rank},
          {"elements", r.elements},
          {"parameter_bytes", r.parameter_bytes},
          {"gradient_bytes", r.gradient_bytes},
          {"optimizer_bytes", r.optimizer_bytes},
          {"persistent_bytes", r.persistent_bytes()},
          {"forward_gather_send_bytes", r.forward_gather_send_bytes},
          {"backward_gather_send_bytes", r.backward_gather_send_bytes},
          {"gradient_send_bytes", r.gradient_send_bytes},
          {"replica_gradient_send_bytes", r.replica_gradient_send_bytes},
          {"send_bytes", r.send_bytes()}};
}

// One row of the comparison of every mode (estimate_every_mode): the fullest rank's bytes and the
// most one rank sends, and both over no_shard's (none when no_shard's is 0: one rank sends
// nothing).
struct ModeRow {
  const fsdp::PlanEstimate* estimate = nullptr;
  fsdp::RankEstimate fullest;
  std::int64_t send_bytes = 0;
  std::optional<double> memory_ratio, traffic_ratio;
};

std::vector<ModeRow> mode_rows(const std::vector<fsdp::PlanEstimate>& modes) {
  const auto ratio = [](std::int64_t part, std::int64_t whole) -> std::optional<double> {
    if (whole == 0) {
      return std::nullopt;
    }
    return static_cast<double>(part) / static_cast<double>(whole);
  };
  const fsdp::PlanEstimate& baseline = modes.front();  // no_shard
  std::vector<ModeRow> rows;
  for (const auto& e : modes) {
    ModeRow row{&e, e.fullest_rank(), e.max_send_bytes(), std::nullopt, std::nullopt};
    row.memory_ratio =
        ratio(row.fullest.persistent_bytes(), baseline.fullest_rank().persistent_bytes());
    row.traffic_ratio = ratio(row.send_bytes, baseline.max_send_bytes());
    rows.push_back(row);
  }
  return rows;
}

nlohmann::json modes_json(const std::vector<fsdp::PlanEstimate>& modes) {
  const auto ratio = [](const std::optional<double>& value) {
    return value ? nlohmann::json(*value) : nlohmann::json(nullptr);
  };
  nlohmann::json out = nlohmann::json::array();
  for (const ModeRow& row : mode_rows(modes)) {
    const fsdp::PlanEstimate& e = *row.estimate;
    out.push_back({{"mode", fsdp::name_of(e.options.mode)},
                   {"zero_stage", fsdp::zero_stage(e.options.mode)},
                   {"parameter_bytes", row.fullest.parameter_bytes},
                   {"gradient_bytes", row.fullest.gradient_bytes},
                   {"optimizer_bytes", row.fullest.optimizer_bytes},
                   {"persistent_bytes", row.fullest.persistent_bytes()},
                   {"gathered_working_set_bytes", e.gathered_working_set_bytes},
                   {"peak_bytes", e.peak_bytes()},
                   {"send_bytes", row.send_bytes},
                   {"persistent_ratio_to_no_shard", ratio(row.memory_ratio)},
                   {"send_ratio_to_no_shard", ratio(row.traffic_ratio)}});
  }
  return out;
}

void print_modes_table(const std::vector<fsdp::PlanEstimate>& modes, fsdp::ShardingMode chosen) {
  const auto ratio = [](const std::optional<double>& value) {
    char text[32] = "-";
    if (value) {
      std::snprintf(text, sizeof text, "%.3f", *value);
    }
    return std::string(text);
  };
  std::printf("every mode (bytes of the fullest rank; send: the most one rank sends per step):\n");
  std::printf("%-16s %5s %11s %11s %11s %11s %11s %11s %11s %9s %9s\n", "mode", "ZeRO", "params",
              "grads", "optimizer", "persistent", "working set", "peak", "send/step", "memory",
              "traffic");
  for (const ModeRow& row : mode_rows(modes)) {
    const fsdp::PlanEstimate& e = *row.estimate;
    const std::string name =
        std::string(e.options.mode == chosen ? "*" : " ") + fsdp::name_of(e.options.mode);
    std::printf(
        "%-16s %5d %11s %11s %11s %11s %11s %11s %11s %9s %9s\n", name.c_str(),
        fsdp::zero_stage(e.options.mode), human(row.fullest.parameter_bytes).c_str(),
        human(row.fullest.gradient_bytes).c_str(), human(row.fullest.optimizer_bytes).c_str(),
        human(row.fullest.persistent_bytes()).c_str(), human(e.gathered_working_set_bytes).c_str(),
        human(e.peak_bytes()).c_str(), human(row.send_bytes).c_str(),
        ratio(row.memory_ratio).c_str(), ratio(row.traffic_ratio).c_str());
  }
  std::printf(
      "(* the chosen mode; memory, traffic: persistent bytes, send/step over no_shard's)\n");
}

// The ranks the table and --json list, in order: every rank of a world of at most 16 (or with
// --all-ranks), else the first and last four and the fullest. Nothing else loops over the ranks,
// so fsdp-plan's time and memory do not grow with the world size beyond what it prints.
std::vector<int> shown_ranks(const fsdp::PlanEstimate& e, bool all_ranks) {
  const int n = e.world_size;
  std::vector<int> shown;
  if (all_ranks || n <= 16) {
    for (int r = 0; r < n; ++r) {
      shown.push_back(r);
    }
    return shown;
  }
  shown = {0, 1, 2, 3, n - 4, n - 3, n - 2, n - 1, e.fullest_rank().rank};
  std::sort(shown.begin(), shown.end());
  shown.erase(std::unique(shown.begin(), shown.end()), shown.end());
  return shown;
}

// --grad-dtype as the estimate took it.
const char* kept_gradients(const fsdp::EstimateOptions& options) {
  return options.keeps_16_bit_gradients ? "bf16" : "fp32";
}

void print_json(const std::string& model, const fsdp::ShardingPlan& plan,
                const fsdp::PlanEstimate& e, const std::vector<fsdp::PlanEstimate>& modes,
                bool all_ranks) {
  nlohmann::json ranks = nlohmann::json::array();
  for (int r : shown_ranks(e, all_ranks)) {
    ranks.push_back(rank_json(e.ranks[static_cast<std::size_t>(r)]));
  }
  // Every rank, as runs of ranks with equal figures within a shard group.
  nlohmann::json runs = nlohmann::json::array();
  for (const fsdp::RankRun& run : e.ranks.runs()) {
    nlohmann::json row = rank_json(run.estimate);
    row.erase("rank");
    row["first_rank"] = run.first;
    row["rank_count"] = run.count;
    runs.push_back(std::move(row));
  }
  const nlohmann::json out = {{"model", model},
                              {"tensors", plan.parameters().size()},
                              {"total_elements", e.total_elements},
                              {"strategy", plan.strategy()},
                              {"world_size", plan.world_size()},
                              {"mode", fsdp::name_of(e.options.mode)},
                              {"zero_stage", fsdp::zero_stage(e.options.mode)},
                              {"shard_group_size", e.options.shard_group_size},
                              {"replicas", e.replicas()},
                              {"optimizer", fsdp::name_of(e.options.optimizer)},
                              {"precision", fsdp::name_of(e.options.precision)},
                              {"grad_dtype", kept_gradients(e.options)},
                              {"imbalance", plan.imbalance()},
                              {"always_gathered", plan.always_gathered()},
                              {"largest_unit",
                               {{"name", e.largest_unit},
                                {"elements", e.largest_unit_elements},
                                {"gathered_working_set_bytes", e.gathered_working_set_bytes},
                                {"working_set_holds", e.working_set_holds}}},
                              {"whole_half_parameter_bytes", e.whole_half_parameter_bytes},
                              {"peak_bytes", e.peak_bytes()},
                              {"unsharded_persistent_bytes", e.unsharded_persistent_bytes},
                              {"totals",
                               {{"persistent_bytes", e.all_ranks.persistent_bytes()},
                                {"send_bytes", e.all_ranks.send_bytes()}}},
                              {"ranks", std::move(ranks)},
                              {"rank_runs", std::move(runs)},
                              {"modes", modes_json(modes)}};
  std::printf("%s\n", out.dump(2).c_str());
}

void print_table(const std::string& model, const fsdp::ShardingPlan& plan,
                 const fsdp::PlanEstimate& e, const std::vector<fsdp::PlanEstimate>& modes,
                 bool all_ranks) {
  const int replicas = e.replicas();
  std::printf("fsdp-plan: %s\n", model.c_str());
  std::printf(
      "  %s elements in %zu tensors; strategy %s; world size %d; mode %s (ZeRO-%d); "
      "optimizer %s; precision %s%s\n",
      grouped(e.total_elements).c_str(), plan.parameters().size(), plan.strategy().c_str(),
      plan.world_size(), fsdp::name_of(e.options.mode), fsdp::zero_stage(e.options.mode),
      fsdp::name_of(e.options.optimizer), fsdp::name_of(e.options.precision),
      e.options.keeps_16_bit_gradients ? " (gradients kept in bf16)" : "");
  if (replicas > 1) {
    std::printf(
        "  shard groups (HSDP) of %d ranks, %d copies (rank r is position r %% %d of "
        "group r / %d)\n",
        e.options.shard_group_size, replicas, e.options.shard_group_size,
        e.options.shard_group_size);
  }
  std::printf("\n");
  const int n = plan.world_size();
  // The replica column only when there are copies to all-reduce with.
  const auto row = [replicas](const std::string& rank, std::int64_t elements,
                              const fsdp::RankEstimate& r) {
    std::printf("%6s %16s %11s %11s %11s %11s %11s %11s %11s", rank.c_str(),
                grouped(elements).c_str(), human(r.parameter_bytes).c_str(),
                human(r.gradient_bytes).c_str(), human(r.optimizer_bytes).c_str(),
                human(r.persistent_bytes()).c_str(), human(r.forward_gather_send_bytes).c_str(),
                human(r.backward_gather_send_bytes).c_str(), human(r.gradient_send_bytes).c_str());
    if (replicas > 1) {
      std::printf(" %11s", human(r.replica_gradient_send_bytes).c_str());
    }
    std::printf("\n");
  };
  std::printf("%6s %16s %11s %11s %11s %11s %11s %11s %11s", "rank", "elements", "params", "grads",
              "optimizer", "persistent", "fwd gather", "bwd gather", "grad reduce");
  std::printf(replicas > 1 ? " %11s\n" : "\n", "replica ar");
  int previous = -1;
  for (int rank : shown_ranks(e, all_ranks)) {
    const fsdp::RankEstimate r = e.ranks[static_cast<std::size_t>(rank)];
    if (r.rank != previous + 1) {
      std::printf("%6s (%d ranks not shown; --all-ranks shows them)\n", "...",
                  r.rank - previous - 1);
    }
    previous = r.rank;
    row(std::to_string(r.rank), r.elements, r);
  }
  if (previous != n - 1) {
    std::printf("%6s (%d ranks not shown; --all-ranks shows them)\n", "...", n - 1 - previous);
  }
  row("all", e.all_ranks.elements, e.all_ranks);
  std::printf("\n");
  std::printf("imbalance (max owned bytes / mean): %.4f\n", plan.imbalance());
  std::printf("always gathered (replicated): %zu tensors\n", plan.always_gathered().size());
  if (e.largest_unit.empty() && e.whole_half_parameter_bytes == 0) {
    std::printf("working set: none (%s keeps parameters and gradients whole and resident)\n",
                fsdp::name_of(e.options.mode));
  } else if (e.largest_unit.empty()) {
    std::printf("working set (every parameter whole in 16 bits from forward to backward): %s\n",
                human(e.gathered_working_set_bytes).c_str());
  } else {
    std::printf("largest unit: '%s', %s elements; working set (full-size %s%s): %s\n",
                e.largest_unit.c_str(), grouped(e.largest_unit_elements).c_str(),
                e.working_set_holds.c_str(),
                e.whole_half_parameter_bytes > 0
                    ? ", and every parameter whole in 16 bits from forward to backward"
                    : "",
                human(e.gathered_working_set_bytes).c_str());
  }
  std::printf("peak per rank before activations (fullest rank + working set): %s\n",
              human(e.peak_bytes()).c_str());
  std::printf("without sharding (no_shard), every rank would hold: %s\n\n",
              human(e.unsharded_persistent_bytes).c_str());
  print_modes_table(modes, e.options.mode);
}

int run(const Options& o) {
  std::string model;
  std::unique_ptr<fsdp::ShardingPlan> plan;
  if (!o.plan_path.empty()) {
    plan = std::make_unique<fsdp::ShardingPlan>(fsdp::load_plan(o.plan_path));
    model = "plan '" + o.plan_path + "'";
  } else {
    const auto parameters = model_parameters(o, model);
    fsdp::StrategyOptions strategy_options{o.full_shard_patterns, o.layer_wise_patterns};
    try {
      const auto strategy = fsdp::make_strategy(o.strategy, strategy_options);
      plan = std::make_unique<fsdp::ShardingPlan>(strategy->make_plan(parameters, o.world_size));
    } catch (const fsdp::Error& error) {
      // The model was read and checked above: what the strategy refuses is its options (hybrid
      // without patterns, a pattern matching no layer, patterns for another strategy).
      if (error.kind() != fsdp::ErrorKind::usage) {
        throw;
      }
      throw CLI::ValidationError(error.message());
    }
  }
  fsdp::EstimateOptions estimate_options{fsdp::parse_optimizer(o.optimizer),
                                         fsdp::parse_precision(o.precision),
                                         fsdp::parse_sharding_mode(o.mode), o.shard_group_size};
  estimate_options.keeps_16_bit_gradients = o.grad_dtype == "bf16";
  const fsdp::PlanEstimate estimate = fsdp::estimate(*plan, estimate_options);
  const std::vector<fsdp::PlanEstimate> modes = fsdp::estimate_every_mode(*plan, estimate_options);
  if (o.json) {
    print_json(model, *plan, estimate, modes, o.all_ranks);
  } else {
    print_table(model, *plan, estimate, modes, o.all_ranks);
  }
  if (!o.output.empty()) {
    fsdp::save_plan(o.output, *plan);
    if (!o.json) {
      std::printf("plan written to %s\n", o.output.c_str());
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "fsdp-plan: a sharding plan for a model at any world size, with each rank's memory and "
      "traffic per step. Runs on one process; no mpiexec needed."};
  fsdp_apps::wrap_help(app);
  fsdp_apps::add_version_flag(app, "fsdp-plan");
  Options o;
  auto* model = app.add_option("--model", o.model_path,
                               "model description JSON: {\"parameters\": [{\"name\", \"shape\", "
                               "\"dtype\", \"layer\", \"always_gather\"}]}")
                    ->check(CLI::ExistingFile);
  auto* preset = app.add_option("--preset", o.preset,
                                "a built-in transformer: gpt2 (GPT-2 small "
                                "by default) or llama (Llama-2 7B)")
                     ->check(CLI::IsMember({"gpt2", "llama"}));
  auto* preset_config =
      app.add_option("--preset-config", o.preset_config,
                     "JSON {\"family\": \"gpt2\"|\"llama\", \"layers\", \"hidden\", \"heads\", "
                     "\"vocab\", ...}")
          ->check(CLI::ExistingFile);
  auto* plan_file = app.add_option("--plan", o.plan_path,
                                   "estimate a saved plan (.h5 or .json) instead of making one")
                        ->check(CLI::ExistingFile);
  model->excludes(preset)->excludes(preset_config)->excludes(plan_file);
  preset->excludes(preset_config)->excludes(plan_file);
  preset_config->excludes(plan_file);
  std::vector<CLI::Option*> preset_overrides;
  preset_overrides.push_back(app.add_option("--layers", o.layers, "preset: transformer blocks")
                                 ->check(CLI::Range(1, 1 << 30)));
  preset_overrides.push_back(
      app.add_option("--hidden", o.hidden, "preset: hidden size")->check(CLI::Range(1, 1 << 30)));
  preset_overrides.push_back(
      app.add_option("--heads", o.heads, "preset: attention heads")->check(CLI::Range(1, 1 << 30)));
  preset_overrides.push_back(
      app.add_option("--kv-heads", o.kv_heads, "preset (llama): key/value heads")
          ->check(CLI::Range(1, 1 << 30)));
  preset_overrides.push_back(
      app.add_option("--vocab", o.vocab, "preset: vocabulary size")->check(CLI::Range(1, 1 << 30)));
  preset_overrides.push_back(app.add_option("--intermediate", o.intermediate, "preset: MLP width")
                                 ->check(CLI::Range(1, 1 << 30)));
  preset_overrides.push_back(
      app.add_option("--max-positions", o.max_positions, "preset (gpt2): position embeddings")
          ->check(CLI::Range(1, 1 << 30)));
  preset_overrides.push_back(
      app.add_option("--dtype", o.dtype, "preset: parameter dtype (fp32, bf16, fp16, fp64)")
          ->check(fsdp_apps::parsed_by(fsdp::parse_dtype, "DTYPE")));
  auto* strategy =
      app.add_option("--strategy", o.strategy, "full, layerwise or hybrid")
          ->check(fsdp_apps::parsed_by(
              [](const std::string& name) {
                // hybrid's patterns are checked with the plan; the name alone here
                return fsdp::to_lower(name) == "hybrid" ? nullptr : fsdp::make_strategy(name);
              },
              "STRATEGY"))
          ->capture_default_str();
  auto* world = app.add_option("--world-size,-n", o.world_size, "ranks to plan for")
                    ->check(CLI::Range(1, 1 << 30));
  app.add_option("--full-shard", o.full_shard_patterns,
                 "hybrid: layer-name globs to shard fully ('*' and '?')");
  app.add_option("--layer-wise", o.layer_wise_patterns,
                 "hybrid: layer-name globs to place whole on one rank ('*' and '?')");
  app.add_option("--optimizer", o.optimizer, "sgd, sgd_momentum, adam or adamw")
      ->check(fsdp_apps::parsed_by(fsdp::parse_optimizer, "OPTIMIZER"))
      ->capture_default_str();
  app.add_option("--precision", o.precision,
                 "fp32 (every tensor in the parameter's dtype) or mixed (16-bit params and "
                 "grads, fp32 master weights and states)")
      ->check(fsdp_apps::parsed_by(fsdp::parse_precision, "PRECISION"))
      ->capture_default_str();
  app.add_option("--grad-dtype", o.grad_dtype,
                 "mixed precision: the dtype of the gradients kept between backward and step "
                 "(pieces, ZeRO-1's whole gradients): fp32, or bf16 for the ZeRO paper's 2 bytes "
                 "(UnitOptions::grad_dtype)")
      ->check(CLI::IsMember({"fp32", "bf16"}))
      ->capture_default_str();
  app.add_option("--mode", o.mode,
                 "what stays in pieces: full_shard (ZeRO-3: parameters, gradients, optimizer "
                 "state), shard_grad_op (ZeRO-2: gradients, optimizer state), shard_optimizer "
                 "(ZeRO-1: optimizer state) or no_shard (nothing; DDP); also zero3..zero1, ddp. "
                 "Every mode is compared below the table (and under \"modes\" in --json)")
      ->capture_default_str()
      ->check(fsdp_apps::parsed_by(fsdp::parse_sharding_mode, "MODE"));
  app.add_option("--shard-group-size", o.shard_group_size,
                 "HSDP: shard within groups of this many ranks, the world size / G "
                 "groups holding copies (must divide the world size; default: the world size)")
      ->check(CLI::Range(1, 1 << 30));
  app.add_flag("--json", o.json, "print JSON instead of a table");
  app.add_flag("--all-ranks", o.all_ranks, "print every rank's row, however many");
  app.add_option("--output,-o", o.output, "save the plan (.h5/.hdf5 or .json)");
  plan_file->excludes(strategy)->excludes(world);
  for (CLI::Option* option : preset_overrides) {
    option->excludes(model)->excludes(plan_file);  // they change presets, not a given model
  }
  try {
    app.parse(argc, argv);
    if (o.plan_path.empty()) {
      if (o.model_path.empty() && o.preset.empty() && o.preset_config.empty()) {
        throw CLI::ValidationError(
            "give the model: --model FILE, --preset gpt2|llama or --preset-config FILE (or "
            "--plan FILE to estimate a saved plan)");
      }
      if (o.world_size < 1) {
        throw CLI::ValidationError("give the number of ranks: --world-size N");
      }
    }
    if (o.grad_dtype == "bf16" && fsdp::parse_precision(o.precision) != fsdp::Precision::mixed) {
      throw CLI::ValidationError(
          "--grad-dtype bf16 keeps the gradients of mixed precision in 16 "
          "bits; give --precision mixed with it");
    }
    fsdp_apps::require_not_input(o.output, "--output", o.model_path, "--model");
    fsdp_apps::require_not_input(o.output, "--output", o.preset_config, "--preset-config");
    fsdp_apps::require_not_input(o.output, "--output", o.plan_path, "--plan");
    return fsdp_apps::output_written("fsdp-plan", run(o));
  } catch (const CLI::ParseError& error) {
    return fsdp_apps::usage_exit(app, error, "fsdp-plan");
  } catch (const std::exception& error) {
    std::fprintf(stderr, "fsdp-plan: %s\n", fsdp::message_of(error).c_str());
    return fsdp_apps::kExitError;
  }
}
