#include "fsdp/io/checkpoint_directory.hpp"

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <system_error>
#include <utility>

#include "fsdp/comm/on_root.hpp"
#include "fsdp/core/error.hpp"
#include "fsdp/core/regular_file.hpp"
#include "fsdp/io/publish_file.hpp"

namespace fsdp {
namespace {

namespace fs = std::filesystem;

constexpr const char* kPrefix = "checkpoint-";
constexpr const char* kSuffix = ".h5";
constexpr const char* kLatest = "latest";
constexpr const char* kTemporary = ".tmp";

bool ends_with(const std::string& text, const std::string& end) {
  return text.size() >= end.size() && text.compare(text.size() - end.size(), end.size(), end) == 0;
}

// The step of a checkpoint file name, or -1 for any other name: one whose step is not a number
// of digits that fits a step (an int64) is not one fsdp wrote, and is left alone (a stray
// "checkpoint-99999999999999999999.h5" made every save with a keep_last fail in std::stoll).
std::int64_t step_of(const std::string& name) {
  const std::string prefix = kPrefix, suffix = kSuffix;
  if (name.size() <= prefix.size() + suffix.size() || name.compare(0, prefix.size(), prefix) != 0 ||
      !ends_with(name, suffix)) {
    return -1;
  }
  const std::string digits =
      name.substr(prefix.size(), name.size() - prefix.size() - suffix.size());
  if (!std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return -1;
  }
  std::int64_t step = -1;
  const auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), step);
  return error == std::errc() && end == digits.data() + digits.size() ? step : -1;
}

// A temporary of a save that may not have finished (temporary_beside: "<target>.XXXXXX.tmp"; the
// older fixed "<target>.tmp" too), removed when a directory is opened.
bool is_leftover_temporary(const std::string& name) {
  return ends_with(name, kTemporary) &&
         (name.compare(0, std::string(kPrefix).size(), kPrefix) == 0 ||
          name.compare(0, std::string(kLatest).size() + 1, std::string(kLatest) + ".") == 0);
}

}  // namespace

CheckpointDirectory::CheckpointDirectory(ProcessGroup group, std::string path, int keep_last)
    : group_(std::move(group)), path_(std::move(path)), keep_last_(keep_last) {
  require(!path_.empty(), "CheckpointDirectory: the directory path is empty");
  require(keep_last_ >= 0,
          "CheckpointDirectory: keep_last must be >= 0 (0 keeps every checkpoint), got " +
              std::to_string(keep_last_));
  on_root(group_, "open checkpoint directory '" + path_ + "'", [&] {
    std::error_code error;
    fs::create_directories(path_, error);
    if (error || !fs::is_directory(path_)) {
      throw Error(ErrorKind::io, "cannot create directory '" + path_ + "'" +
                                     (error ? ": " + error.message() : std::string()));
    }
    // Temporaries of saves that never finished: their checkpoints were never published.
    for (const auto& entry : fs::directory_iterator(path_)) {
      const std::string name = entry.path().filename().string();
      if (is_leftover_temporary(name)) {
        fs::remove(entry.path(), error);
        if (error) {
          throw Error(ErrorKind::io, "cannot remove the leftover temporary '" +
                                         entry.path().string() + "': " + error.message());
        }
      }
    }
    return std::string();
  });
}

std::string CheckpointDirectory::file_for_step(std::int64_t step) const {
  require(step >= 0, "CheckpointDirectory: step must be >= 0, got " + std::to_string(step));
  char name[64];
  std::snprintf(name, sizeof name, "%s%08lld%s", kPrefix, static_cast<long long>(step), kSuffix);
  return (fs::path(path_) / name).string();
}

std::vector<std::string> CheckpointDirectory::checkpoints() const {
  std::vector<std::pair<std::int64_t, std::string>> found;
  std::error_code error;
  for (fs::directory_iterator it(path_, error), end; !error && it != end; it.increment(error)) {
    const std::int64_t step = step_of(it->path().filename().string());
    if (step >= 0) {
      found.emplace_back(step, it->path().string());
    }
  }
  if (error) {
    throw Error(ErrorKind::io,
                "cannot list checkpoint directory '" + path_ + "': " + error.message());
  }
  std::sort(found.begin(), found.end());
  std::vector<std::string> out;
  for (auto& [step, file] : found) {
    out.push_back(std::move(file));
  }
  return out;
}

bool CheckpointDirectory::manages(const std::string& directory, const std::string& file) {
  std::error_code error;
  const fs::path real = fs::canonical(file, error);
  if (error || !same_file(real.parent_path().string(), directory)) {
    return false;
  }
  const std::string name = real.filename().string();
  return step_of(name) >= 0 || name == kLatest || is_leftover_temporary(name);
}

std::string CheckpointDirectory::find_latest(const std::string& directory) {
  const fs::path pointer = fs::path(directory) / kLatest;
  std::error_code error;
  if (fs::exists(pointer, error)) {
    // A FIFO would block the read below.
    require_regular_file(pointer.string(), "checkpoint pointer");
  }
  std::ifstream in(pointer);
  if (!in) {
    if (!fs::is_directory(directory)) {
      throw Error(ErrorKind::io, "'" + directory + "' is not a directory");
    }
    return std::string();  // nothing saved yet
  }
  std::string name;
  std::getline(in, name);
  if (step_of(name) < 0) {
    throw Error(ErrorKind::io, "'" + pointer.string() + "' should name a checkpoint file (" +
                                   kPrefix + "<step>" + kSuffix + "), but holds '" + name + "'");
  }
  const std::string file = (fs::path(directory) / name).string();
  if (!fs::exists(file)) {
    throw Error(ErrorKind::io, "'" + pointer.string() + "' names '" + name +
                                   "', which is missing: restore it or remove '" +
                                   pointer.string() + "' to start afresh");
  }
  return file;
}

std::string CheckpointDirectory::latest() {
  return on_root(group_, "find the latest checkpoint in '" + path_ + "'",
                 [&] { return find_latest(path_); });
}

template <class T>
void CheckpointDirectory::require_room(ShardedModel<T>& model, const Optimizer<T>* optimizer,
                                       const CheckpointState& state) {
  require(model.group().size() == group_.size() && model.group().rank() == group_.rank(),
          "CheckpointDirectory::require_room: the model is sharded over another group than the "
          "directory's");
  const long long bytes = checkpoint_file_bytes(model, optimizer, state);
  on_root(group_, "check that checkpoint directory '" + path_ + "' takes a checkpoint", [&] {
    // A name of the leftover temporaries the constructor removes, should this process die here.
    const std::string probe = temporary_beside(file_for_step(state.step));
    try {
      require_space(probe, bytes);
    } catch (...) {
      std::remove(probe.c_str());
      throw;
    }
    if (std::remove(probe.c_str()) != 0) {
      throw Error(ErrorKind::io, "cannot remove '" + probe + "' after checking the room there");
    }
    return std::string();
  });
}

template <class T>
void CheckpointDirectory::require_same_group(ShardedModel<T>& model, const char* caller) const {
  require(model.group().size() == group_.size() && model.group().rank() == group_.rank(),
          std::string(caller) + ": the model is sharded over another group than the directory's");
}

template <class T>
std::string CheckpointDirectory::save(ShardedModel<T>& model, const Optimizer<T>* optimizer,
                                      const CheckpointState& state) {
  require_same_group(model, "CheckpointDirectory::save");
  finish_save();
  const std::string file = file_for_step(state.step);
  save_checkpoint(file, model, optimizer, state);
  point_latest_at(file);
  return file;
}

template <class T>
std::string CheckpointDirectory::save_in_background(ShardedModel<T>& model,
                                                    const Optimizer<T>* optimizer,
                                                    const CheckpointState& state) {
  require_same_group(model, "CheckpointDirectory::save_in_background");
  finish_save();
  const std::string file = file_for_step(state.step);
  save_checkpoint_in_background(background_, file, model, optimizer, state);
  return file;
}

std::string CheckpointDirectory::try_finish_save() {
  if (!background_.pending()) {
    return std::string();
  }
  if (!background_.try_finish()) {
    return std::string();
  }
  point_latest_at(background_.path());
  return background_.path();
}

std::string CheckpointDirectory::finish_save() {
  if (!background_.pending()) {
    return std::string();
  }
  background_.finish();
  point_latest_at(background_.path());
  return background_.path();
}

void CheckpointDirectory::point_latest_at(const std::string& file) {
  on_root(group_, "point '" + path_ + "/latest' at '" + file + "'", [&] {
    const std::string pointer = (fs::path(path_) / kLatest).string();
    const std::string tmp = temporary_beside(pointer);
    try {
      std::ofstream out(tmp, std::ios::trunc);
      out << fs::path(file).filename().string() << "\n";
      out.close();
      if (!out) {
        throw Error(ErrorKind::io, "cannot write '" + tmp + "'");
      }
      publish_file(tmp, pointer);
    } catch (...) {
      std::remove(tmp.c_str());
      throw;
    }
    if (keep_last_ > 0) {
      std::vector<std::string> all = checkpoints();
      const std::size_t keep = static_cast<std::size_t>(keep_last_);
      for (std::size_t i = 0; i + keep < all.size(); ++i) {
        if (all[i] == file) {
          continue;  // never the one "latest" names (a save of an older step than the others)
        }
        std::error_code error;
        fs::remove(all[i], error);
        if (error) {
          throw Error(ErrorKind::io, "cannot remove the old checkpoint '" + all[i] +
                                         "' (keep_last " + std::to_string(keep_last_) +
                                         "): " + error.message());
        }
      }
    }
    return std::string();
  });
}

template void CheckpointDirectory::require_room<float>(ShardedModel<float>&,
                                                       const Optimizer<float>*,
                                                       const CheckpointState&);
template void CheckpointDirectory::require_room<double>(ShardedModel<double>&,
                                                        const Optimizer<double>*,
                                                        const CheckpointState&);
template std::string CheckpointDirectory::save<float>(ShardedModel<float>&, const Optimizer<float>*,
                                                      const CheckpointState&);
template std::string CheckpointDirectory::save<double>(ShardedModel<double>&,
                                                       const Optimizer<double>*,
                                                       const CheckpointState&);

template std::string CheckpointDirectory::save_in_background<float>(ShardedModel<float>&,
                                                                    const Optimizer<float>*,
                                                                    const CheckpointState&);
template std::string CheckpointDirectory::save_in_background<double>(ShardedModel<double>&,
                                                                     const Optimizer<double>*,
                                                                     const CheckpointState&);

}  // namespace fsdp
