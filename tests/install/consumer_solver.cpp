// Built against an installed fsdp: the solver's library (fsdp::solver) and its umbrella header,
// linked on its own target, solve a generated MLP block.
#include <fsdp/solver.hpp>

#include <cstdio>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  const fsdp::solver::Graph graph = fsdp::solver::mlp_block(fsdp::solver::ModelShape());
  const fsdp::solver::Solution solution = fsdp::solver::SimpleSolver().solve(graph);
  const bool ok = solution.nodes.size() == graph.size() && solution.total_s > 0;
  if (rank == 0) {
    std::printf("solver consumer: %zu nodes %s\n", solution.nodes.size(), ok ? "ok" : "WRONG");
  }
  MPI_Finalize();
  return ok ? 0 : 1;
}
