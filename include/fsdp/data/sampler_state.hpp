// SamplerState: where a DistributedSampler stands, as checkpoints store it.
#pragma once

#include <array>
#include <cstdint>
#include <string>

namespace fsdp {

// The sampler's position in training: which permutation (seed, epoch) and how far into that
// epoch's global order the job got (samples consumed by all ranks together). Nothing in it is
// per rank, so a job can resume on another number of ranks (strided partition; see
// docs/sampler.md for the contiguous one).
//
// dataset_size and replicas are not part of the position: they are recorded so that restoring
// into a sampler over another dataset is an error instead of a silent change of order, and so that
// the contiguous partition, whose order depends on the number of replicas, can check it.
struct SamplerState {
  std::uint64_t seed = 0;
  std::int64_t epoch = 0;
  // Global positions of this epoch already taken; with SamplerOptions::batch_size a multiple of
  // it (or the epoch's end), so that a restore continues with whole global batches.
  std::int64_t samples_consumed = 0;
  std::int64_t dataset_size = 0;
  std::int64_t replicas = 0;  // the world size that wrote the state

  // A fixed layout of 64-bit words, for a checkpoint's integer dataset or attribute:
  // {format version, seed, epoch, samples_consumed, dataset_size, replicas}.
  static constexpr std::int64_t kFormatVersion = 1;
  static constexpr std::size_t kWords = 6;
  std::array<std::int64_t, kWords> to_words() const;
  // Throws fsdp::Error when the version is unknown or a field is out of range.
  static SamplerState from_words(const std::array<std::int64_t, kWords>& words);

  // "seed=.. epoch=.. samples_consumed=.. dataset_size=.. replicas=..", for logs and messages.
  std::string to_string() const;

  bool operator==(const SamplerState& other) const;
  bool operator!=(const SamplerState& other) const { return !(*this == other); }
};

}  // namespace fsdp
