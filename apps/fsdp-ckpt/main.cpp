// fsdp-ckpt: looks into fsdp checkpoints without a training job. One process, no mpiexec:
//   fsdp-ckpt inspect CHECKPOINT [--json]   what the file holds: state, optimizer, tensors
//   fsdp-ckpt verify CHECKPOINT             every tensor's checksum against its data
//   fsdp-ckpt export CHECKPOINT OUTPUT      the parameters as a plain unsharded HDF5 file
//   fsdp-ckpt upgrade OLD NEW               a trusted checkpoint of format version 1 rewritten in
//                                           this fsdp's format (NEW may be OLD)
// CHECKPOINT is a file or a checkpoint directory (its "latest"). docs/checkpoints.md.
#include <unistd.h>

#include <sys/stat.h>
#include <CLI/CLI.hpp>
#include <Kokkos_Core.hpp>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

#include "../common/kokkos_session.hpp"
#include "../common/not_input.hpp"
#include "../common/output_written.hpp"
#include "../common/plural.hpp"
#include "../common/usage_exit.hpp"
#include "../common/wrapped_help.hpp"
#include "fsdp/core/checked_size.hpp"
#include "fsdp/core/error.hpp"
#include "fsdp/core/text.hpp"
#include "fsdp/io/checkpoint.hpp"
#include "fsdp/io/checkpoint_directory.hpp"
#include "fsdp/io/hdf5_handle.hpp"

namespace {

constexpr int kExitOk = 0;

// A directory stands for the checkpoint its "latest" names.
std::string resolve(const std::string& path) {
  struct stat info {};
  if (::stat(path.c_str(), &info) == 0 && S_ISDIR(info.st_mode)) {
    const std::string latest = fsdp::CheckpointDirectory::find_latest(path);
    if (latest.empty()) {
      throw fsdp::Error(fsdp::ErrorKind::io,
                        "'" + path + "' holds no checkpoint yet (no 'latest' file)");
    }
    return latest;
  }
  return path;
}

// Reading the header checked every tensor's size (fsdp::checked_element_count).
std::int64_t elements(const fsdp::CheckpointTensor& t) {
  return fsdp::checked_element_count(t.shape, t.name, fsdp::ErrorKind::io);
}

nlohmann::json header_json(const std::string& file, const fsdp::CheckpointHeader& h) {
  nlohmann::json tensors = nlohmann::json::array();
  for (const fsdp::CheckpointTensor& t : h.tensors) {
    tensors.push_back({{"name", t.name},
                       {"shape", t.shape},
                       {"dtype", t.dtype},
                       {"elements", elements(t)},
                       {"checksum", t.has_checksum ? nlohmann::json(t.checksum) : nullptr}});
  }
  nlohmann::json json = {{"file", file},
                         {"format_version", h.format_version},
                         {"library_version", h.library_version},
                         {"step", h.state.step},
                         {"epoch", h.state.epoch},
                         {"world_size", h.world_size},
                         {"strategy", h.strategy},
                         {"metadata", h.state.metadata},
                         {"objects", h.objects},  // each one's state as its JSON text
                         {"tensors", tensors}};
  if (h.state.sampler) {
    const fsdp::SamplerState& s = *h.state.sampler;
    json["sampler"] = {{"seed", s.seed},
                       {"epoch", s.epoch},
                       {"samples_consumed", s.samples_consumed},
                       {"dataset_size", s.dataset_size},
                       {"replicas", s.replicas}};
  }
  if (!h.optimizer.empty()) {
    const fsdp::OptimizerSettings& s = h.optimizer_settings;
    json["optimizer"] = {{"name", h.optimizer},
                         {"steps", h.optimizer_steps},
                         {"lr", s.lr},
                         {"weight_decay", s.weight_decay},
                         {"momentum", s.momentum},
                         {"dampening", s.dampening},
                         {"nesterov", s.nesterov},
                         {"beta1", s.beta1},
                         {"beta2", s.beta2},
                         {"eps", s.eps}};
  }
  return json;
}

void print_header(const std::string& file, const fsdp::CheckpointHeader& h) {
  std::printf("checkpoint %s\n", file.c_str());
  std::printf("  format version %d, written by fsdp %s on %s, strategy %s\n", h.format_version,
              h.library_version.c_str(), fsdp_apps::count_of(h.world_size, "rank").c_str(),
              h.strategy.c_str());
  std::printf("  step %lld, epoch %lld\n", static_cast<long long>(h.state.step),
              static_cast<long long>(h.state.epoch));
  if (h.state.sampler) {
    std::printf("  sampler %s\n", h.state.sampler->to_string().c_str());
  }
  if (!h.optimizer.empty()) {
    const fsdp::OptimizerSettings& s = h.optimizer_settings;
    std::printf("  optimizer %s after %s: lr %g, weight_decay %g", h.optimizer.c_str(),
                fsdp_apps::count_of(h.optimizer_steps, "step").c_str(), s.lr, s.weight_decay);
    if (h.optimizer == "sgd") {
      std::printf(", momentum %g, dampening %g, nesterov %s\n", s.momentum, s.dampening,
                  s.nesterov ? "yes" : "no");
    } else {
      std::printf(", beta1 %g, beta2 %g, eps %g\n", s.beta1, s.beta2, s.eps);
    }
  }
  for (const auto& [key, value] : h.state.metadata) {
    std::printf("  metadata %s = %s\n", key.c_str(), value.c_str());
  }
  for (const auto& [name, state] : h.objects) {
    std::printf("  object %s = %s\n", name.c_str(), state.c_str());
  }
  std::int64_t total = 0;
  std::printf("\n  %-44s %-16s %-5s %20s\n", "tensor", "shape", "dtype", "checksum");
  for (const fsdp::CheckpointTensor& t : h.tensors) {
    const std::string checksum = t.has_checksum ? std::to_string(t.checksum) : "none";
    std::printf("  %-44s %-16s %-5s %20s\n", t.name.c_str(), fsdp::shape_text(t.shape).c_str(),
                t.dtype.c_str(), checksum.c_str());
    fsdp::require(!__builtin_add_overflow(total, elements(t), &total),
                  "the checkpoint's tensors hold more than 2^63 - 1 elements in all",
                  fsdp::ErrorKind::io);
  }
  std::printf("\n  %zu tensors, %lld elements\n", h.tensors.size(), static_cast<long long>(total));
}

}  // namespace

int main(int argc, char** argv) {
  // Kokkos first, so that its options are taken out of argv before the tool's own are parsed
  // (checksums are Kokkos kernels).
  fsdp_apps::KokkosSession kokkos(argc, argv);
  if (kokkos.refused("fsdp-ckpt")) {
    return fsdp_apps::kExitUsage;
  }
  // Damaged files are this tool's daily work: libhdf5's own leak on some of them must not print
  // at exit after the tool's clean error.
  fsdp::hdf5::stop_error_printing_for_the_process();
  CLI::App app{
      "fsdp-ckpt: inspects, verifies, exports and upgrades fsdp checkpoints (one process, no "
      "mpiexec). "
      "CHECKPOINT is a checkpoint file or a checkpoint directory, which stands for the "
      "checkpoint its 'latest' names. docs/checkpoints.md describes the files."};
  app.footer(fsdp_apps::kKokkosOptions);
  fsdp_apps::wrap_help(app);
  fsdp_apps::add_version_flag(app, "fsdp-ckpt");
  app.require_subcommand(1);
  std::string checkpoint, output, old_checkpoint;
  bool json = false;
  CLI::App* inspect = app.add_subcommand(
      "inspect",
      "print the step, epoch, sampler position, optimizer, metadata, objects and tensors");
  inspect->add_option("CHECKPOINT", checkpoint, "checkpoint file or directory")->required();
  inspect->add_flag("--json", json, "one JSON object instead of text");
  CLI::App* verify = app.add_subcommand(
      "verify", "read every tensor and check its checksum (exit 1 naming the damaged ones)");
  verify->add_option("CHECKPOINT", checkpoint, "checkpoint file or directory")->required();
  CLI::App* exporter = app.add_subcommand(
      "export",
      "write the parameters as a plain HDF5 file: one dataset per parameter, named as "
      "the parameter, in its logical shape (what load_parameters reads)");
  exporter->add_option("CHECKPOINT", checkpoint, "checkpoint file or directory")->required();
  exporter->add_option("OUTPUT", output, "the HDF5 file to write")->required();
  CLI::App* upgrade = app.add_subcommand(
      "upgrade",
      "rewrite a checkpoint of format version 1 (variable-length strings, which this fsdp no "
      "longer loads) in format version " +
          std::to_string(fsdp::kCheckpointFormatVersion) +
          ", checking every tensor against its checksum. OLD is trusted: HDF5 can hang on a "
          "damaged format 1 file (stop it with Ctrl-C). NEW is written whole or not at all, "
          "and may be OLD");
  upgrade->add_option("OLD", old_checkpoint, "checkpoint file or directory of format version 1")
      ->required();
  upgrade->add_option("NEW", output, "the checkpoint file to write")->required();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& error) {
    return fsdp_apps::usage_exit(app, error, "fsdp-ckpt");
  }

  try {
    if (upgrade->parsed()) {
      const std::string file = resolve(old_checkpoint);
      const fsdp::CheckpointHeader old = fsdp::upgrade_checkpoint(file, output, [&] {
        // Said before reading: if the file is damaged, this is the last line before the hang.
        std::fprintf(stderr,
                     "fsdp-ckpt: reading %s as a trusted checkpoint of format version 1 (HDF5 can "
                     "hang on a damaged one: stop it with Ctrl-C)\n",
                     file.c_str());
      });
      std::printf(
          "fsdp-ckpt: wrote %s, format version %d: the %s of %s (format version %d, written by "
          "fsdp %s), every checksum matching its data\n",
          output.c_str(), fsdp::kCheckpointFormatVersion,
          fsdp_apps::count_of(static_cast<long long>(old.tensors.size()), "tensor").c_str(),
          file.c_str(), old.format_version, old.library_version.c_str());
      return fsdp_apps::output_written("fsdp-ckpt", kExitOk);
    }
    const std::string file = resolve(checkpoint);
    if (inspect->parsed()) {
      const fsdp::CheckpointHeader header = fsdp::read_checkpoint_header(file);
      if (json) {
        std::printf("%s\n", header_json(file, header).dump().c_str());
      } else {
        print_header(file, header);
      }
    } else if (verify->parsed()) {
      const bool terminal = ::isatty(STDERR_FILENO) != 0;
      if (terminal) {
        std::fprintf(stderr, "fsdp-ckpt: verifying %s ...\n", file.c_str());
      }
      fsdp::verify_checkpoint(file);
      const std::size_t count = fsdp::read_checkpoint_header(file).tensors.size();
      std::printf("%s: %zu tensors, every checksum matches its data\n", file.c_str(), count);
    } else {
      fsdp_apps::require_not_input(output, "OUTPUT", file, "CHECKPOINT");
      fsdp::export_parameters(file, output);
      std::printf("fsdp-ckpt: wrote the parameters of %s to %s\n", file.c_str(), output.c_str());
    }
  } catch (const CLI::ParseError& error) {
    return fsdp_apps::usage_exit(app, error, "fsdp-ckpt");
  } catch (const std::exception& error) {
    std::fflush(stdout);
    std::fprintf(stderr, "fsdp-ckpt: %s\n", fsdp::message_of(error).c_str());
    return fsdp_apps::kExitError;
  }
  return fsdp_apps::output_written("fsdp-ckpt", kExitOk);
}
