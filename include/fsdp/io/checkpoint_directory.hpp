// CheckpointDirectory: the checkpoints of one training run, a pointer to the newest complete one,
// and the rules that keep the directory clean across crashes and restarts.
//
//   <directory>/checkpoint-00000120.h5   one file per saved step (save_checkpoint's layout)
//   <directory>/latest                   one line: the file name of the newest complete one
//
// Every file, the pointer included, is written under a temporary name and renamed once complete
// and synced, so a job killed at any moment leaves "latest" naming a complete checkpoint (or no
// "latest" at all, before the first one). Leftover temporaries ("*.tmp") are removed when the
// directory is opened.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "fsdp/comm/process_group.hpp"
#include "fsdp/io/background_save.hpp"
#include "fsdp/io/checkpoint.hpp"

namespace fsdp {

class CheckpointDirectory {
 public:
  // Collective over group. Creates the directory when it does not exist and removes leftover
  // temporaries of interrupted saves. keep_last > 0 keeps only that many newest checkpoints after
  // each save; 0 keeps all. Error (kind io) on every rank when the directory cannot be made.
  CheckpointDirectory(ProcessGroup group, std::string path, int keep_last = 0);

  const std::string& path() const { return path_; }
  int keep_last() const { return keep_last_; }

  // The file a checkpoint of this step is saved to.
  std::string file_for_step(std::int64_t step) const;

  // Collective: the path of the newest complete checkpoint, or "" when none was saved yet. Error
  // (kind io) on every rank when "latest" names a file that is missing.
  std::string latest();

  // Serial, for tools: what latest() returns, read by this process alone; no directory is
  // created and nothing is removed.
  static std::string find_latest(const std::string& directory);

  // Serial, for tools: whether file (links followed) is one that a CheckpointDirectory of
  // directory replaces or removes: a checkpoint file (checkpoint-<step>.h5, replaced by a save
  // of its step and removed by keep_last), "latest", or a leftover temporary. A run must not
  // read such a file after it has started saving there (fsdp-train refuses it as --init-from).
  // False when file or directory does not exist.
  static bool manages(const std::string& directory, const std::string& file);

  // Serial: every checkpoint file in the directory, oldest step first.
  std::vector<std::string> checkpoints() const;

  // Collective over model.group() (the directory's group): checks now that a save of the model,
  // the optimizer (with its state) and state could be written here, as save checks then (a
  // temporary file created in the directory, room for checkpoint_file_bytes allocated in it, then
  // removed), so that a run fails before its first step rather than at its first save. Error
  // (kind io) on every rank naming the directory: it cannot be written (read-only, no
  // permission), or the checkpoint does not fit (bytes needed and free).
  template <class T>
  void require_room(ShardedModel<T>& model, const Optimizer<T>* optimizer,
                    const CheckpointState& state);

  // Collective over model.group() (the directory's group): saves to file_for_step(state.step),
  // then points "latest" at it, then removes the oldest beyond keep_last. Returns the file. A
  // save in the background still pending is finished first (finish_save).
  template <class T>
  std::string save(ShardedModel<T>& model, const Optimizer<T>* optimizer,
                   const CheckpointState& state);

  // Collective, as save: finishes the save pending (finish_save), then starts one to
  // file_for_step(state.step) in the background (save_checkpoint_in_background) and returns
  // the file. "latest" points at it, and the oldest beyond keep_last go, once it is finished:
  // by finish_save, by a try_finish_save that returns true, or by the next save. Until then
  // "latest" names the previous checkpoint, also when the process dies.
  template <class T>
  std::string save_in_background(ShardedModel<T>& model, const Optimizer<T>* optimizer,
                                 const CheckpointState& state);
  // Collective: publishes the save in the background once every rank has written it, then
  // points "latest" at it; never waits for the writing. Returns the file it published, or ""
  // (nothing pending, or still being written: pending_save() says which). A failed save throws
  // as BackgroundSave::finish does, on every rank.
  std::string try_finish_save();
  // Collective: waits for the save in the background and publishes it (then "latest" points at
  // it). Returns its file, or "" when none was pending. A failed save throws on every rank and
  // leaves "latest" where it was.
  std::string finish_save();
  // Whether a save in the background is still to be finished.
  bool pending_save() const { return background_.pending(); }
  // Host memory held for the snapshots of saves in the background (BackgroundSave).
  std::int64_t snapshot_bytes() const { return background_.snapshot_bytes(); }

 private:
  // Points "latest" at file (published) and removes the oldest beyond keep_last.
  void point_latest_at(const std::string& file);
  template <class T>
  void require_same_group(ShardedModel<T>& model, const char* caller) const;

  ProcessGroup group_;
  std::string path_;
  int keep_last_;
  BackgroundSave background_;
};

extern template void CheckpointDirectory::require_room<float>(ShardedModel<float>&,
                                                              const Optimizer<float>*,
                                                              const CheckpointState&);
extern template void CheckpointDirectory::require_room<double>(ShardedModel<double>&,
                                                               const Optimizer<double>*,
                                                               const CheckpointState&);
extern template std::string CheckpointDirectory::save<float>(ShardedModel<float>&,
                                                             const Optimizer<float>*,
                                                             const CheckpointState&);
extern template std::string CheckpointDirectory::save<double>(ShardedModel<double>&,
                                                              const Optimizer<double>*,
                                                              const CheckpointState&);
extern template std::string CheckpointDirectory::save_in_background<float>(ShardedModel<float>&,
                                                                           const Optimizer<float>*,
                                                                           const CheckpointState&);
extern template std::string CheckpointDirectory::save_in_background<double>(
    ShardedModel<double>&, const Optimizer<double>*, const CheckpointState&);

}  // namespace fsdp
