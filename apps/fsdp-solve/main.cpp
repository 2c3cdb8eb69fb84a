// fsdp-solve: the auto-sharding solver on a graph from JSON or a built-in generator; prints the
// layout of every node with its costs, or the solution as JSON.
#include <mpi.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <fstream>
#include <string>

#include "../common/finite_number.hpp"
#include "../common/mesh_options.hpp"
#include "../common/mpi_start.hpp"
#include "../common/not_input.hpp"
#include "../common/output_written.hpp"
#include "../common/usage_exit.hpp"
#include "../common/wrapped_help.hpp"
#include "fsdp/comm/on_root.hpp"
#include "fsdp/comm/process_group.hpp"
#include "fsdp/io/plan_file.hpp"
#include "fsdp/io/publish_file.hpp"
#include "fsdp/solver/exact_solver.hpp"
#include "fsdp/solver/fsdp_plan.hpp"
#include "fsdp/solver/generators.hpp"
#include "fsdp/solver/simple_solver.hpp"
#include "solution_table.hpp"

namespace {

struct Options {
  std::string graph_path;
  std::string generate;
  int layers = 2;
  fsdp::solver::ModelShape shape;
  std::string dtype = "bf16";
  fsdp::solver::Machine machine;
  std::string mesh;
  std::string bandwidth = "450e9";
  std::string latency = "5e-6";
  std::string step = "training";
  std::string optimizer = "adam";
  std::string precision = "fp32";
  std::string memory_per_device;
  fsdp::solver::StepOptions step_options;
  std::string solver = "simple";
  bool json = false;
  bool compare = false;
  bool explain = false;
  std::string write_graph;
  std::string emit_plan;
};

fsdp::solver::Graph load_graph(const Options& o) {
  using namespace fsdp::solver;
  if (!o.graph_path.empty()) {
    return Graph::from_file(o.graph_path);
  }
  ModelShape shape = o.shape;
  shape.dtype = fsdp::parse_dtype(o.dtype);
  if (o.generate == "mlp") {
    return mlp_block(shape);
  }
  if (o.generate == "transformer") {
    return transformer_layer(shape);
  }
  return transformer_stack(shape, o.layers);
}

// The machine and the step from the options' text; throws fsdp::Error on values out of range.
void resolve(Options& o) {
  using namespace fsdp::solver;
  o.machine = fsdp_apps::machine_with_mesh(o.machine, o.mesh, o.bandwidth, o.latency);
  o.step_options.step = parse_step_kind(o.step);
  o.step_options.optimizer = fsdp::parse_optimizer(o.optimizer);
  o.step_options.precision = fsdp::parse_precision(o.precision);
  o.step_options.memory_budget_bytes =
      o.memory_per_device.empty() ? 0 : fsdp_apps::parse_bytes(o.memory_per_device);
}

int run(const Options& o, fsdp::ProcessGroup& group) {
  using namespace fsdp::solver;
  o.machine.validate();
  // Rank 0 reads and solves; the others receive each step's error, or the solution, by broadcast.
  Graph graph;
  const std::string reading = o.write_graph.empty() ? "read the graph" : "read and write the graph";
  fsdp::on_root(group, reading, [&] {
    graph = load_graph(o);
    if (!o.write_graph.empty()) {
      // Atomic: a failed write (a full disk) leaves an existing file as it was.
      const std::string temporary = fsdp::temporary_beside(o.write_graph);
      try {
        std::ofstream file(temporary, std::ios::trunc);
        file << graph.to_json() << "\n";
        file.close();
        fsdp::require(
            static_cast<bool>(file),
            "--write-graph: cannot write '" + temporary + "' (" + std::strerror(errno) + ")",
            fsdp::ErrorKind::io);
        fsdp::publish_file(temporary, o.write_graph);
      } catch (...) {
        std::remove(temporary.c_str());
        throw;
      }
    }
    return std::string();
  });
  // Rank 0 alone prints and writes: the other ranks learn whether the solve succeeded (its error
  // reaches every rank), not the solution, which they would only discard. Sending it to them
  // (solve_on_root) took 1.5 s of a 2-rank run on a 10,001-node stack, of 1.8 s.
  Solution solution;
  fsdp::on_root(group, "compute the solution", [&] {
    solution = o.solver == "exact" ? ExactSolver(o.machine, o.step_options).solve(graph)
                                   : SimpleSolver(o.machine, o.step_options).solve(graph);
    if (!o.emit_plan.empty()) {
      fsdp::save_plan(o.emit_plan, executable_plan(graph, solution).plan);
    }
    return std::string();
  });
  if (group.rank() != 0) {
    return 0;
  }
  if (o.json) {
    std::printf("%s\n", solution.to_json().c_str());
  } else {
    fsdp::apps::print_solution(solution, graph);
    if (o.explain) {
      fsdp::apps::print_seed_candidates(SimpleSolver(o.machine, o.step_options), graph);
    }
  }
  if (!o.emit_plan.empty()) {
    // With --json stdout holds the JSON alone.
    std::FILE* out = o.json ? stderr : stdout;
    const ExecutablePlan executable = executable_plan(graph, solution);
    int sharded = 0;
    for (const auto& placement : executable.plan.placements()) {
      sharded += placement.placement == fsdp::Placement::sharded;
    }
    const int count = static_cast<int>(executable.plan.parameters().size());
    std::fprintf(out, "\nplan written to %s: %d of %d parameters sharded (FSDP) over %d ranks",
                 o.emit_plan.c_str(), sharded, count, executable.shard_group_size);
    if (executable.shard_group_size < executable.world_size) {
      std::fprintf(out,
                   " in each of %d shard groups of consecutive ranks (hybrid sharding: "
                   "fsdp::make_hybrid_groups(world, %d), docs/modes.md)",
                   executable.world_size / executable.shard_group_size,
                   executable.shard_group_size);
    }
    std::fprintf(out, ", %d replicated\n", count - sharded);
    if (!executable.notes.empty()) {
      std::fprintf(out, "fsdp cannot execute all of the solution:\n");
      for (const std::string& note : executable.notes) {
        std::fprintf(out, "- %s\n", note.c_str());
      }
    }
  }
  if (o.compare) {
    const Solution other = o.solver == "exact"
                               ? SimpleSolver(o.machine, o.step_options).solve(graph)
                               : ExactSolver(o.machine, o.step_options).solve(graph);
    const Solution& simple = o.solver == "exact" ? other : solution;
    const Solution& exact = o.solver == "exact" ? solution : other;
    std::printf("%sheuristic %.6g s, optimum %.6g s, ratio %.4f\n", o.json ? "" : "\n",
                simple.total_s, exact.total_s, simple.total_s / exact.total_s);
  }
  if (!solution.fits_budget) {
    std::fprintf(stderr,
                 "fsdp-solve: no plan found fits the budget of %lld bytes per device "
                 "(--memory-per-device); the smallest peak found is %lld bytes (%s), by the plan "
                 "above\n",
                 static_cast<long long>(o.step_options.memory_budget_bytes),
                 static_cast<long long>(solution.memory.peak_bytes),
                 fsdp::apps::bytes_text(static_cast<double>(solution.memory.peak_bytes)).c_str());
    return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  // Without mpiexec this is a singleton MPI job of one rank.
  if (!fsdp_apps::start_mpi(&argc, &argv, "fsdp-solve")) {
    return 1;
  }
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  Options o;
  CLI::App app{
      "fsdp-solve: choose how to shard every tensor of a computation graph over a 1-D or 2-D "
      "mesh of devices, for a training step (or the forward pass) under a memory budget per "
      "device (cost model: FLOPs over the devices, ring collectives along each mesh axis, "
      "per-collective latency; memory: parameters, gradients, optimizer state, activations)"};
  fsdp_apps::wrap_help(app);
  fsdp_apps::add_version_flag(app, "fsdp-solve");
  auto* graph_option =
      app.add_option("--graph", o.graph_path, "graph JSON file")->check(CLI::ExistingFile);
  app.add_option("--generate", o.generate,
                 "built-in graph instead of --graph: mlp, transformer (one layer) or stack")
      ->check(CLI::IsMember({"mlp", "transformer", "stack"}))
      ->excludes(graph_option);
  app.add_option("--layers", o.layers, "layers of --generate stack")
      ->check(CLI::Range(1, fsdp::solver::kMostStackLayers))
      ->capture_default_str();
  app.add_option("--batch", o.shape.batch, "generator: batch size")->capture_default_str();
  app.add_option("--seq", o.shape.sequence, "generator: sequence length")->capture_default_str();
  app.add_option("--hidden", o.shape.hidden, "generator: hidden size")->capture_default_str();
  app.add_option("--heads", o.shape.heads, "generator: attention heads")->capture_default_str();
  app.add_option("--ffn", o.shape.ffn, "generator: MLP inner size")->capture_default_str();
  app.add_flag("--fsdp-parameters", o.shape.fsdp_parameters,
               "generator: pin parameters sharded on dim 0 as FSDP stores them (a weight used "
               "whole costs its all-gather)");
  app.add_option("--dtype", o.dtype, "generator: element type (fp32, bf16, fp16, fp64)")
      ->check(fsdp_apps::parsed_by(fsdp::parse_dtype, "DTYPE"))
      ->capture_default_str();
  auto* devices_option =
      app.add_option("--devices,-n", o.machine.devices, "devices in the 1-D mesh")
          ->check(CLI::Range(1, 1 << 30))
          ->capture_default_str();
  app.add_option("--mesh", o.mesh,
                 "the device mesh instead: 8 (1-D) or 2x4 (2 x 4 devices, device (i, j) being "
                 "rank 4i + j)")
      ->excludes(devices_option);
  app.add_option("--flops", o.machine.flops_per_s, "FLOP/s of one device (H100 dense bf16)")
      ->check(fsdp_apps::positive_number())
      ->capture_default_str();
  app.add_option("--bandwidth", o.bandwidth,
                 "bytes/s a device sends in a ring step along a mesh axis (NVLink 4, one "
                 "direction); one value per axis on a 2-D mesh: 450e9,50e9")
      ->capture_default_str();
  app.add_option("--latency", o.latency,
                 "seconds added per collective along a mesh axis; one per axis: 5e-6,10e-6")
      ->capture_default_str();
  app.add_option("--memory-bandwidth", o.machine.memory_bytes_per_s,
                 "bytes/s of a device's memory, which the optimizer step is bound by (H100 "
                 "HBM3)")
      ->check(fsdp_apps::positive_number())
      ->capture_default_str();
  app.add_option("--step", o.step,
                 "what is planned: training (forward, backward, gradient synchronisation, "
                 "optimizer) or forward")
      ->check(CLI::IsMember({"training", "forward"}))
      ->capture_default_str();
  app.add_option("--optimizer", o.optimizer,
                 "training: sgd, sgd_momentum, adam or adamw (its state per parameter element)")
      ->check(fsdp_apps::parsed_by(fsdp::parse_optimizer, "OPTIMIZER"))
      ->capture_default_str();
  app.add_option("--precision", o.precision,
                 "training: fp32 (every tensor in its dtype) or mixed (16-bit parameters and "
                 "gradients, fp32 master weights and optimizer state)")
      ->check(fsdp_apps::parsed_by(fsdp::parse_precision, "PRECISION"))
      ->capture_default_str();
  app.add_option("--memory-per-device", o.memory_per_device,
                 "the most bytes a device may hold at its peak: 80e9, 80GB, 80GiB (default: no "
                 "limit)");
  app.add_option("--solver", o.solver, "simple (seed + propagate) or exact (optimum; small graphs)")
      ->check(CLI::IsMember({"simple", "exact"}))
      ->capture_default_str();
  app.add_flag("--explain", o.explain,
               "also list each matmul's seed candidates (split batch / contracting / output "
               "features) with their compute and communication");
  app.add_flag("--compare", o.compare, "also run the other solver and print the ratio");
  app.add_flag("--json", o.json, "print the solution as JSON");
  app.add_option("--write-graph", o.write_graph, "write the graph solved as JSON to this file");
  app.add_option("--emit-plan", o.emit_plan,
                 "write what fsdp can execute of the solution, an FSDP sharding plan of the "
                 "parameters, to this file (.h5 or .json; docs/plans.md), and say what it cannot");
  int code = 0;
  try {
    app.parse(argc, argv);
    if (o.graph_path.empty() && o.generate.empty()) {
      throw CLI::ValidationError("give --graph FILE or --generate mlp|transformer|stack");
    }
    try {
      resolve(o);
    } catch (const fsdp::Error& error) {
      throw CLI::ValidationError(fsdp::message_of(error));
    }
    fsdp_apps::require_not_input(o.write_graph, "--write-graph", o.graph_path, "--graph");
    fsdp_apps::require_not_input(o.emit_plan, "--emit-plan", o.graph_path, "--graph");
    fsdp::ProcessGroup group(MPI_COMM_WORLD);
    code = run(o, group);
  } catch (const CLI::ParseError& error) {
    code = fsdp_apps::usage_exit(app, error, "fsdp-solve", rank == 0);
  } catch (const std::exception& error) {
    if (rank == 0) {
      std::fprintf(stderr, "fsdp-solve: %s\n", fsdp::message_of(error).c_str());
    }
    code = fsdp_apps::kExitError;
  }
  code = fsdp_apps::output_written("fsdp-solve", code);
  MPI_Finalize();
  return code;
}
