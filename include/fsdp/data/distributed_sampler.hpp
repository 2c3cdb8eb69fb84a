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
  // shuffling), padded by repeating its start up to ceil(size / N) * N positions (or truncated to
  // floor(size / N) * N with drop_last); rank r takes positions r, r + N, r + 2N, ... Every rank
  // gets the same number of samples, and the order does not depend on N, so a job can resume on
  // another number of ranks. The default.
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
};

// The dataset indices (64-bit, in [0, dataset_size)) that this rank visits in the current epoch,
// produced on the fly in O(1) memory from a pseudo-random bijection (IndexPermutation) keyed by
// (seed, epoch). Every rank computes its own indices with no communication; ranks agree because
// they share the seed and epoch.
//
// Typical loop (every rank):
//   DistributedSampler sampler(group, dataset_size, options);
//   sampler.restore(state_from_checkpoint);            // optional
//   for (epoch = sampler.epoch(); epoch < epochs; ++epoch) {
//     sampler.set_epoch(epoch);                         // the same epoch keeps a restored position
//     for (std::int64_t i = 0; i < sampler.length(); i += batch) {
//       ... indices sampler.index(i) .. sampler.index(i + batch - 1) ...
//       checkpoint(sampler.state_after(i + batch));
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
  std::uint64_t seed() const { return seed_; }
  const SamplerOptions& options() const { return options_; }

  // How many indices this rank visits in the rest of the current epoch (all of it unless
  // restored mid-epoch). The same on every rank except in ContiguousBalance::uneven.
  std::int64_t length() const { return length_; }
  // The number of steps every rank can take in lock step: the minimum of length() over ranks
  // (computed locally). Equal to length() except in ContiguousBalance::uneven.
  std::int64_t common_steps() const { return common_steps_; }

  // This rank's i-th index, 0 <= i < length(); throws fsdp::Error otherwise.
  std::int64_t index(std::int64_t i) const;

  // The position after every rank has taken `samples_taken` indices of length() in lock step
  // (0 <= samples_taken <= common_steps()). The same on every rank; what a checkpoint stores.
  SamplerState state_after(std::int64_t samples_taken) const;
  // Continue from a state: its seed, its epoch, and the rest of that epoch's global order (on any
  // number of replicas with the strided partition; on the same number with the contiguous one
  // unless the state is at the start of an epoch). Throws fsdp::Error when the state belongs to
  // another dataset size or cannot be continued here. With a group the call is collective, and
  // every rank throws fsdp::Error (ErrorKind::mismatch) when the ranks pass different states.
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

  std::int64_t index_unchecked(std::int64_t i) const {
    const std::uint64_t step = static_cast<std::uint64_t>(i);
    if (options_.partition == Partition::strided) {
      // Global position; positions past the dataset wrap around to its start (the padding). The
      // division only runs for padded positions.
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
  std::uint64_t seed_;
  std::shared_ptr<ProcessGroup> group_;  // null when built without one

  std::int64_t epoch_ = 0;
  std::uint64_t start_ = 0;  // global positions of this epoch consumed before this run
  // Derived from the above by start_epoch().
  IndexPermutation permutation_;  // of the dataset (strided) or of this rank's block (contiguous)
  std::uint64_t block_start_ = 0;
  std::uint64_t block_length_ = 1;
  std::uint64_t first_step_ = 0;  // contiguous: start_ / replicas_
  std::int64_t length_ = 0;
  std::int64_t common_steps_ = 0;
};

}  // namespace fsdp
