// fsdp-bench collectives: ProcessGroup::all_gather and reduce_scatter against raw MPI_Allgather and
// MPI_Reduce_scatter_block, and against the same group with the collective signature check off,
// on the same buffers, interleaved in the same run.
#include <Kokkos_Core.hpp>
#include <algorithm>
#include <array>
#include <cstdio>
#include <memory>

#include "../common/plural.hpp"
#include "benchmark.hpp"
#include "fsdp/comm/process_group.hpp"

namespace fsdp::bench {
namespace {

struct CollectivesOptions {
  std::size_t min_bytes = 4 << 10;
  std::size_t max_bytes = std::size_t{256} << 20;
  int max_repeats = 50;
  int min_repeats = 7;
};

void check(int rc, const char* what) {
  if (rc != MPI_SUCCESS) {
    throw Error(std::string("fsdp-bench: ") + what + " failed with MPI error " +
                std::to_string(rc));
  }
}

// Repeats: many at small sizes where noise dominates, fewer where one transfer takes long.
int repeats_for(std::size_t bytes, const CollectivesOptions& options) {
  const std::size_t by_size = (std::size_t{512} << 20) / std::max<std::size_t>(bytes, 1);
  return static_cast<int>(
      std::clamp<std::size_t>(by_size, options.min_repeats, options.max_repeats));
}

// What carries the benchmark's bytes: its buffers are host Views.
const char* transport_of(const ProcessGroup& group) {
  return name_of(group.transport_for<Kokkos::HostSpace>());
}

// Times raw MPI, the group, and the group with the collective signature check off
// (FSDP_CHECK_COLLECTIVES=0). The rounds go through every order of the three in turn, and each
// way runs once untimed before its timed call: what ran just before (another algorithm, the caches
// and the memory it left) moves a time by more than the check costs. Without the untimed call the
// way that followed raw MPI more often in the cycle of orders (3 times in 6 against 2) read 9 to
// 27 % slower at 256 KiB in an A/A run (both groups unchecked); raw MPI_Reduce_scatter_block maps
// and unmaps a temporary buffer of the send size at every call (block_exchange.hpp).
template <class Raw, class Wrapped, class Unchecked>
void measure(const char* operation, std::size_t bytes, int repeats, ProcessGroup& group,
             const CommonOptions& common, Raw&& raw, Wrapped&& wrapped, Unchecked&& unchecked) {
  std::array<int, 3> order = {0, 1, 2};  // raw, wrapped, unchecked
  std::vector<double> seconds[order.size()];
  for (int i = 0; i < repeats + 1; ++i) {  // the first round warms up and is dropped
    for (int way : order) {
      auto call = [&] {
        if (way == 0) {
          raw();
        } else if (way == 1) {
          wrapped();
        } else {
          unchecked();
        }
      };
      check(MPI_Barrier(group.mpi_comm()), "MPI_Barrier");
      call();  // untimed: the timed call follows its own kind
      check(MPI_Barrier(group.mpi_comm()), "MPI_Barrier");
      const double start = MPI_Wtime();
      call();
      if (i > 0) {
        seconds[way].push_back(MPI_Wtime() - start);
      }
    }
    std::next_permutation(order.begin(), order.end());
  }
  const double raw_median = median(slowest_rank(seconds[0], group.mpi_comm()));
  const double wrapped_median = median(slowest_rank(seconds[1], group.mpi_comm()));
  const double unchecked_median = median(slowest_rank(seconds[2], group.mpi_comm()));
  const double ratio = raw_median / wrapped_median;  // wrapper throughput / raw throughput
  // What the signature check adds to the group's time: 0.01 is 1 %.
  const double check_cost = wrapped_median / unchecked_median - 1;
  nlohmann::json result = {{"benchmark", "collectives"},
                           {"operation", operation},
                           {"ranks", group.size()},
                           {"bytes_per_rank", bytes},
                           {"repeats", repeats},
                           {"process_group_s", wrapped_median},
                           {"unchecked_process_group_s", unchecked_median},
                           {"raw_mpi_s", raw_median},
                           {"throughput_ratio", ratio},
                           {"check_cost", check_cost},
                           {"check_s", wrapped_median - unchecked_median},
                           {"transport", transport_of(group)}};
  emit(common, group.rank(), result, [&] {
    std::printf("%-15s %12zu %8d %14.6f %14.6f %14.6f %10.3f %+10.2f%%\n", operation, bytes,
                repeats, wrapped_median * 1e3, unchecked_median * 1e3, raw_median * 1e3, ratio,
                check_cost * 100);
  });
}

void run(const CollectivesOptions& options, const CommonOptions& common) {
  require(options.min_bytes >= sizeof(float) && options.min_bytes <= options.max_bytes,
          "fsdp-bench collectives: need 4 <= --min-bytes <= --max-bytes");
  ProcessGroup group(MPI_COMM_WORLD);
  // The baseline of the signature check's cost: the same group without it.
  CollectiveOptions unchecked_options = CollectiveOptions::from_environment();
  unchecked_options.check_arguments = false;
  ProcessGroup unchecked(MPI_COMM_WORLD, unchecked_options);
  const int n = group.size();
  if (group.rank() == 0 && !common.json) {
    std::printf(
        "fsdp-bench collectives: %s, median of repeats of the slowest rank, ratio = "
        "raw MPI time / ProcessGroup time (1.0 = as fast as raw MPI); check: what the "
        "collective signature check adds to the group's time (group / unchecked - 1)\n",
        fsdp_apps::count_of(n, "rank").c_str());
    std::printf("transport: %s\n", transport_of(group));
    std::printf("%-15s %12s %8s %14s %14s %14s %10s %11s\n", "operation", "bytes/rank", "repeats",
                "group (ms)", "unchecked (ms)", "raw MPI (ms)", "ratio", "check");
  }
  for (std::size_t bytes = options.min_bytes; bytes <= options.max_bytes; bytes *= 4) {
    const std::size_t count = bytes / sizeof(float);
    const int repeats = repeats_for(bytes, options);
    Kokkos::View<float*, Kokkos::HostSpace> chunk("chunk", count);
    Kokkos::View<float*, Kokkos::HostSpace> full("full", count * n);
    Kokkos::deep_copy(chunk, 1.0f);
    Kokkos::deep_copy(full, 1.0f);
    const int icount = static_cast<int>(count);
    const Kokkos::DefaultHostExecutionSpace host;
    measure(
        "all_gather", bytes, repeats, group, common,
        [&] {
          check(MPI_Allgather(chunk.data(), icount, MPI_FLOAT, full.data(), icount, MPI_FLOAT,
                              group.mpi_comm()),
                "MPI_Allgather");
        },
        [&] { group.all_gather(host, chunk, full); },
        [&] { unchecked.all_gather(host, chunk, full); });
    measure(
        "reduce_scatter", bytes, repeats, group, common,
        [&] {
          check(MPI_Reduce_scatter_block(full.data(), chunk.data(), icount, MPI_FLOAT, MPI_SUM,
                                         group.mpi_comm()),
                "MPI_Reduce_scatter_block");
        },
        [&] { group.reduce_scatter(host, full, chunk, ReduceOp::sum); },
        [&] { unchecked.reduce_scatter(host, full, chunk, ReduceOp::sum); });
  }
}

}  // namespace

void add_collectives(CLI::App& app, const CommonOptions& common) {
  auto options = std::make_shared<CollectivesOptions>();
  CLI::App* sub = app.add_subcommand(
      "collectives",
      "all_gather and reduce_scatter (fp32 sum) through ProcessGroup against raw MPI");
  sub->add_option("--min-bytes", options->min_bytes, "smallest message per rank (bytes)");
  sub->add_option("--max-bytes", options->max_bytes, "largest message per rank (bytes); sizes x4");
  sub->add_option("--max-repeats", options->max_repeats, "repeats at small sizes")
      ->check(CLI::Range(1, 1 << 20));
  sub->add_option("--min-repeats", options->min_repeats, "repeats at the largest sizes")
      ->check(CLI::Range(1, 1 << 20));
  sub->callback([options, &common] { run(*options, common); });
}

}  // namespace fsdp::bench
