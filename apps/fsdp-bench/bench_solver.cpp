// fsdp-bench solver: SimpleSolver's solve time on generated transformer stacks, against the exact
// solver on the same graphs (time and plan cost), and the optimality report: the heuristic's cost
// over the optimum on the reference graphs.
#include <algorithm>
#include <cstdio>
#include <memory>

#include "benchmark.hpp"
#include "fsdp/comm/process_group.hpp"
#include "fsdp/solver/exact_solver.hpp"
#include "fsdp/solver/generators.hpp"
#include "fsdp/solver/simple_solver.hpp"

namespace fsdp::bench {
namespace {

struct SolverOptions {
  std::vector<std::int64_t> sizes = {100, 1000, 10000};
  int repeats = 7;
  int devices = 8;
  int random = 300;
  std::size_t exact_states = std::size_t{1} << 16;
  solver::ModelShape shape;
};

template <class F>
double median_seconds(int repeats, F&& f) {
  std::vector<double> samples;
  for (int i = 0; i < repeats; ++i) {
    const double start = MPI_Wtime();
    f();
    samples.push_back(MPI_Wtime() - start);
  }
  return median(samples);
}

void run(const SolverOptions& options, const CommonOptions& common) {
  ProcessGroup group(MPI_COMM_WORLD);
  if (group.rank() != 0) {
    return;  // the solver runs on one rank; the others would receive its broadcast
  }
  solver::Machine machine;
  machine.devices = options.devices;
  if (!common.json) {
    const auto& m = options.shape;
    std::printf(
        "fsdp-bench solver: transformer stacks (batch %lld, seq %lld, hidden %lld, %lld "
        "heads, ffn %lld, %s, parameters %s) on %d devices; median of %d solves; "
        "baseline = exact solver\n",
        static_cast<long long>(m.batch), static_cast<long long>(m.sequence),
        static_cast<long long>(m.hidden), static_cast<long long>(m.heads),
        static_cast<long long>(m.ffn), name_of(m.dtype),
        m.fsdp_parameters ? "pinned FSDP-sharded" : "free", options.devices, options.repeats);
    std::printf("%8s %7s %12s %12s %12s %14s %14s %10s\n", "nodes", "layers", "parse (ms)",
                "simple (ms)", "exact (ms)", "simple cost", "exact cost", "cost ratio");
  }
  for (const std::int64_t target : options.sizes) {
    const int layers = solver::layers_for_nodes(target);
    const solver::Graph graph = solver::transformer_stack(options.shape, layers);
    const std::string text = graph.to_json();
    const double parse_s =
        median_seconds(options.repeats, [&] { (void)solver::Graph::from_json(text); });
    double simple_cost = 0;
    const double simple_s = median_seconds(
        options.repeats, [&] { simple_cost = solver::SimpleSolver(machine).solve(graph).total_s; });
    double exact_cost = -1, exact_s = -1;
    try {
      exact_s = median_seconds(std::min(options.repeats, 3), [&] {
        exact_cost = solver::ExactSolver(machine, options.exact_states).solve(graph).total_s;
      });
    } catch (const Error&) {
      exact_s = -1;  // too wide for the state limit: reported as missing
    }
    nlohmann::json result = {
        {"benchmark", "solver"},       {"nodes", graph.size()}, {"layers", layers},
        {"devices", options.devices},  {"parse_s", parse_s},    {"simple_solve_s", simple_s},
        {"simple_cost_s", simple_cost}};
    if (exact_s >= 0) {
      result["exact_solve_s"] = exact_s;
      result["exact_cost_s"] = exact_cost;
      result["cost_ratio"] = simple_cost / exact_cost;
    }
    emit(common, 0, result, [&] {
      std::printf("%8zu %7d %12.3f %12.3f %12.3f %14.6g %14.6g %10.4f\n", graph.size(), layers,
                  parse_s * 1e3, simple_s * 1e3, exact_s * 1e3, simple_cost, exact_cost,
                  exact_s >= 0 ? simple_cost / exact_cost : 0.0);
    });
  }

  // Optimality report.
  const auto graphs = solver::reference_graphs(options.random);
  double worst = 1, sum = 0;
  int over = 0, random_count = 0, optimal = 0;
  std::string worst_name;
  if (!common.json) {
    std::printf("\noptimality: heuristic cost / optimum (exact solver)\n");
  }
  for (const auto& g : graphs) {
    solver::Machine m;
    m.devices = g.devices;
    const double heuristic = solver::SimpleSolver(m).solve(g.graph).total_s;
    const double optimum = solver::ExactSolver(m).solve(g.graph).total_s;
    const double ratio = optimum > 0 ? heuristic / optimum : (heuristic > 0 ? 1e300 : 1.0);
    const bool is_random = g.name.rfind("random", 0) == 0;
    if (!is_random) {
      emit(common, 0,
           {{"benchmark", "solver_optimality"},
            {"graph", g.name},
            {"nodes", g.graph.size()},
            {"devices", g.devices},
            {"heuristic_s", heuristic},
            {"optimum_s", optimum},
            {"ratio", ratio}},
           [&] {
             std::printf("  %-64s %2zu nodes %2d dev  %.4f\n", g.name.c_str(), g.graph.size(),
                         g.devices, ratio);
           });
    } else {
      ++random_count;
      sum += ratio;
    }
    optimal += ratio <= 1 + 1e-9;
    over += ratio > 1.05;
    if (ratio > worst) {
      worst = ratio;
      worst_name = g.name;
    }
  }
  emit(common, 0,
       {{"benchmark", "solver_optimality_summary"},
        {"graphs", graphs.size()},
        {"random_graphs", random_count},
        {"optimal", optimal},
        {"over_5_percent", over},
        {"worst_ratio", worst},
        {"worst_graph", worst_name},
        {"mean_ratio_random", random_count ? sum / random_count : 1.0}},
       [&] {
         std::printf("  %d random graphs of 6-12 nodes: mean ratio %.4f\n", random_count,
                     random_count ? sum / random_count : 1.0);
         std::printf("  all %zu graphs: %d optimal, %d over 1.05, worst %.4f (%s)\n", graphs.size(),
                     optimal, over, worst, worst_name.c_str());
       });
}

}  // namespace

void add_solver(CLI::App& app, const CommonOptions& common) {
  auto options = std::make_shared<SolverOptions>();
  CLI::App* sub = app.add_subcommand(
      "solver", "auto-sharding solve time on transformer stacks, and its optimality report");
  sub->add_option("--nodes", options->sizes, "approximate graph sizes (nodes)")
      ->capture_default_str();
  sub->add_option("--repeats", options->repeats, "solves per size (median)")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  sub->add_option("--devices", options->devices, "devices of the mesh")->capture_default_str();
  sub->add_option("--batch", options->shape.batch, "stack: batch size")->capture_default_str();
  sub->add_option("--seq", options->shape.sequence, "stack: sequence length")
      ->capture_default_str();
  sub->add_flag("--fsdp-parameters", options->shape.fsdp_parameters,
                "stack: parameters pinned sharded on dim 0, as FSDP stores them");
  sub->add_option("--random", options->random, "random graphs in the optimality report")
      ->capture_default_str();
  sub->add_option("--exact-states", options->exact_states,
                  "state limit of the exact baseline (skipped past it)")
      ->capture_default_str();
  sub->callback([options, &common] { run(*options, common); });
}

}  // namespace fsdp::bench
