// Rank 1 never enters an all_gather that ranks 0 and 2 wait in. Run on 3 ranks with
// FSDP_COLLECTIVE_TIMEOUT_S=6: ranks 0 and 2 must raise fsdp::Error naming the operation and rank 1
// after about 6 s. CTest matches the message; the job then ends with MPI_Abort because the
// abandoned collective can never complete. With --other-group, rank 2 waits in an all_gather of
// a split of the group with the same ranks (as a runtime's gathers do), and each of ranks 0 and 2
// must still name rank 1 alone as missing and say where the other waits.
#include <mpi.h>

#include <Kokkos_Core.hpp>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>

#include "fsdp/comm/process_group.hpp"
#include "pointer_collectives.hpp"

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  Kokkos::initialize(argc, argv);
  int code = 0;
  // Ranks 0 and 2 meet once more before the abort, so that both have printed by then.
  int world_rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  MPI_Comm waiting = MPI_COMM_NULL;
  if (MPI_Comm_split(MPI_COMM_WORLD, world_rank == 1 ? MPI_UNDEFINED : 0, world_rank, &waiting) !=
      MPI_SUCCESS) {
    std::printf("UNEXPECTED: MPI_Comm_split failed\n");
  }
  {
    fsdp::ProcessGroup group(MPI_COMM_WORLD);
    std::vector<float> send(16, 1.0f), recv(16 * group.size());
    group.barrier();  // collective #0: everyone arrives
    const bool other_group = argc > 1 && std::strcmp(argv[1], "--other-group") == 0;
    fsdp::ProcessGroup split = group.split(0, group.rank());
    fsdp::ProcessGroup& mine = other_group && group.rank() == 2 ? split : group;
    if (group.rank() == 1) {
      // Sleeps through the others' timeout, as a rank stuck in its own computation would.
      std::this_thread::sleep_for(std::chrono::seconds(30));
      std::printf("UNEXPECTED: rank 1 was not aborted by the others' timeout\n");
    } else {
      const auto start = std::chrono::steady_clock::now();
      try {
        fsdp::detail::PointerCollectives(mine).all_gather(send.data(), recv.data(), send.size());
        std::printf("UNEXPECTED: all_gather completed on rank %d without rank 1\n", group.rank());
      } catch (const fsdp::Error& error) {
        const double waited =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        std::printf("rank %d got: %s\n(after %.1f s)\n", group.rank(), error.what(), waited);
        if (waited > 20) {
          std::printf("UNEXPECTED: the timeout took %.1f s\n", waited);
        }
        // The group is unusable now, and says so.
        try {
          mine.barrier();
          std::printf("UNEXPECTED: a failed group accepted another collective\n");
        } catch (const fsdp::Error& again) {
          std::printf("rank %d then: %s\n", group.rank(), again.what());
        }
      }
      std::fflush(stdout);
      if (MPI_Barrier(waiting) != MPI_SUCCESS) {
        std::printf("UNEXPECTED: MPI_Barrier failed\n");
      }
      code = 3;
    }
  }
  MPI_Abort(MPI_COMM_WORLD, code);
  return code;
}
