// Built against an installed fsdp: the public headers, the generated config and the exported
// target are enough to run a collective.
#include <fsdp/fsdp.hpp>

#include <cstdio>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int failures = 0;
  {
    Kokkos::ScopeGuard kokkos(argc, argv);
    fsdp::ProcessGroup group(MPI_COMM_WORLD);
    Kokkos::View<double*, Kokkos::HostSpace> data("data", 4);
    Kokkos::deep_copy(data, 1.0);
    group.all_reduce(Kokkos::DefaultHostExecutionSpace(), data, fsdp::ReduceOp::sum);
    failures = data(3) == group.size() ? 0 : 1;
    if (group.rank() == 0) {
      std::printf("fsdp %s consumer: all_reduce over %d ranks %s\n", FSDP_VERSION_STRING,
                  group.size(), failures ? "WRONG" : "ok");
    }
  }
  MPI_Finalize();
  return failures;
}
