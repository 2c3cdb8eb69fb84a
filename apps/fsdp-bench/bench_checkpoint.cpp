// fsdp-bench checkpoint: save_checkpoint and load_checkpoint throughput against writing and
// reading the same bytes with plain POSIX I/O in the same run, and a resharded load (written by
// N ranks, read by N - 1) against a load by the same N - 1 ranks of a file they wrote; and the
// time a background save keeps the caller, against the save.
//
// Plain I/O: rank 0 creates a new file (each checkpoint is a new file), every rank pwrite()s the
// bytes of its pieces at their offset in it and fsync()s it (a checkpoint is fsynced before it
// is renamed), then pread()s them back: into the buffers it wrote from, and into new buffers
// (untouched memory, whose pages fault in during the read, as a load's new pieces do). Before
// every read both files are synced and dropped from the page cache the same way
// (posix_fadvise(POSIX_FADV_DONTNEED) on rank 0), so both reads come from the disk.
#include <fcntl.h>
#include <mpi.h>
#include <unistd.h>

#include <Kokkos_Core.hpp>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "../common/barrier_without_spinning.hpp"
#include "../common/plural.hpp"
#include "benchmark.hpp"
#include "fsdp/comm/process_group.hpp"
#include "fsdp/core/error.hpp"
#include "fsdp/io/background_save.hpp"
#include "fsdp/io/checkpoint.hpp"
#include "fsdp/optim/optimizer.hpp"
#include "fsdp/shard/sharding_strategy.hpp"
#include "fsdp/unit/sharded_model.hpp"

namespace fsdp::bench {
namespace {

struct CheckpointOptions {
  double bytes = 1 << 30;  // fp32 parameter bytes of the model
  int layers = 16;         // parameters of equal size ([rows, 4096] each)
  int repeats = 4;
  std::string directory = "fsdp-bench-checkpoint";
  bool keep = false;
  // The checkpoint also holds Adam's two moments (three times the bytes), and every load is a
  // resume's: into a model whose Adam has no state yet.
  bool adam_state = false;
};

constexpr std::int64_t kColumns = 4096;

std::vector<ParameterInfo> model_parameters(const CheckpointOptions& o) {
  const auto elements = static_cast<std::int64_t>(o.bytes / sizeof(float));
  const std::int64_t rows = std::max<std::int64_t>(1, elements / o.layers / kColumns);
  std::vector<ParameterInfo> parameters;
  for (int l = 0; l < o.layers; ++l) {
    const std::string layer = "layer" + std::to_string(l);
    parameters.push_back({layer + ".weight", {rows, kColumns}, DType::f32, layer, false});
  }
  return parameters;
}

// Every element a function of its parameter and flat index, so a load can be checked.
KOKKOS_INLINE_FUNCTION float value_at(std::int64_t parameter, std::int64_t index) {
  return static_cast<float>((index * 7 + parameter * 13) % 1021) * 0.25f;
}

// Each piece a checkpoint holds, in the file's order: every parameter's shard, then (when the
// optimizer, unless null, has state) every state of every parameter. `which` numbers them.
template <class Visit>
void for_each_piece(ShardedModel<float>& model, const Optimizer<float>* adam, const Visit& visit) {
  std::int64_t which = 0;
  for (std::size_t u = 0; u < model.unit_count(); ++u) {
    for (auto& parameter : model.unit(u).parameters()) {
      visit(which++, parameter.shard(), parameter);
    }
  }
  if (adam == nullptr || adam->state().empty()) {
    return;
  }
  for (const std::string& state : adam->state_names()) {
    for (std::size_t u = 0; u < model.unit_count(); ++u) {
      for (auto& parameter : model.unit(u).parameters()) {
        visit(which++, *adam->state().find(parameter.name(), state), parameter);
      }
    }
  }
}

void fill(ShardedModel<float>& model, const Optimizer<float>* adam) {
  for_each_piece(
      model, adam,
      [](std::int64_t which, const DeviceView<float>& piece, ShardedParameter<float>& parameter) {
        const std::int64_t first = parameter.shard_offset();
        Kokkos::parallel_for(
            "fsdp-bench::fill", Kokkos::RangePolicy<ExecutionSpace>(0, piece.size()),
            KOKKOS_LAMBDA(std::size_t i) {
              piece(i) = value_at(which, first + static_cast<std::int64_t>(i));
            });
      });
  ExecutionSpace().fence();
}

std::int64_t wrong_elements(ShardedModel<float>& model, const Optimizer<float>* adam) {
  std::int64_t wrong = 0;
  for_each_piece(
      model, adam,
      [&](std::int64_t which, const DeviceView<float>& piece, ShardedParameter<float>& parameter) {
        const std::int64_t first = parameter.shard_offset();
        std::int64_t here = 0;
        Kokkos::parallel_reduce(
            "fsdp-bench::check", Kokkos::RangePolicy<ExecutionSpace>(0, piece.size()),
            KOKKOS_LAMBDA(std::size_t i, std::int64_t & count) {
              count += piece(i) != value_at(which, first + static_cast<std::int64_t>(i)) ? 1 : 0;
            },
            here);
        wrong += here;
      });
  model.group().all_reduce(Kokkos::DefaultHostExecutionSpace(), fsdp::host_view(&wrong, 1));
  return wrong;
}

// Gives every parameter Adam's two moments, as a step would have (their values set by fill),
// and the optimizer one step.
void give_adam_state(ShardedModel<float>& model, Optimizer<float>& adam) {
  for (std::size_t u = 0; u < model.unit_count(); ++u) {
    for (auto& parameter : model.unit(u).parameters()) {
      for (const std::string& state : adam.state_names()) {
        adam.state().get(parameter, state);
      }
    }
  }
  adam.set_step_count(1);
}

// Each rank's pieces as (file offset in bytes, host bytes): the unsharded parameters one after
// another, as a plain dump of the model would store them.
struct PlainPiece {
  off_t offset;
  Kokkos::View<float*, Kokkos::HostSpace> host;
};

std::vector<PlainPiece> plain_pieces(ShardedModel<float>& model, const Optimizer<float>* adam) {
  std::vector<PlainPiece> pieces;
  std::int64_t base = 0;
  for_each_piece(
      model, adam,
      [&](std::int64_t, const DeviceView<float>& piece, ShardedParameter<float>& parameter) {
        auto host = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), piece);
        pieces.push_back({static_cast<off_t>((base + parameter.shard_offset()) * sizeof(float)),
                          Kokkos::View<float*, Kokkos::HostSpace>(host)});
        base += parameter.numel();
      });
  return pieces;
}

void check_posix(bool ok, const std::string& what, const std::string& path) {
  if (!ok) {
    throw Error(ErrorKind::io, "checkpoint benchmark: " + what + " '" + path + "' failed");
  }
}

// Writes (or reads) every piece at its offset; writes are fsynced. Returns the seconds taken by
// this rank.
double plain_io(const std::string& path, std::vector<PlainPiece>& pieces, bool write) {
  const double start = MPI_Wtime();
  const int fd = ::open(path.c_str(), write ? O_WRONLY : O_RDONLY);
  check_posix(fd >= 0, "open", path);
  for (PlainPiece& piece : pieces) {
    auto* bytes = reinterpret_cast<char*>(piece.host.data());
    std::size_t left = piece.host.size() * sizeof(float);
    off_t at = piece.offset;
    while (left > 0) {
      const ssize_t n = write ? ::pwrite(fd, bytes, left, at) : ::pread(fd, bytes, left, at);
      check_posix(n > 0, write ? "pwrite to" : "pread from", path);
      bytes += n;
      left -= static_cast<std::size_t>(n);
      at += n;
    }
  }
  check_posix(!write || ::fsync(fd) == 0, "fsync", path);
  check_posix(::close(fd) == 0, "close", path);
  return MPI_Wtime() - start;
}

// Synced pages of the file leave the page cache: the next read comes from the disk.
void drop_from_cache(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  check_posix(fd >= 0, "open", path);
  check_posix(::fdatasync(fd) == 0, "fdatasync", path);
  check_posix(::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED) == 0, "posix_fadvise", path);
  check_posix(::close(fd) == 0, "close", path);
}

// Every timed write and read starts from the same state: nothing dirty waiting to be written
// back (sync), and the files read next not in the page cache.
void settle(ProcessGroup& group, const std::vector<std::string>& paths) {
  group.barrier();
  if (group.rank() == 0) {
    ::sync();
    for (const std::string& path : paths) {
      if (std::filesystem::exists(path)) {
        drop_from_cache(path);
      }
    }
  }
  group.barrier();
}

double timed(ProcessGroup& group, const std::function<void()>& work) {
  group.barrier();
  const double start = MPI_Wtime();
  work();
  double seconds = MPI_Wtime() - start;
  group.all_reduce(Kokkos::DefaultHostExecutionSpace(), fsdp::host_view(&seconds, 1),
                   ReduceOp::max);
  return seconds;
}

void run_checkpoint(const CheckpointOptions& o, const CommonOptions& common) {
  require(o.bytes >= 1 && o.layers >= 1 && o.repeats >= 1,
          "checkpoint: --bytes, --layers and --repeats must be >= 1");
  ProcessGroup world(MPI_COMM_WORLD);
  const int n = world.size();
  const std::string dir = o.directory;
  if (world.rank() == 0) {
    std::filesystem::create_directories(dir);
  }
  world.barrier();
  const std::string checkpoint = dir + "/checkpoint.h5";
  const std::string plain = dir + "/plain.bin";
  const std::string background = dir + "/background.h5";
  const std::vector<ParameterInfo> parameters = model_parameters(o);
  double bytes = 0;
  for (const ParameterInfo& p : parameters) {
    bytes += static_cast<double>(p.numel()) * sizeof(float);
  }
  bytes *= o.adam_state ? 3 : 1;  // the parameters and Adam's two moments

  std::vector<double> save_s, write_s, load_s, read_s, read_new_s;
  // A background save: the time it kept the caller (the snapshot and the file's layout), and the
  // time its finish then waited for the writing, started at once. One BackgroundSave for all the
  // repeats, as a training run keeps one: the first save allocates the snapshot, later ones
  // reuse it.
  std::vector<double> blocked_s, finish_s;
  {
    BackgroundSave background_save;
    const ShardingPlan plan = make_strategy("full")->make_plan(parameters, n);
    ShardedModel<float> saved(world, plan);
    ShardedModel<float> loaded(world, plan);
    Optimizer<float> saved_adam("adam", OptimizerSettings{});
    Optimizer<float> loaded_adam("adam", OptimizerSettings{});
    if (o.adam_state) {
      give_adam_state(saved, saved_adam);
    }
    const Optimizer<float>* saved_optimizer = o.adam_state ? &saved_adam : nullptr;
    Optimizer<float>* loaded_optimizer = o.adam_state ? &loaded_adam : nullptr;
    fill(saved, saved_optimizer);
    std::vector<PlainPiece> pieces = plain_pieces(saved, saved_optimizer);
    // The kernel's write-back throttling depends on what was written just before: the order of
    // the two writes (and of the two reads) alternates between repeats.
    const auto save = [&] {
      settle(world, {checkpoint, plain});
      save_s.push_back(timed(world, [&] {
        save_checkpoint<float>(checkpoint, saved, saved_optimizer, CheckpointState{});
      }));
    };
    const auto write = [&] {
      settle(world, {checkpoint, plain});
      write_s.push_back(timed(world, [&] {
        // A new file, as every checkpoint is (written under a new name, then renamed).
        if (world.rank() == 0) {
          std::filesystem::remove(plain);
          const int fd = ::open(plain.c_str(), O_WRONLY | O_CREAT | O_EXCL, 0644);
          check_posix(fd >= 0 && ::close(fd) == 0, "create", plain);
        }
        world.barrier();
        plain_io(plain, pieces, true);
      }));
    };
    const auto save_in_background = [&] {
      settle(world, {checkpoint, plain, background});
      blocked_s.push_back(timed(world, [&] {
        save_checkpoint_in_background<float>(background_save, background, saved, saved_optimizer,
                                             CheckpointState{});
      }));
      finish_s.push_back(timed(world, [&] { background_save.finish(); }));
    };
    const auto load = [&] {
      loaded_adam.state().clear();  // a resume's new optimizer has none
      settle(world, {checkpoint, plain});
      load_s.push_back(
          timed(world, [&] { load_checkpoint<float>(checkpoint, loaded, loaded_optimizer); }));
    };
    const auto read = [&] {
      settle(world, {checkpoint, plain});
      read_s.push_back(timed(world, [&] { plain_io(plain, pieces, false); }));
    };
    // Into new memory, freed again inside the timing (as a load frees the pieces it replaced).
    const auto read_new = [&] {
      settle(world, {checkpoint, plain});
      read_new_s.push_back(timed(world, [&] {
        std::vector<PlainPiece> fresh;
        for (const PlainPiece& piece : pieces) {
          fresh.push_back({piece.offset, Kokkos::View<float*, Kokkos::HostSpace>(
                                             Kokkos::view_alloc(Kokkos::WithoutInitializing,
                                                                "fsdp-bench::new_read"),
                                             piece.host.size())});
        }
        plain_io(plain, fresh, false);
      }));
    };
    for (int r = 0; r < o.repeats; ++r) {
      if (r % 2 == 0) {
        save(), save_in_background(), write(), load(), read(), read_new();
      } else {
        write(), save_in_background(), save(), read_new(), read(), load();
      }
      require(wrong_elements(loaded, loaded_optimizer) == 0,
              "checkpoint benchmark: the load read wrong values");
    }
  }

  // Resharded: the file of n ranks read by n - 1, against a file those n - 1 wrote themselves.
  std::vector<double> same_s, reshard_s;
  if (n >= 2) {
    const bool reader = world.rank() < n - 1;
    ProcessGroup readers = world.split(reader ? 0 : 1, world.rank());
    const std::string own = dir + "/checkpoint-" + std::to_string(n - 1) + ".h5";
    if (reader) {
      const ShardingPlan plan = make_strategy("full")->make_plan(parameters, n - 1);
      ShardedModel<float> model(readers, plan);
      fill(model, nullptr);
      save_checkpoint<float>(own, model, nullptr, CheckpointState{});
      for (int r = 0; r < o.repeats; ++r) {
        settle(readers, {own, checkpoint});
        same_s.push_back(timed(readers, [&] { load_checkpoint<float>(own, model, nullptr); }));
        settle(readers, {own, checkpoint});
        reshard_s.push_back(
            timed(readers, [&] { load_checkpoint<float>(checkpoint, model, nullptr); }));
        require(wrong_elements(model, nullptr) == 0,
                "checkpoint benchmark: the resharded load was wrong");
      }
    }
    fsdp_apps::barrier_without_spinning(world);  // the idle rank waits without taking a core
    if (world.rank() == 0 && !o.keep) {
      std::filesystem::remove(own);
    }
  }
  if (world.rank() == 0 && !o.keep) {
    std::filesystem::remove(checkpoint);
    std::filesystem::remove(plain);
    std::filesystem::remove(background);
  }

  const double save = median(save_s), write = median(write_s);
  const double load = median(load_s), read = median(read_s), read_new = median(read_new_s);
  nlohmann::json result = {{"benchmark", "checkpoint"},
                           {"ranks", n},
                           {"bytes", bytes},
                           {"adam_state", o.adam_state},
                           {"save_s", save},
                           {"save_gb_per_s", bytes / save / 1e9},
                           {"posix_write_gb_per_s", bytes / write / 1e9},
                           {"save_ratio", write / save},
                           {"load_s", load},
                           {"load_gb_per_s", bytes / load / 1e9},
                           {"posix_read_gb_per_s", bytes / read / 1e9},
                           {"load_ratio", read / load},
                           {"posix_read_new_memory_gb_per_s", bytes / read_new / 1e9},
                           {"load_ratio_new_memory", read_new / load},
                           {"background_blocked_s", median(blocked_s)},
                           {"background_first_blocked_s", blocked_s.front()},
                           {"background_finish_wait_s", median(finish_s)},
                           {"background_blocked_over_save", median(blocked_s) / save}};
  double same = 0, reshard = 0;
  if (n >= 2) {
    // The readers' medians, from rank 0 (a reader).
    same = world.rank() == 0 ? median(same_s) : 0;
    reshard = world.rank() == 0 ? median(reshard_s) : 0;
    result["same_size_load_s"] = same;
    result["resharded_load_s"] = reshard;
    result["reshard_ratio"] = reshard / same;
  }
  emit(common, world.rank(), result, [&] {
    std::printf(
        "checkpoint: %.2f GB of fp32 parameters%s (%d x [%lld, %lld]) on %s, median of "
        "%d\n",
        bytes / 1e9, o.adam_state ? " and Adam's two moments, loaded by a resume" : "", o.layers,
        static_cast<long long>(parameters[0].shape[0]), static_cast<long long>(kColumns),
        fsdp_apps::count_of(n, "rank").c_str(), o.repeats);
    std::printf("  save %.2f s, %.2f GB/s; POSIX pwrite+fsync %.2f GB/s: ratio %.2f (goal 0.7)\n",
                save, bytes / save / 1e9, bytes / write / 1e9, write / save);
    std::printf("  load %.2f s, %.2f GB/s; POSIX pread %.2f GB/s: ratio %.2f (goal 0.7)\n", load,
                bytes / load / 1e9, bytes / read / 1e9, read / load);
    std::printf("    POSIX pread into new memory %.2f GB/s: ratio %.2f\n", bytes / read_new / 1e9,
                read_new / load);
    std::printf(
        "  background save: blocked %.3f s (the first, allocating its snapshot: %.3f s), %.2f "
        "of the save (goal 0.1); finish waited %.2f s more for the writing\n",
        median(blocked_s), blocked_s.front(), median(blocked_s) / save, median(finish_s));
    if (n >= 2) {
      std::printf(
          "  %s load the file of %s in %.2f s, their own in %.2f s: %.2fx "
          "(goal 1.2x or less)\n",
          fsdp_apps::count_of(n - 1, "rank").c_str(), fsdp_apps::count_of(n, "rank").c_str(),
          reshard, same, reshard / same);
    }
  });
}

}  // namespace

void add_checkpoint(CLI::App& app, const CommonOptions& common) {
  auto options = std::make_shared<CheckpointOptions>();
  CLI::App* sub = app.add_subcommand(
      "checkpoint",
      "save and load throughput of a sharded checkpoint against plain POSIX I/O of the same "
      "bytes, and a resharded load (N ranks' file read by N - 1)");
  sub->add_option("--bytes", options->bytes, "fp32 parameter bytes of the model")
      ->capture_default_str();
  sub->add_option("--layers", options->layers, "parameters of equal size")->capture_default_str();
  sub->add_option("--repeats", options->repeats, "timed repeats (the median is reported)")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  sub->add_option("--dir", options->directory,
                  "where the files are written (on the file system to measure)")
      ->capture_default_str();
  sub->add_flag("--keep", options->keep, "keep the files");
  sub->add_flag("--adam-state", options->adam_state,
                "the checkpoint also holds Adam's two moments (three times the bytes), and each "
                "load is a resume's: into a model whose new Adam has no state yet");
  sub->callback([options, &common] { run_checkpoint(*options, common); });
}

}  // namespace fsdp::bench
