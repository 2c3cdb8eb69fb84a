#include "solution_table.hpp"

#include <cstdio>
#include <string>
#include <vector>

#include "fsdp/core/text.hpp"

namespace fsdp::apps {
namespace {

// "wq [S,R]->[R,S] all-to-all 4.0 MiB"; on a 2-D mesh each collective names its axis.
std::string conversion_text(const solver::InputTransfer& t, int rank, int mesh_axes) {
  std::string text =
      t.producer + " " + t.from.to_string(rank, mesh_axes) + "->" + t.to.to_string(rank, mesh_axes);
  std::vector<const solver::Transfer*> steps = {&t.transfer};
  for (const solver::Transfer& step : t.then) {
    steps.push_back(&step);
  }
  for (const solver::Transfer* step : steps) {
    if (step->collective == solver::LayoutCollective::none) {
      continue;
    }
    text += std::string(step != &t.transfer ? " +" : "") + " " + solver::name_of(step->collective) +
            (mesh_axes > 1 ? "(a" + std::to_string(step->axis) + ")" : "") + " " +
            bytes_text(step->buffer_bytes);
  }
  return text;
}

std::string memory_text(std::int64_t bytes) {
  return bytes > 0 ? bytes_text(static_cast<double>(bytes)) : "-";
}

}  // namespace

std::string bytes_text(double bytes) {
  char buffer[32];
  if (bytes >= 1 << 30) {
    std::snprintf(buffer, sizeof buffer, "%.2f GiB", bytes / (1 << 30));
  } else if (bytes >= 1 << 20) {
    std::snprintf(buffer, sizeof buffer, "%.1f MiB", bytes / (1 << 20));
  } else if (bytes >= 1 << 10) {
    std::snprintf(buffer, sizeof buffer, "%.1f KiB", bytes / (1 << 10));
  } else {
    std::snprintf(buffer, sizeof buffer, "%.0f B", bytes);
  }
  return buffer;
}

void print_solution(const solver::Solution& solution, const solver::Graph& graph) {
  const auto& m = solution.machine;
  const auto& options = solution.options;
  const bool training = options.training();
  const int axes = m.axis_count();
  std::printf("solver: %s; %s step; %s, %.4g FLOP/s each", solution.solver.c_str(),
              solver::name_of(options.step), m.mesh_text().c_str(), m.flops_per_s);
  for (int a = 0; a < axes; ++a) {
    const solver::MeshAxis axis = m.axis(a);
    std::printf("; %s%.4g B/s per link, %.3g us per collective",
                axes > 1 ? ("axis " + std::to_string(a) + ": ").c_str() : "", axis.link_bytes_per_s,
                axis.collective_latency_s * 1e6);
  }
  if (training) {
    std::printf("; %s, %s precision", name_of(options.optimizer), name_of(options.precision));
  }
  std::printf("\n%s\n\n",
              axes > 1
                  ? "S0/S1/S01 = cut along mesh axis 0 / 1 / both, R = whole, +P0/+P1 = partial "
                    "sum pending along that axis"
                  : "S = sharded over the devices, R = replicated, +P = partial sum pending");
  std::printf("%-22s %-14s %-20s %-28s %-12s %11s %10s %10s %10s", "node", "op", "shape",
              "strategy", "output", "GFLOP/dev", "compute", "comm", "reshard");
  if (training) {
    std::printf(" %10s %10s %10s", "backward", "bwd comm", "sync+opt");
  }
  std::printf(" %11s %11s  %s\n", "mem fwd", training ? "mem bwd" : "", "input conversions");
  for (const auto& n : solution.nodes) {
    const int rank = static_cast<int>(n.shape.size());
    std::string conversions;
    const auto* node = graph.size() ? &graph.node(graph.index_of(n.id)) : nullptr;
    for (std::size_t k = 0; k < n.transfers.size(); ++k) {
      const auto& t = n.transfers[k];
      if (t.transfer.collective == solver::LayoutCollective::none) {
        continue;
      }
      const int from_rank = node ? graph.node(node->inputs[k]).rank() : rank;
      conversions += (conversions.empty() ? "" : "; ") + conversion_text(t, from_rank, axes);
    }
    std::printf("%-22s %-14s %-20s %-28s %-12s %11.4f %8.2fus %8.2fus %8.2fus", n.id.c_str(),
                n.op.c_str(), shape_text(n.shape, "()", ",").c_str(), n.strategy.c_str(),
                n.output_spec.to_string(rank, axes).c_str(), n.flops_per_device / 1e9,
                n.compute_s * 1e6, n.communication_s * 1e6, n.resharding_s * 1e6);
    if (training) {
      std::printf(" %8.2fus %8.2fus %8.2fus", n.backward_compute_s * 1e6,
                  n.backward_communication_s * 1e6, (n.gradient_sync_s + n.optimizer_s) * 1e6);
    }
    std::printf(" %11s %11s  %s\n", memory_text(n.memory.forward_bytes).c_str(),
                training ? memory_text(n.memory.backward_bytes).c_str() : "", conversions.c_str());
  }
  std::printf("\ntotal: %.3f us = compute %.3f us + communication %.3f us + resharding %.3f us",
              solution.total_s * 1e6, solution.compute_s * 1e6, solution.communication_s * 1e6,
              solution.resharding_s * 1e6);
  if (training) {
    std::printf(
        " + backward %.3f us + backward communication %.3f us + gradient sync %.3f us + "
        "optimizer %.3f us",
        solution.backward_compute_s * 1e6, solution.backward_communication_s * 1e6,
        solution.gradient_sync_s * 1e6, solution.optimizer_s * 1e6);
  }
  const auto& memory = solution.memory;
  const std::int64_t persistent =
      memory.parameter_bytes + memory.gradient_bytes + memory.optimizer_bytes + memory.input_bytes;
  std::printf("\nmemory per device: peak %s",
              bytes_text(static_cast<double>(memory.peak_bytes)).c_str());
  if (!memory.peak_node.empty()) {
    std::printf(" at %s of '%s'", memory.peak_phase.c_str(), memory.peak_node.c_str());
  }
  std::printf(
      " = parameters %s + gradients %s + optimizer state %s + inputs %s + activations "
      "and buffers %s\n",
      bytes_text(static_cast<double>(memory.parameter_bytes)).c_str(),
      bytes_text(static_cast<double>(memory.gradient_bytes)).c_str(),
      bytes_text(static_cast<double>(memory.optimizer_bytes)).c_str(),
      bytes_text(static_cast<double>(memory.input_bytes)).c_str(),
      bytes_text(static_cast<double>(memory.peak_bytes - persistent)).c_str());
  if (options.memory_budget_bytes > 0) {
    std::printf("budget: %s per device (%lld bytes): %s\n",
                bytes_text(static_cast<double>(options.memory_budget_bytes)).c_str(),
                static_cast<long long>(options.memory_budget_bytes),
                solution.fits_budget ? "fits" : "DOES NOT FIT");
  }
  if (solution.parameters.empty()) {
    return;
  }
  int fsdp = 0, tensor_parallel = 0, replicated = 0;
  for (const auto& p : solution.parameters) {
    const bool is_tp = p.uses[0] == solver::ParameterUse::tensor_parallel ||
                       p.uses[1] == solver::ParameterUse::tensor_parallel;
    const bool is_fsdp =
        p.uses[0] == solver::ParameterUse::fsdp || p.uses[1] == solver::ParameterUse::fsdp;
    tensor_parallel += is_tp;
    fsdp += is_fsdp && !is_tp;
    replicated += !is_tp && !is_fsdp;
  }
  std::printf("\nparameters: %d FSDP-sharded, %d tensor-parallel, %d replicated\n", fsdp,
              tensor_parallel, replicated);
  std::printf("%-22s %-12s %12s  %s\n", "parameter", "layout", "bytes/device", "outcome");
  for (const auto& p : solution.parameters) {
    const int rank = static_cast<int>(solution.node(p.id).shape.size());
    std::printf("%-22s %-12s %12s  %s\n", p.id.c_str(), p.layout.to_string(rank, axes).c_str(),
                bytes_text(static_cast<double>(p.state_bytes)).c_str(), p.summary().c_str());
  }
}

void print_seed_candidates(const solver::SimpleSolver& solver, const solver::Graph& graph) {
  const int axes = solver.machine().axis_count();
  std::printf(
      "\nseed candidates of each matmul, costed alone (compute = FLOPs / device / "
      "FLOP/s; comm = all-reduce of the output for a contraction split)\n");
  std::printf("%-22s %-28s %-12s %11s %10s %26s %10s\n", "node", "candidate", "output", "GFLOP/dev",
              "compute", "communication", "total");
  for (std::size_t i = 0; i < graph.size(); ++i) {
    const auto& node = graph.node(static_cast<int>(i));
    if (node.kind != solver::OpKind::matmul && node.kind != solver::OpKind::batched_matmul) {
      continue;
    }
    for (const auto& c : solver.seed_candidates(graph, static_cast<int>(i))) {
      std::string comm = "none";
      if (c.communication.collective != solver::LayoutCollective::none) {
        char buffer[64];
        std::snprintf(
            buffer, sizeof buffer, "%s %s %.2fus", solver::name_of(c.communication.collective),
            bytes_text(c.communication.buffer_bytes).c_str(), c.communication.seconds * 1e6);
        comm = buffer;
      }
      std::printf("%-22s %-28s %-12s %11.4f %8.2fus %26s %8.2fus\n", node.id.c_str(),
                  solver::describe(c.strategy, node).c_str(),
                  c.strategy.output.to_string(node.rank(), axes).c_str(),
                  c.strategy.flops_per_device / 1e9, c.compute_s * 1e6, comm.c_str(),
                  c.total_s() * 1e6);
    }
  }
}

}  // namespace fsdp::apps
