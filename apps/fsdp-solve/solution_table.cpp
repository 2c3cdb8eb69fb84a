#include "solution_table.hpp"

#include <cstdio>
#include <string>

#include "fsdp/core/text.hpp"

namespace fsdp::apps {
namespace {

std::string bytes_text(double bytes) {
  char buffer[32];
  if (bytes >= 1 << 20) {
    std::snprintf(buffer, sizeof buffer, "%.1f MiB", bytes / (1 << 20));
  } else if (bytes >= 1 << 10) {
    std::snprintf(buffer, sizeof buffer, "%.1f KiB", bytes / (1 << 10));
  } else {
    std::snprintf(buffer, sizeof buffer, "%.0f B", bytes);
  }
  return buffer;
}

}  // namespace

void print_solution(const solver::Solution& solution, const solver::Graph& graph) {
  const auto& m = solution.machine;
  std::printf(
      "solver: %s; %d devices, %.4g FLOP/s each, %.4g B/s per link, %.3g us per "
      "collective\n",
      solution.solver.c_str(), m.devices, m.flops_per_s, m.link_bytes_per_s,
      m.collective_latency_s * 1e6);
  std::printf("S = sharded over the devices, R = replicated, +P = partial sum pending\n\n");
  std::printf("%-22s %-14s %-20s %-28s %-12s %11s %10s %10s %10s  %s\n", "node", "op", "shape",
              "strategy", "output", "GFLOP/dev", "compute", "comm", "reshard", "input conversions");
  for (const auto& n : solution.nodes) {
    const int rank = static_cast<int>(n.shape.size());
    std::string conversions;
    const auto& node = graph.size() ? &graph.node(graph.index_of(n.id)) : nullptr;
    for (std::size_t k = 0; k < n.transfers.size(); ++k) {
      const auto& t = n.transfers[k];
      if (t.transfer.collective == solver::LayoutCollective::none) {
        continue;
      }
      const int from_rank =
          node ? graph.node(node->inputs[k]).rank() : static_cast<int>(n.shape.size());
      conversions += (conversions.empty() ? "" : "; ") + t.producer + " " +
                     t.from.to_string(from_rank) + "->" + t.to.to_string(from_rank) + " " +
                     solver::name_of(t.transfer.collective) + " " +
                     bytes_text(t.transfer.buffer_bytes);
    }
    std::printf("%-22s %-14s %-20s %-28s %-12s %11.4f %8.2fus %8.2fus %8.2fus  %s\n", n.id.c_str(),
                n.op.c_str(), shape_text(n.shape, "()", ",").c_str(), n.strategy.c_str(),
                n.output_spec.to_string(rank).c_str(), n.flops_per_device / 1e9, n.compute_s * 1e6,
                n.communication_s * 1e6, n.resharding_s * 1e6, conversions.c_str());
  }
  std::printf("\ntotal: %.3f us = compute %.3f us + communication %.3f us + resharding %.3f us\n",
              solution.total_s * 1e6, solution.compute_s * 1e6, solution.communication_s * 1e6,
              solution.resharding_s * 1e6);
}

void print_seed_candidates(const solver::SimpleSolver& solver, const solver::Graph& graph) {
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
                  c.strategy.output.to_string(node.rank()).c_str(),
                  c.strategy.flops_per_device / 1e9, c.compute_s * 1e6, comm.c_str(),
                  c.total_s() * 1e6);
    }
  }
}

}  // namespace fsdp::apps
