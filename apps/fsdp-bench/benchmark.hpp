// What every fsdp-bench subcommand shares: registration, timing, and output.
#pragma once

#include <mpi.h>

#include <CLI/CLI.hpp>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace fsdp::bench {

// Options common to all subcommands.
struct CommonOptions {
  bool json = false;  // one JSON object per line on rank 0 instead of a table
};

// Each subcommand adds itself to app, with its options and a callback that runs it. common is
// filled in by the time the callback runs.
void add_collectives(CLI::App& app, const CommonOptions& common);
void add_sampler(CLI::App& app, const CommonOptions& common);
void add_solver(CLI::App& app, const CommonOptions& common);
void add_gather(CLI::App& app, const CommonOptions& common);
void add_memory(CLI::App& app, const CommonOptions& common);
void add_step(CLI::App& app, const CommonOptions& common);
void add_optimizer(CLI::App& app, const CommonOptions& common);
void add_checkpoint(CLI::App& app, const CommonOptions& common);

// Median of the samples (they are copied and sorted).
double median(std::vector<double> samples);

// The slowest rank's time for each sample: a collective is as slow as its last rank.
std::vector<double> slowest_rank(const std::vector<double>& local, MPI_Comm comm);

// Prints a result on rank 0: a JSON line with --json, else through the text formatter.
void emit(const CommonOptions& common, int rank, const nlohmann::json& result,
          const std::function<void()>& print_text);

}  // namespace fsdp::bench
