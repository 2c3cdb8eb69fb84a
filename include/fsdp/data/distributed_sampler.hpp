// DistributedSampler: which dataset indices each rank visits in an epoch.
#pragma once

#include <cstdint>
#include <iterator>
#include <memory>
#include <string>

#include "fsdp/data/index_permutation.hpp"
#include "fsdp/data/sampler_state.hpp"

namespace fsdp {

class ProcessGroup;

// How the dataset is divided between replicas. docs/sampler.md compares them.
enum class Partition {
  // PyTorch's DistributedSampler: one global order (a permutation of the whole dataset when
  // shuffling); rank r takes positions r, r + N, r + 2N, ... of it. The order does not depend on
  // N, so a job can resume on another number of ranks. Where the epoch ends depends on
  // SamplerOptions::batch_size: without one it is padded by repeating its start up to
  // ceil(size / N) * N positions (or truncated to floor(size / N) * N with drop_last), which
  // depends on N; with one it ends at the dataset's end (or at the last whole global batch with
  // drop_last), whatever N. The default.
  strided,
  // Each replica gets one contiguous block [r * B, (r + 1) * B) with B = floor(size / N); without
  // drop_last the last block also takes the remainder. Shuffling permutes within the block only:
  // a sample never moves between ranks, which keeps each rank's reads local (one file range).
  contiguous,
};

// In the contiguous partition without drop_last the last block is longer than the others. Ranks
// that run different numbers of steps hang the collectives of a training loop, so by default the
// shorter blocks are padded.
enum class ContiguousBalance {
  // Every rank runs as many steps as the longest block; the shorter blocks repeat their own start.
  pad,
  // Each rank iterates its own block once (the seed's behaviour). length() differs between
  // ranks: a training loop must stop after common_steps() steps on every rank.
  uneven,
};

const char* name_of(Partition partition);
// "strided" or "contiguous"; throws fsdp::Error naming the valid choices otherwise.
Partition parse_partition(const std::string& name);

struct SamplerOptions {
  bool shuffle = true;
  bool drop_last = false;
  std::uint64_t seed = 0;
  Partition partition = Partition::strided;
  ContiguousBalance balance = ContiguousBalance::pad;  // contiguous partition only
  // The global batch: the samples of one training step over every rank together (strided
  // partition only; a multiple of the replicas, each rank takes batch_size / N of them).
  //  0 (the default): no batches, PyTorch's DistributedSampler: the epoch is padded (or
  //    truncated) to a multiple of N, so its last samples, and with them the last global batch a
  //    training loop forms, depend on the number of ranks.
  //  > 0: the epoch is cut into global batches that depend on the dataset size, the seed, the
  //    epoch and batch_size only: batch s is positions [s * batch_size, (s + 1) * batch_size) of
  //    the epoch's order, the last one short when batch_size does not divide the dataset (dropped
  //    with drop_last), never padded. Rank r takes positions s * batch_size + r + j * N of batch
  //    s, so a short last batch gives some ranks one sample less than others (or none): the
  //    loop weights each rank's mean by its share, (end - begin) * N / samples of step(s)
  //    (docs/sampler.md, "Global batches"). A job stopped at N ranks and resumed at M takes
  //    exactly the batches an uninterrupted one takes.
  std::int64_t batch_size = 0;
};

// One training step of one rank in a sampler's current epoch (DistributedSampler::step).
struct SamplerStep {
  std::int64_t begin = 0;    // this rank's samples are index(i) for i in [begin, end)
  std::int64_t end = 0;      // end - begin may differ by one between ranks, or be 0 (short batch)
  std::int64_t samples = 0;  // the global batch's samples, over every rank
};

// The dataset indices (64-bit, in [0, dataset_size)) that this rank visits in the current epoch,
// produced on the fly in O(1) memory from a pseudo-random bijection (IndexPermutation) keyed by
// (seed, epoch). Every rank computes its own indices with no communication; ranks agree because
// they share the seed and epoch.
//
// Typical loop (every rank), with options.batch_size the global batch:
//   DistributedSampler sampler(group, dataset_size, options);
//   sampler.restore(state_from_checkpoint);            // optional
//   for (epoch = sampler.epoch(); epoch < epochs; ++epoch) {
//     sampler.set_epoch(epoch);                         // the same epoch keeps a restored position
//     for (std::int64_t s = 0; s < sampler.steps(); ++s) {
//       const SamplerStep step = sampler.step(s);
//       ... indices sampler.index(step.begin) .. sampler.index(step.end - 1), each rank's mean
//           loss weighted by (step.end - step.begin) * N / step.samples ...
//       checkpoint(sampler.state_after_steps(s + 1));
//     }
//   }
class DistributedSampler {
 public:
  // A sampler for replica `rank` of `replicas`, with no communication: the caller guarantees that
  // every rank passes the same dataset_size and options. 1 <= dataset_size, 1 <= replicas,
  // 0 <= rank < replicas.
  DistributedSampler(std::int64_t dataset_size, int replicas, int rank,
                     const SamplerOptions& options = {});
  // replicas and rank from group; collective over group. dataset_size and the options (the seed
  // too) must be the same on every rank, else every rank throws fsdp::Error (ErrorKind::mismatch)
  // naming the first that differs ("seed is 1 on rank 0 but 2 on rank 1"). set_epoch and restore
  // are collective and check their arguments the same way.
  DistributedSampler(const ProcessGroup& group, std::int64_t dataset_size,
                     const SamplerOptions& options = {});

  // Starts epoch `epoch` (>= 0) from its beginning, or keeps the position when epoch is already
  // the current one (so that the loop above does not lose a restored position). With a group the
  // call is collective, and every rank throws fsdp::Error (ErrorKind::mismatch) when the ranks
  // pass different epochs.
  void set_epoch(std::int64_t epoch);
  std::int64_t epoch() const { return epoch_; }

  std::int64_t dataset_size() const { return static_cast<std::int64_t>(size_); }
  int replicas() const { return replicas_; }
  int rank() const { return rank_; }
  std::uint64_t seed() const { return options_.seed; }
  const SamplerOptions& options() const { return options_; }

  // How many indices this rank visits in the rest of the current epoch (all of it unless
  // restored mid-epoch). The same on every rank except in ContiguousBalance::uneven and with a
  // batch_size that leaves a short last batch (ranks then differ by one).
  std::int64_t length() const { return length_; }
  // The number of indices every rank can take in lock step: the minimum of length() over ranks
  // (computed locally). Equal to length() except where length() differs between ranks.
  std::int64_t common_steps() const { return common_steps_; }

  // The global batch: options().batch_size, or one sample per rank (replicas()) without one.
  std::int64_t global_batch() const;
  // The training steps (global batches) left in the current epoch, the same on every rank: with a
  // batch_size, ceil(rest / batch_size) (floor with drop_last); without one, common_steps().
  std::int64_t steps() const;
  // This rank's share of step s (0 <= s < steps()) and the global batch's size; throws
  // fsdp::Error otherwise.
  SamplerStep step(std::int64_t s) const;
  // The position once steps [0, s) of the rest of the epoch are done on every rank
  // (0 <= s <= steps()): what a checkpoint after step s - 1 stores. The same on every rank.
  SamplerState state_after_steps(std::int64_t s) const;

  // This rank's i-th index, 0 <= i < length(); throws fsdp::Error otherwise.
  std::int64_t index(std::int64_t i) const;

  // The position after every rank has taken `samples_taken` indices of length() in lock step
  // (0 <= samples_taken <= common_steps()). The same on every rank; what a checkpoint stores.
  SamplerState state_after(std::int64_t samples_taken) const;
  // Continue from a state: its seed, its epoch, and the rest of that epoch's global order (on any
  // number of replicas with the strided partition; on the same number with the contiguous one
  // unless the state is at the start of an epoch). Throws fsdp::Error when the state belongs to
  // another dataset size or cannot be continued here (with a batch_size: a position inside a
  // global batch, e.g. one written with another batch size). With a group the call is collective,
  // and every rank throws fsdp::Error (ErrorKind::mismatch) when the ranks pass different states.
  void restore(const SamplerState& state);

  class Iterator {
   public:
    using iterator_category = std::input_iterator_tag;
    using value_type = std::int64_t;
    using difference_type = std::int64_t;
    using pointer = const std::int64_t*;
    using reference = std::int64_t;

    Iterator(const DistributedSampler* sampler, std::int64_t i) : sampler_(sampler), i_(i) {}
    std::int64_t operator*() const { return sampler_->index_unchecked(i_); }
    Iterator& operator++() {
      ++i_;
      return *this;
    }
    Iterator operator++(int) {
      Iterator old = *this;
      ++i_;
      return old;
    }
    bool operator==(const Iterator& other) const { return i_ == other.i_; }
    bool operator!=(const Iterator& other) const { return i_ != other.i_; }

   private:
    const DistributedSampler* sampler_;
    std::int64_t i_;
  };
  // This rank's indices for the rest of the epoch: for (std::int64_t index : sampler) ...
  Iterator begin() const { return Iterator(this, 0); }
  Iterator end() const { return Iterator(this, length_); }

 private:
  void validate_options() const;
  void agree_with_ranks(std::int64_t dataset_size);
  void start_epoch(std::int64_t epoch, std::int64_t samples_consumed);
  // Global positions left in the epoch over every rank (padding included).
  std::int64_t positions_left() const;

  std::int64_t index_unchecked(std::int64_t i) const {
    const std::uint64_t step = static_cast<std::uint64_t>(i);
    if (options_.partition == Partition::strided) {
      // Global position; positions past the dataset wrap around to its start (the padding, only
      // without a batch_size). The division only runs for padded positions.
      std::uint64_t position =
          start_ + static_cast<std::uint64_t>(rank_) + step * static_cast<std::uint64_t>(replicas_);
      position = position < size_ ? position : position % size_;
      return static_cast<std::int64_t>(options_.shuffle ? permutation_(position) : position);
    }
    std::uint64_t in_block = first_step_ + step;
    in_block = in_block < block_length_ ? in_block : in_block % block_length_;  // padding wraps
    return static_cast<std::int64_t>(block_start_ +
                                     (options_.shuffle ? permutation_(in_block) : in_block));
  }

  std::uint64_t size_;
  int replicas_;
  int rank_;
  SamplerOptions options_;
  std::shared_ptr<ProcessGroup> group_;  // null when built without one

  std::int64_t epoch_ = 0;
  std::uint64_t start_ = 0;  // global positions of this epoch consumed before this run
  // Derived from the above by start_epoch().
  std::uint64_t end_ = 0;  // strided: where the epoch's positions end (padded, truncated or size)
  IndexPermutation permutation_;  // of the dataset (strided) or of this rank's block (contiguous)
  std::uint64_t block_start_ = 0;
  std::uint64_t block_length_ = 1;
  std::uint64_t first_step_ = 0;  // contiguous: start_ / replicas_
  std::int64_t length_ = 0;
  std::int64_t common_steps_ = 0;
};

}  // namespace fsdp
