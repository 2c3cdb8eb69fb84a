// fsdp-bench sampler: DistributedSampler (indices produced on the fly, O(1) memory) against
// materializing and shuffling a std::vector of the whole dataset on every rank, in the same run.
#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <fstream>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "../common/plural.hpp"
#include "benchmark.hpp"
#include "fsdp/comm/process_group.hpp"
#include "fsdp/data/distributed_sampler.hpp"
#include "peak_memory.hpp"

namespace fsdp::bench {
namespace {

struct SamplerBenchOptions {
  double min_size = 1e6;
  double max_size = 1e9;
  int repeats = 3;
  std::string partition = "strided";
  // Largest vector the baseline may allocate per rank; 0: a quarter of MemAvailable shared by
  // the ranks of the node.
  double baseline_max_bytes = 0;
};

long mem_available_kb() {
  std::ifstream meminfo("/proc/meminfo");
  std::string line;
  while (std::getline(meminfo, line)) {
    if (line.compare(0, 13, "MemAvailable:") == 0) {
      return std::stol(line.substr(13));
    }
  }
  return -1;
}

// The baseline's shuffle: Fisher-Yates with splitmix64 and Lemire's multiply-shift bound (not
// std::shuffle: its output differs between standard libraries).
void shuffle_in_place(std::vector<std::int64_t>& values, std::uint64_t seed) {
  std::uint64_t state = seed;
  for (std::size_t i = values.size(); i > 1; --i) {
    state += 0x9e3779b97f4a7c15ULL;
    const std::uint64_t random = IndexPermutation::mix(state);
    const std::size_t j =
        static_cast<std::size_t>((static_cast<unsigned __int128>(random) * i) >> 64);
    std::swap(values[i - 1], values[j]);
  }
}

struct Measurement {
  double seconds = 0;      // median over repeats of the slowest rank
  long peak_added_kb = 0;  // largest over ranks and repeats
  std::uint64_t checksum = 0;
};

template <class Work>
Measurement measure(int repeats, ProcessGroup& group, bool& reset_ok, Work&& work) {
  std::vector<double> seconds;
  long peak = 0;
  std::uint64_t checksum = 0;
  for (int i = 0; i < repeats; ++i) {
    group.barrier();
    PeakMemory memory;
    reset_ok = reset_ok && memory.reset_ok();
    const double start = MPI_Wtime();
    checksum = work();
    seconds.push_back(MPI_Wtime() - start);
    peak = std::max(peak, memory.added_kb());
  }
  Measurement result;
  result.seconds = median(slowest_rank(seconds, group.mpi_comm()));
  std::int64_t peak_all = peak;
  group.all_reduce(Kokkos::DefaultHostExecutionSpace(), fsdp::host_view(&peak_all, 1),
                   ReduceOp::max);
  result.peak_added_kb = static_cast<long>(peak_all);
  result.checksum = checksum;
  return result;
}

void run(const SamplerBenchOptions& options, const CommonOptions& common) {
  require(options.min_size >= 1 && options.min_size <= options.max_size,
          "fsdp-bench sampler: need 1 <= --min-size <= --max-size");
  require(options.repeats >= 1, "fsdp-bench sampler: --repeats must be at least 1");
  ProcessGroup group(MPI_COMM_WORLD);
  const int ranks = group.size();
  const int ranks_on_node = group.node_local().size();
  double baseline_cap = options.baseline_max_bytes;
  if (baseline_cap <= 0) {
    baseline_cap = static_cast<double>(mem_available_kb()) * 1024.0 / 4.0 / ranks_on_node;
  }
  SamplerOptions sampler_options;
  sampler_options.partition = parse_partition(options.partition);
  sampler_options.seed = 2024;

  if (group.rank() == 0 && !common.json) {
    std::printf(
        "fsdp-bench sampler: %s (%d on this node), %s partition, shuffle, median of %s "
        "of the slowest rank. 'sampler' iterates this rank's indices of one epoch; "
        "'vector' allocates, fills and shuffles the whole dataset on every rank, then iterates "
        "this rank's share. Memory: peak RSS added during the work, largest rank. The vector "
        "baseline is skipped above %.2f GB per rank.\n",
        fsdp_apps::count_of(ranks, "rank").c_str(), ranks_on_node, options.partition.c_str(),
        fsdp_apps::count_of(options.repeats, "repeat").c_str(), baseline_cap / 1e9);
    std::printf("%14s %12s %14s %12s %14s %12s %9s\n", "dataset", "per rank", "sampler idx/s",
                "sampler kB", "vector idx/s", "vector kB", "ratio");
  }
  for (double size_d = options.min_size; size_d <= options.max_size * 1.0000001; size_d *= 10) {
    const auto n = static_cast<std::int64_t>(size_d + 0.5);
    bool reset_ok = true;
    std::int64_t length = 0;
    const Measurement sampler = measure(options.repeats, group, reset_ok, [&] {
      DistributedSampler sampler(group, n, sampler_options);
      length = sampler.length();
      std::uint64_t sum = 0;
      for (std::int64_t index : sampler) {
        sum += static_cast<std::uint64_t>(index);
      }
      return sum;
    });
    // Check: the ranks' indices together are the dataset plus the padding (the order's start).
    std::int64_t sum_all = static_cast<std::int64_t>(sampler.checksum);
    group.all_reduce(Kokkos::DefaultHostExecutionSpace(), fsdp::host_view(&sum_all, 1),
                     ReduceOp::sum);
    std::uint64_t expected = static_cast<std::uint64_t>(n) * static_cast<std::uint64_t>(n - 1) / 2;
    if (sampler_options.partition == Partition::strided) {
      DistributedSampler whole(n, 1, 0, sampler_options);
      for (std::int64_t q = 0; q < length * ranks - n; ++q) {
        expected += static_cast<std::uint64_t>(whole.index(q));
      }
      require(static_cast<std::uint64_t>(sum_all) == expected,
              "fsdp-bench sampler: the ranks' indices do not add up to the dataset's at size " +
                  std::to_string(n));
    }

    const double vector_bytes = static_cast<double>(n) * sizeof(std::int64_t);
    const bool run_vector = vector_bytes <= baseline_cap;
    Measurement vector;
    if (run_vector) {
      const int rank = group.rank();
      vector = measure(options.repeats, group, reset_ok, [&] {
        std::vector<std::int64_t> order(static_cast<std::size_t>(n));
        std::iota(order.begin(), order.end(), std::int64_t{0});
        shuffle_in_place(order, sampler_options.seed);
        std::uint64_t sum = 0;
        for (std::int64_t i = 0; i < length; ++i) {
          std::int64_t position = rank + i * ranks;
          position = position < n ? position : position % n;  // the padding wraps
          sum += static_cast<std::uint64_t>(order[static_cast<std::size_t>(position)]);
        }
        return sum;
      });
    }
    const double sampler_rate = static_cast<double>(length) / sampler.seconds;
    const double vector_rate = run_vector ? static_cast<double>(length) / vector.seconds : 0.0;
    nlohmann::json result = {{"benchmark", "sampler"},
                             {"partition", options.partition},
                             {"ranks", ranks},
                             {"dataset_size", n},
                             {"indices_per_rank", length},
                             {"repeats", options.repeats},
                             {"sampler_s", sampler.seconds},
                             {"sampler_indices_per_s_per_rank", sampler_rate},
                             {"sampler_peak_added_kb", sampler.peak_added_kb},
                             {"peak_is_since_process_start", !reset_ok}};
    if (run_vector) {
      result["vector_s"] = vector.seconds;
      result["vector_indices_per_s_per_rank"] = vector_rate;
      result["vector_peak_added_kb"] = vector.peak_added_kb;
      result["throughput_ratio"] = sampler_rate / vector_rate;
    } else {
      result["vector_skipped"] = "needs " + std::to_string(vector_bytes / 1e9) +
                                 " GB per rank, above the cap of " +
                                 std::to_string(baseline_cap / 1e9) + " GB";
    }
    emit(common, group.rank(), result, [&] {
      if (run_vector) {
        std::printf("%14" PRId64 " %12" PRId64 " %14.4g %12ld %14.4g %12ld %9.2f\n", n, length,
                    sampler_rate, sampler.peak_added_kb, vector_rate, vector.peak_added_kb,
                    sampler_rate / vector_rate);
      } else {
        std::printf("%14" PRId64 " %12" PRId64
                    " %14.4g %12ld %14s %12s %9s  (vector skipped: "
                    "%.1f GB per rank > cap %.1f GB)\n",
                    n, length, sampler_rate, sampler.peak_added_kb, "-", "-", "-",
                    vector_bytes / 1e9, baseline_cap / 1e9);
      }
      if (!reset_ok) {
        std::printf("  (peak RSS could not be reset: memory is the process's peak so far)\n");
      }
    });
  }
}

}  // namespace

void add_sampler(CLI::App& app, const CommonOptions& common) {
  auto options = std::make_shared<SamplerBenchOptions>();
  CLI::App* sub = app.add_subcommand(
      "sampler",
      "DistributedSampler indices/s per rank and peak memory against a shuffled std::vector");
  sub->add_option("--min-size", options->min_size, "smallest dataset (samples); sizes x10");
  sub->add_option("--max-size", options->max_size, "largest dataset (samples)");
  sub->add_option("--repeats", options->repeats, "repeats per size (median)")
      ->check(CLI::Range(1, 1 << 20));
  sub->add_option("--partition", options->partition, "strided or contiguous");
  sub->add_option("--baseline-max-bytes", options->baseline_max_bytes,
                  "largest vector per rank for the baseline (0: a quarter of MemAvailable / ranks "
                  "on the node)");
  sub->callback([options, &common] { run(*options, common); });
}

}  // namespace fsdp::bench
