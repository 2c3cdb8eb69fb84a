// fsdp-bench: benchmark programs. Each prints a figure and its baseline measured in the same run.
#include <mpi.h>

#include <Kokkos_Core.hpp>
#include <algorithm>
#include <cstdio>
#include <exception>

#include "../common/kokkos_session.hpp"
#include "../common/mpi_start.hpp"
#include "../common/output_written.hpp"
#include "../common/usage_exit.hpp"
#include "../common/wrapped_help.hpp"
#include "benchmark.hpp"
#include "fsdp/core/error.hpp"
#include "models/blas_runtime.hpp"
#include "models/subnormals.hpp"

namespace fsdp::bench {

double median(std::vector<double> samples) {
  if (samples.empty()) {
    return 0.0;
  }
  std::sort(samples.begin(), samples.end());
  const std::size_t mid = samples.size() / 2;
  return samples.size() % 2 ? samples[mid] : 0.5 * (samples[mid - 1] + samples[mid]);
}

std::vector<double> slowest_rank(const std::vector<double>& local, MPI_Comm comm) {
  std::vector<double> slowest(local.size());
  const int rc = MPI_Allreduce(local.data(), slowest.data(), static_cast<int>(local.size()),
                               MPI_DOUBLE, MPI_MAX, comm);
  if (rc != MPI_SUCCESS) {
    throw Error("fsdp-bench: MPI_Allreduce of timings failed with code " + std::to_string(rc));
  }
  return slowest;
}

void emit(const CommonOptions& common, int rank, const nlohmann::json& result,
          const std::function<void()>& print_text) {
  if (rank != 0) {
    return;
  }
  if (common.json) {
    std::printf("%s\n", result.dump().c_str());
  } else {
    print_text();
  }
  std::fflush(stdout);
}

}  // namespace fsdp::bench

int main(int argc, char** argv) {
  if (!fsdp_apps::start_mpi(&argc, &argv, "fsdp-bench")) {
    return 1;
  }
  // The kernels for this CPU, where OpenBLAS does not know it; one BLAS thread per rank: MPI
  // runs a rank per core (OPENBLAS_CORETYPE and OPENBLAS_NUM_THREADS override them).
  fsdp_models::choose_blas_kernels();
  fsdp_models::limit_blas_threads(1);
  // As fsdp-train computes by default (models/subnormals.hpp).
  fsdp_models::flush_subnormals_to_zero();
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  int code = 0;
  bool failed_while_running = false;
  {
    fsdp_apps::KokkosSession kokkos(argc, argv);
    if (kokkos.refused("fsdp-bench", rank == 0)) {
      MPI_Finalize();
      return fsdp_apps::kExitUsage;
    }
    CLI::App app{"fsdp-bench: fsdp's figures against their baselines, measured in the same run"};
    app.footer(fsdp_apps::kKokkosOptions);
    fsdp_apps::wrap_help(app);
    fsdp_apps::add_version_flag(app, "fsdp-bench");
    app.require_subcommand(1);
    app.fallthrough();  // common options are accepted after the subcommand too
    fsdp::bench::CommonOptions common;
    app.add_flag("--json", common.json, "one JSON object per line instead of a table");
    fsdp::bench::add_collectives(app, common);
    fsdp::bench::add_sampler(app, common);
    fsdp::bench::add_solver(app, common);
    fsdp::bench::add_gather(app, common);
    fsdp::bench::add_memory(app, common);
    fsdp::bench::add_step(app, common);
    fsdp::bench::add_optimizer(app, common);
    fsdp::bench::add_checkpoint(app, common);
    try {
      app.parse(argc, argv);  // runs the chosen subcommand's callback
    } catch (const CLI::ParseError& error) {
      // Every rank parsed the same arguments: rank 0 reports, all end normally.
      code = fsdp_apps::usage_exit(app, error, "fsdp-bench", rank == 0);
    } catch (const std::exception& error) {
      std::fprintf(stderr, "fsdp-bench: rank %d: %s\n", rank, error.what());
      code = fsdp_apps::kExitError;
      failed_while_running = true;
    }
  }
  if (failed_while_running) {
    MPI_Abort(MPI_COMM_WORLD, code);  // other ranks may be waiting in a collective
  }
  code = fsdp_apps::output_written("fsdp-bench", code);
  MPI_Finalize();
  return code;
}
