// BackgroundSave: a checkpoint written while training goes on. The save copies every rank's
// pieces into host memory of its own (the snapshot) and returns; a thread of each rank then sums
// their checksums and writes them into the file, and the ranks publish the file together when
// the caller finishes the save (finish, or a try_finish that finds every rank done). The file is
// the one save_checkpoint writes, byte for byte the same values, published as atomically: until
// it is, path keeps what it held before.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "fsdp/io/checkpoint.hpp"

namespace fsdp {

class BackgroundSave {
 public:
  BackgroundSave();
  // A save still pending is abandoned: its thread is joined, its temporary file removed, and
  // nothing is published (not collective; finish first to keep it). The same for the save of
  // an object assigned over by a move.
  ~BackgroundSave();
  BackgroundSave(BackgroundSave&&) noexcept;
  BackgroundSave& operator=(BackgroundSave&&) noexcept;

  // Whether a save was started and not finished yet.
  bool pending() const;
  // The file the pending (or last) save publishes.
  const std::string& path() const;
  // Host memory this rank holds for snapshots; it is kept for the next save, which reuses it.
  std::int64_t snapshot_bytes() const;

  // Collective over the ranks of the model saved. Never waits for the writing: true when no save
  // is pending, or when every rank's writing has ended and the save was published now (or its
  // failure thrown, as finish throws it); false while any rank still writes. Every rank returns
  // the same.
  bool try_finish();
  // Collective over the ranks of the model saved: waits until every rank's writing has ended,
  // then publishes the file (its checksums, fsync, rename). Error (kind io) on every rank when
  // any rank's writing failed; the save is over then, and path keeps its previous file. Nothing
  // to do when no save is pending.
  void finish();

  struct Job;  // the save in flight: its snapshot, thread and file (background_save in io)

 private:
  std::unique_ptr<Job> job_;

  template <class T>
  friend void save_checkpoint_in_background(BackgroundSave&, const std::string&, ShardedModel<T>&,
                                            const Optimizer<T>*, const CheckpointState&);
};

// Collective over the model's ranks (its group and replicas): save_checkpoint, in the background.
// Finishes the save pending in `save` first (its errors are thrown from here, and no new save
// starts then). Then checks and lays the file out as save_checkpoint does (the same errors, on
// every rank), copies this rank's pieces of the parameters and of the optimizer's state into the
// snapshot, and returns: the model and the optimizer may change from then on. The file is written
// by a thread of each rank meanwhile (POSIX I/O and the checksums; no MPI, no Kokkos), and
// published by save.finish() or a save.try_finish() that returns true.
template <class T>
void save_checkpoint_in_background(BackgroundSave& save, const std::string& path,
                                   ShardedModel<T>& model, const Optimizer<T>* optimizer,
                                   const CheckpointState& state);

extern template void save_checkpoint_in_background<float>(BackgroundSave&, const std::string&,
                                                          ShardedModel<float>&,
                                                          const Optimizer<float>*,
                                                          const CheckpointState&);
extern template void save_checkpoint_in_background<double>(BackgroundSave&, const std::string&,
                                                           ShardedModel<double>&,
                                                           const Optimizer<double>*,
                                                           const CheckpointState&);

}  // namespace fsdp
