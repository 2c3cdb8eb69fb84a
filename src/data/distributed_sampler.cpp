#include "fsdp/data/distributed_sampler.hpp"

#include <algorithm>
#include <array>
#include <vector>

#include "fsdp/comm/configuration_agreement.hpp"
#include "fsdp/comm/process_group.hpp"
#include "fsdp/core/ceil_div.hpp"
#include "fsdp/core/enum_names.hpp"
#include "fsdp/core/error.hpp"

namespace fsdp {

namespace {

const std::string kWho = "fsdp::DistributedSampler: ";

void check_arguments(std::int64_t dataset_size, int replicas, int rank) {
  // The checks below test first and build their message only on failure (not with require(),
  // which takes a built message): samplers are cheap to make, and index() runs per sample.
  if (dataset_size < 1) {
    throw Error(kWho + "dataset_size must be at least 1, got " + std::to_string(dataset_size));
  }
  if (replicas < 1) {
    throw Error(kWho + "replicas must be at least 1 (a single replica is valid), got " +
                std::to_string(replicas));
  }
  if (rank < 0 || rank >= replicas) {
    throw Error(kWho + "rank " + std::to_string(rank) + " is out of range for " +
                std::to_string(replicas) + " replicas: it must be in [0, " +
                std::to_string(replicas - 1) + "]");
  }
}

// Separates the contiguous partition's per-block permutations of one epoch from each other.
std::uint64_t block_stream(std::int64_t epoch, int rank) {
  return IndexPermutation::mix(static_cast<std::uint64_t>(epoch) ^ 0x3c6ef372fe94f82bULL) +
         static_cast<std::uint64_t>(rank);
}

const EnumNames<Partition>& partition_names() {
  static const EnumNames<Partition> names(
      "sampler partition",
      {{Partition::strided, "strided"}, {Partition::contiguous, "contiguous"}});
  return names;
}

}  // namespace

const char* name_of(Partition partition) {
  return partition_names().name_of(partition);
}

Partition parse_partition(const std::string& name) {
  return partition_names().parse(name);
}

DistributedSampler::DistributedSampler(std::int64_t dataset_size, int replicas, int rank,
                                       const SamplerOptions& options)
    : size_(static_cast<std::uint64_t>(std::max<std::int64_t>(dataset_size, 1))),
      replicas_(replicas),
      rank_(rank),
      options_(options),
      permutation_(1, 0, 0) {
  check_arguments(dataset_size, replicas, rank);
  validate_options();
  start_epoch(0, 0);
}

DistributedSampler::DistributedSampler(const ProcessGroup& group, std::int64_t dataset_size,
                                       const SamplerOptions& options)
    : size_(static_cast<std::uint64_t>(std::max<std::int64_t>(dataset_size, 1))),
      replicas_(group.size()),
      rank_(group.rank()),
      options_(options),
      group_(std::make_shared<ProcessGroup>(group)),
      permutation_(1, 0, 0) {
  // Agree first, check after: every rank then checks the same values and throws together, instead
  // of one rank throwing while the others wait in the broadcast.
  agree_with_ranks(dataset_size);
  check_arguments(dataset_size, replicas_, rank_);
  validate_options();
  start_epoch(0, 0);
}

void DistributedSampler::agree_with_ranks(std::int64_t dataset_size) {
  require_same_configuration(
      Configuration("sampler options")
          .integer("dataset_size", dataset_size)
          .text("partition", name_of(options_.partition))
          .flag("shuffle", options_.shuffle)
          .flag("drop_last", options_.drop_last)
          .text("balance", options_.balance == ContiguousBalance::pad ? "pad" : "uneven")
          .integer("batch_size", options_.batch_size)
          .text("seed", std::to_string(options_.seed)),
      *group_);
}

void DistributedSampler::validate_options() const {
  const std::int64_t batch = options_.batch_size;
  if (batch < 0) {
    throw Error(kWho + "batch_size must be >= 0 (0: no global batch), got " +
                std::to_string(batch));
  }
  if (batch > 0 && options_.partition != Partition::strided) {
    throw Error(kWho + "batch_size " + std::to_string(batch) +
                " needs the strided partition: the contiguous partition's blocks depend on the "
                "number of replicas, so its batches cannot; use the strided partition or "
                "batch_size 0");
  }
  if (batch % replicas_ != 0) {
    throw Error(kWho + "batch_size " + std::to_string(batch) + " cannot be split evenly over " +
                std::to_string(replicas_) + " replicas: give a multiple of " +
                std::to_string(replicas_) + " (each replica takes batch_size / " +
                std::to_string(replicas_) + " samples of a step)");
  }
  if (options_.partition == Partition::contiguous && !options_.drop_last &&
      options_.balance == ContiguousBalance::pad) {
    if (size_ < static_cast<std::uint64_t>(replicas_)) {
      throw Error(
          kWho + "the contiguous partition pads the shorter blocks with their own samples, so " +
          "every one of the " + std::to_string(replicas_) +
          " replicas needs at least one sample, but the dataset has " + std::to_string(size_) +
          "; use the strided partition (it pads across the whole dataset) or drop_last");
    }
  }
}

void DistributedSampler::set_epoch(std::int64_t epoch) {
  if (group_) {
    // Agree first, as the constructor does: a rank on another epoch would visit other samples.
    require_same_configuration(Configuration("sampler epoch").integer("epoch", epoch), *group_);
  }
  if (epoch < 0) {
    throw Error(kWho + "epoch must be >= 0, got " + std::to_string(epoch));
  }
  if (epoch != epoch_) {
    start_epoch(epoch, 0);
  }
}

void DistributedSampler::start_epoch(std::int64_t epoch, std::int64_t samples_consumed) {
  epoch_ = epoch;
  start_ = static_cast<std::uint64_t>(samples_consumed);
  const std::uint64_t n = size_;
  const std::uint64_t replicas = static_cast<std::uint64_t>(replicas_);
  if (options_.partition == Partition::strided) {
    permutation_ = IndexPermutation(n, options_.seed, static_cast<std::uint64_t>(epoch));
    if (options_.batch_size == 0) {
      // Padded (or truncated) after start_ to a multiple of the replicas: lock step for the
      // per-sample loop, at the price of an end that depends on their number.
      const std::uint64_t remaining = start_ >= n ? 0 : n - start_;
      const std::uint64_t per_rank =
          options_.drop_last ? remaining / replicas : ceil_div(remaining, replicas);
      end_ = start_ + per_rank * replicas;
      length_ = static_cast<std::int64_t>(per_rank);
      common_steps_ = length_;
      return;
    }
    // The epoch ends where the dataset (or its last whole global batch) ends, whatever the number
    // of replicas; rank r's positions start_ + r + i * N before the end.
    const auto batch = static_cast<std::uint64_t>(options_.batch_size);
    end_ = options_.drop_last ? n / batch * batch : n;
    const std::uint64_t remaining = start_ >= end_ ? 0 : end_ - start_;
    const auto rank = static_cast<std::uint64_t>(rank_);
    length_ =
        static_cast<std::int64_t>(remaining > rank ? ceil_div(remaining - rank, replicas) : 0);
    common_steps_ = static_cast<std::int64_t>(remaining / replicas);  // the last rank's length
    return;
  }
  const std::uint64_t base = n / replicas;
  const bool last = rank_ == replicas_ - 1;
  const std::uint64_t longest = options_.drop_last ? base : n - (replicas - 1) * base;
  const std::uint64_t own = (last && !options_.drop_last) ? longest : base;
  const std::uint64_t shortest = replicas == 1 ? own : base;
  block_start_ = static_cast<std::uint64_t>(rank_) * base;
  block_length_ = std::max<std::uint64_t>(own, 1);  // an empty block is never indexed
  first_step_ = start_ / replicas;
  permutation_ = IndexPermutation(block_length_, options_.seed, block_stream(epoch, rank_));
  const bool padded = options_.balance == ContiguousBalance::pad;
  const std::uint64_t steps = padded ? longest : own;
  const std::uint64_t common = padded ? longest : shortest;
  length_ = static_cast<std::int64_t>(steps > first_step_ ? steps - first_step_ : 0);
  common_steps_ = static_cast<std::int64_t>(common > first_step_ ? common - first_step_ : 0);
}

std::int64_t DistributedSampler::global_batch() const {
  return options_.batch_size > 0 ? options_.batch_size : replicas_;
}

std::int64_t DistributedSampler::steps() const {
  // Computed, not stored: the sampler stays a handful of words (test_sampler checks its size).
  return options_.batch_size > 0 ? ceil_div(positions_left(), options_.batch_size) : common_steps_;
}

std::int64_t DistributedSampler::positions_left() const {
  // Strided: up to the epoch's end (the padding included); contiguous: one per rank and step.
  if (options_.partition == Partition::strided) {
    return static_cast<std::int64_t>(end_ > start_ ? end_ - start_ : 0);
  }
  return common_steps_ * replicas_;
}

SamplerStep DistributedSampler::step(std::int64_t s) const {
  const std::int64_t steps = this->steps();
  if (s < 0 || s >= steps) {
    throw Error(kWho + "step " + std::to_string(s) + " is out of range: " + std::to_string(steps) +
                " steps are left in epoch " + std::to_string(epoch_) + ", so it must be in [0, " +
                std::to_string(steps) + ")");
  }
  const std::int64_t batch = global_batch();
  const std::int64_t local = batch / replicas_;
  SamplerStep out;
  // Rank r's positions before batch s's are exactly s * local (batch starts are multiples of N).
  out.begin = std::min(s * local, length_);
  out.end = std::min((s + 1) * local, length_);
  out.samples = std::min(batch, positions_left() - s * batch);
  return out;
}

SamplerState DistributedSampler::state_after_steps(std::int64_t s) const {
  const std::int64_t steps = this->steps();
  require(s >= 0 && s <= steps,
          kWho + "state_after_steps(" + std::to_string(s) +
              "): the steps taken must be in [0, steps() = " + std::to_string(steps) + "]");
  SamplerState state = state_after(0);
  state.samples_consumed += std::min(s * global_batch(), positions_left());
  return state;
}

std::int64_t DistributedSampler::index(std::int64_t i) const {
  if (i < 0 || i >= length_) {
    throw Error(kWho + "index " + std::to_string(i) + " is out of range: rank " +
                std::to_string(rank_) + " has " + std::to_string(length_) +
                " samples left in epoch " + std::to_string(epoch_) + ", so i must be in [0, " +
                std::to_string(length_) + ")");
  }
  return index_unchecked(i);
}

SamplerState DistributedSampler::state_after(std::int64_t samples_taken) const {
  require(samples_taken >= 0 && samples_taken <= common_steps_,
          kWho + "state_after(" + std::to_string(samples_taken) +
              "): the samples taken by each rank must be in [0, common_steps() = " +
              std::to_string(common_steps_) + "]");
  SamplerState state;
  state.seed = options_.seed;
  state.epoch = epoch_;
  state.samples_consumed = static_cast<std::int64_t>(start_) + samples_taken * replicas_;
  state.dataset_size = static_cast<std::int64_t>(size_);
  state.replicas = replicas_;
  return state;
}

void DistributedSampler::restore(const SamplerState& requested) {
  if (group_) {
    // Agree first, then every rank checks the same state and throws together.
    require_same_configuration(Configuration("sampler state")
                                   .text("seed", std::to_string(requested.seed))
                                   .integer("epoch", requested.epoch)
                                   .integer("samples_consumed", requested.samples_consumed)
                                   .integer("dataset_size", requested.dataset_size)
                                   .integer("replicas", requested.replicas),
                               *group_);
  }
  const SamplerState state = SamplerState::from_words(requested.to_words());  // range checks
  require(static_cast<std::uint64_t>(state.dataset_size) == size_,
          kWho + "cannot restore " + state.to_string() + ": it was written for a dataset of " +
              std::to_string(state.dataset_size) + " samples, this sampler has " +
              std::to_string(size_));
  if (options_.partition == Partition::contiguous && state.samples_consumed > 0) {
    require(state.replicas == replicas_,
            kWho + "cannot restore " + state.to_string() + " on " + std::to_string(replicas_) +
                " replicas: the contiguous partition's blocks depend on the number of replicas, "
                "so a mid-epoch state only continues on the " +
                std::to_string(state.replicas) +
                " that wrote it; use the strided partition to change the number of ranks "
                "mid-epoch, or resume at the start of an epoch");
    require(state.samples_consumed % replicas_ == 0,
            kWho + "cannot restore " + state.to_string() +
                ": with the contiguous partition every rank takes one sample per step, so "
                "samples_consumed must be a multiple of " +
                std::to_string(replicas_));
  }
  if (options_.batch_size > 0 && state.samples_consumed < state.dataset_size) {
    require(state.samples_consumed % options_.batch_size == 0,
            kWho + "cannot restore " + state.to_string() +
                ": it is not at a global batch boundary of batch_size " +
                std::to_string(options_.batch_size) + " (samples_consumed must be a multiple of " +
                "it); was it written with another batch size? Resume with that one");
  }
  options_.seed = state.seed;
  start_epoch(state.epoch, state.samples_consumed);
}

}  // namespace fsdp
