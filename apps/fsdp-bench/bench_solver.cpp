// fsdp-bench solver: SimpleSolver's solve time on generated transformer stacks (forward pass or
// training step, 1-D or 2-D mesh, with or without a memory budget), against the exact solver on
// the same graphs (time and plan cost), and the optimality report: the heuristic's cost over the
// optimum on the reference graphs, forward and training, with budgets, on 1-D and 2-D meshes.
#include <algorithm>
#include <cstdio>
#include <memory>

#include "../common/mesh_options.hpp"
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
  std::string mesh;  // "2x4"; empty: 1-D of `devices`
  std::string bandwidth = "450e9";
  std::string latency = "5e-6";
  std::string step = "forward";
  double budget = 0;  // a fraction of the fastest plan's peak; 0: no budget
  int random = 300;
  int larger = 0;  // random graphs of 13-40 nodes in the report (training with budgets)
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

double gib(std::int64_t bytes) {
  return static_cast<double>(bytes) / (1 << 30);
}

// The budgets of the report: none, and a quarter, half and three quarters of the way from the
// smallest peak any plan has to the fastest plan's peak.
std::vector<std::int64_t> report_budgets(const solver::Graph& graph, const solver::Machine& m,
                                         solver::StepOptions options, std::size_t exact_states) {
  options.memory_budget_bytes = 0;
  const std::int64_t fastest =
      solver::ExactSolver(m, exact_states, options).solve(graph).memory.peak_bytes;
  options.memory_budget_bytes = 1;
  const std::int64_t smallest =
      solver::ExactSolver(m, exact_states, options).solve(graph).memory.peak_bytes;
  std::vector<std::int64_t> budgets = {0};
  for (const double f : {0.25, 0.5, 0.75}) {
    budgets.push_back(smallest +
                      static_cast<std::int64_t>(f * static_cast<double>(fastest - smallest)));
  }
  return budgets;
}

// The graphs of one part of the optimality report: what the summary calls its random ones, and
// the exact solver's state limit (a graph past it is counted and left out).
struct ReportGraphs {
  std::vector<solver::NamedGraph> graphs;
  std::string random_text;
  std::size_t exact_states;
};

// The reference graphs: the named ones and `random` graphs of 6-12 nodes, all within the exact
// solver's default limit.
ReportGraphs reference_report(int random) {
  return {solver::reference_graphs(random), "random graphs of 6-12 nodes", std::size_t{1} << 20};
}

// `count` random graphs of 13-40 nodes on 8 devices (those of the test
// larger_random_graphs_against_optimum), within 2^16 states.
ReportGraphs larger_report(int count) {
  ReportGraphs report{{}, "random graphs of 13-40 nodes", std::size_t{1} << 16};
  for (int seed = 0; seed < count; ++seed) {
    report.graphs.push_back(
        {"larger random #" + std::to_string(seed),
         solver::random_graph(static_cast<std::uint64_t>(seed) * 31 + 5, 13 + seed % 28), 8});
  }
  return report;
}

// One section of the optimality report: every graph of `report` on a mesh, for a step, with the
// budgets of report_budgets (training) or none (forward).
void optimality(const CommonOptions& common, const ReportGraphs& report, const char* title,
                solver::StepKind step, bool two_d) {
  const auto& graphs = report.graphs;
  double worst = 1, sum = 0;
  int cases = 0, over = 0, optimal = 0, random_cases = 0, unfit = 0, too_wide = 0;
  std::string worst_name;
  if (!common.json) {
    std::printf("\noptimality, %s: heuristic cost / optimum (exact solver)\n", title);
  }
  for (const auto& g : graphs) {
    solver::Machine m;
    m.devices = g.devices;
    if (two_d) {
      m.set_mesh({solver::MeshAxis{2, 450e9, 5e-6}, solver::MeshAxis{g.devices / 2, 50e9, 10e-6}});
    }
    solver::StepOptions step_options;
    step_options.step = step;
    std::vector<std::int64_t> budgets = {0};
    std::vector<double> optima;
    try {
      if (step == solver::StepKind::training) {
        budgets = report_budgets(g.graph, m, step_options, report.exact_states);
      }
      for (const std::int64_t budget : budgets) {
        step_options.memory_budget_bytes = budget;
        optima.push_back(
            solver::ExactSolver(m, report.exact_states, step_options).solve(g.graph).total_s);
      }
    } catch (const Error&) {
      ++too_wide;  // past the exact solver's state limit: no optimum to compare with
      continue;
    }
    double graph_worst = 1;
    for (std::size_t b = 0; b < budgets.size(); ++b) {
      const std::int64_t budget = budgets[b];
      step_options.memory_budget_bytes = budget;
      const solver::Solution heuristic = solver::SimpleSolver(m, step_options).solve(g.graph);
      const double optimum = optima[b];
      const double ratio =
          optimum > 0 ? heuristic.total_s / optimum : (heuristic.total_s > 0 ? 1e300 : 1.0);
      ++cases;
      unfit += !heuristic.fits_budget;
      optimal += ratio <= 1 + 1e-9;
      over += ratio > 1.05;
      if (ratio > 1.05 && !common.json) {
        // Each miss by name, so that it can be looked at (fsdp-solve --compare).
        std::printf("  over 1.05: %s%s on %s: %.4f\n", g.name.c_str(),
                    budget > 0 ? (", budget " + std::to_string(budget)).c_str() : "",
                    m.mesh_text().c_str(), ratio);
      }
      graph_worst = std::max(graph_worst, ratio);
      if (ratio > worst) {
        worst = ratio;
        worst_name = g.name + (budget > 0 ? ", budget " + std::to_string(budget) : "");
      }
    }
    const bool is_random = g.name.find("random") != std::string::npos;
    if (!is_random) {
      emit(common, 0,
           {{"benchmark", "solver_optimality"},
            {"section", title},
            {"graph", g.name},
            {"nodes", g.graph.size()},
            {"mesh", m.mesh_text()},
            {"budgets", budgets.size()},
            {"worst_ratio", graph_worst}},
           [&] {
             std::printf("  %-64s %2zu nodes %-20s %.4f\n", g.name.c_str(), g.graph.size(),
                         m.mesh_text().c_str(), graph_worst);
           });
    } else {
      ++random_cases;
      sum += graph_worst;
    }
  }
  emit(common, 0,
       {{"benchmark", "solver_optimality_summary"},
        {"section", title},
        {"graphs", graphs.size()},
        {"too_wide_for_exact", too_wide},
        {"cases", cases},
        {"optimal", optimal},
        {"over_5_percent", over},
        {"not_fitting", unfit},
        {"worst_ratio", worst},
        {"worst_case", worst_name},
        {"mean_worst_ratio_random", random_cases ? sum / random_cases : 1.0}},
       [&] {
         std::printf("  %d %s: mean of each graph's worst ratio %.4f\n", random_cases,
                     report.random_text.c_str(), random_cases ? sum / random_cases : 1.0);
         if (too_wide > 0) {
           std::printf("  %d graphs left out: past the exact solver's %zu states\n", too_wide,
                       report.exact_states);
         }
         std::printf(
             "  all %d cases (%zu graphs x %zu budgets): %d optimal, %d over 1.05, %d not "
             "fitting, worst %.4f (%s)\n",
             cases, graphs.size() - static_cast<std::size_t>(too_wide),
             step == solver::StepKind::training ? std::size_t{4} : 1, optimal, over, unfit, worst,
             worst_name.c_str());
       });
}

void run(const SolverOptions& options, const CommonOptions& common) {
  ProcessGroup group(MPI_COMM_WORLD);
  if (group.rank() != 0) {
    return;  // the solver runs on one rank; the others would receive its broadcast
  }
  solver::Machine base;
  base.devices = options.devices;
  const solver::Machine machine =
      fsdp_apps::machine_with_mesh(base, options.mesh, options.bandwidth, options.latency);
  solver::StepOptions step;
  step.step = solver::parse_step_kind(options.step);
  if (!common.json) {
    const auto& m = options.shape;
    std::printf(
        "fsdp-bench solver: transformer stacks (batch %lld, seq %lld, hidden %lld, %lld "
        "heads, ffn %lld, %s, parameters %s) on %s; %s step%s; median of %d solves; "
        "baseline = exact solver\n",
        static_cast<long long>(m.batch), static_cast<long long>(m.sequence),
        static_cast<long long>(m.hidden), static_cast<long long>(m.heads),
        static_cast<long long>(m.ffn), name_of(m.dtype),
        m.fsdp_parameters ? "pinned FSDP-sharded" : "free", machine.mesh_text().c_str(),
        solver::name_of(step.step),
        options.budget > 0
            ? (", budget " + std::to_string(options.budget) + " of the fastest plan's peak").c_str()
            : "",
        options.repeats);
    std::printf("%8s %7s %12s %12s %12s %14s %14s %10s %10s %5s\n", "nodes", "layers", "parse (ms)",
                "simple (ms)", "exact (ms)", "simple cost", "exact cost", "cost ratio", "peak GiB",
                "fits");
  }
  for (const std::int64_t target : options.sizes) {
    const int layers = solver::layers_for_nodes(target);
    const solver::Graph graph = solver::transformer_stack(options.shape, layers);
    const std::string text = graph.to_json();
    const double parse_s =
        median_seconds(options.repeats, [&] { (void)solver::Graph::from_json(text); });
    solver::StepOptions run_step = step;
    if (options.budget > 0) {
      const std::int64_t fastest =
          solver::SimpleSolver(machine, step).solve(graph).memory.peak_bytes;
      run_step.memory_budget_bytes =
          static_cast<std::int64_t>(options.budget * static_cast<double>(fastest));
    }
    solver::Solution simple;
    const double simple_s = median_seconds(
        options.repeats, [&] { simple = solver::SimpleSolver(machine, run_step).solve(graph); });
    double exact_cost = -1, exact_s = -1;
    try {
      exact_s = median_seconds(std::min(options.repeats, 3), [&] {
        exact_cost =
            solver::ExactSolver(machine, options.exact_states, run_step).solve(graph).total_s;
      });
    } catch (const Error&) {
      exact_s = -1;  // too wide for the state limit: reported as missing
    }
    nlohmann::json result = {{"benchmark", "solver"},
                             {"nodes", graph.size()},
                             {"layers", layers},
                             {"mesh", machine.mesh_text()},
                             {"step", solver::name_of(step.step)},
                             {"budget_bytes", run_step.memory_budget_bytes},
                             {"parse_s", parse_s},
                             {"simple_solve_s", simple_s},
                             {"simple_cost_s", simple.total_s},
                             {"simple_peak_bytes", simple.memory.peak_bytes},
                             {"fits_budget", simple.fits_budget}};
    if (exact_s >= 0) {
      result["exact_solve_s"] = exact_s;
      result["exact_cost_s"] = exact_cost;
      result["cost_ratio"] = simple.total_s / exact_cost;
    }
    emit(common, 0, result, [&] {
      std::printf("%8zu %7d %12.3f %12.3f ", graph.size(), layers, parse_s * 1e3, simple_s * 1e3);
      if (exact_s >= 0) {
        std::printf("%12.3f %14.6g %14.6g %10.4f", exact_s * 1e3, simple.total_s, exact_cost,
                    simple.total_s / exact_cost);
      } else {  // past the exact baseline's state limit
        std::printf("%12s %14.6g %14s %10s", "-", simple.total_s, "-", "-");
      }
      std::printf(" %10.3f %5s\n", gib(simple.memory.peak_bytes),
                  simple.fits_budget ? "yes" : "NO");
    });
  }
  if (options.random < 0) {
    return;
  }
  const ReportGraphs reference = reference_report(options.random);
  optimality(common, reference, "forward pass, 1-D mesh", solver::StepKind::forward, false);
  optimality(common, reference, "training step with budgets, 1-D mesh", solver::StepKind::training,
             false);
  optimality(common, reference, "training step with budgets, 2 x N/2 mesh",
             solver::StepKind::training, true);
  if (options.larger > 0) {
    const ReportGraphs larger = larger_report(options.larger);
    optimality(common, larger, "training step with budgets, larger graphs, 1-D mesh",
               solver::StepKind::training, false);
    optimality(common, larger, "training step with budgets, larger graphs, 2 x 4 mesh",
               solver::StepKind::training, true);
  }
}

}  // namespace

void add_solver(CLI::App& app, const CommonOptions& common) {
  auto options = std::make_shared<SolverOptions>();
  CLI::App* sub = app.add_subcommand(
      "solver", "auto-sharding solve time on transformer stacks, and its optimality report");
  sub->add_option("--nodes", options->sizes, "approximate graph sizes (nodes)")
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{solver::kMostStackLayers} * 33))
      ->capture_default_str();
  sub->add_option("--repeats", options->repeats, "solves per size (median)")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  sub->add_option("--devices", options->devices, "devices of a 1-D mesh")->capture_default_str();
  sub->add_option("--mesh", options->mesh, "the mesh of the timed stacks instead: 2x4");
  sub->add_option("--bandwidth", options->bandwidth, "bytes/s per mesh axis: 450e9,50e9")
      ->capture_default_str();
  sub->add_option("--latency", options->latency, "seconds per collective per mesh axis")
      ->capture_default_str();
  sub->add_option("--step", options->step, "the timed stacks' step: forward or training")
      ->check(CLI::IsMember({"forward", "training"}))
      ->capture_default_str();
  sub->add_option("--budget", options->budget,
                  "a memory budget for the timed stacks, as a fraction of the fastest plan's "
                  "peak (0.6: 60%); 0: none")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  sub->add_option("--batch", options->shape.batch, "stack: batch size")->capture_default_str();
  sub->add_option("--seq", options->shape.sequence, "stack: sequence length")
      ->capture_default_str();
  sub->add_flag("--fsdp-parameters", options->shape.fsdp_parameters,
                "stack: parameters pinned sharded on dim 0, as FSDP stores them");
  sub->add_option("--random", options->random,
                  "random graphs in the optimality report (-1: no report)")
      ->capture_default_str();
  sub->add_option("--larger", options->larger,
                  "also report training steps with budgets on this many random graphs of 13-40 "
                  "nodes (left out where the exact solver passes 2^16 states)")
      ->check(CLI::Range(0, 1 << 20))
      ->capture_default_str();
  sub->add_option("--exact-states", options->exact_states,
                  "state limit of the exact baseline (skipped past it)")
      ->capture_default_str();
  sub->callback([options, &common] { run(*options, common); });
}

}  // namespace fsdp::bench
