#include "fsdp/data/sampler_state.hpp"

#include <cstring>

#include "fsdp/core/error.hpp"

namespace fsdp {

std::array<std::int64_t, SamplerState::kWords> SamplerState::to_words() const {
  std::int64_t seed_bits = 0;
  std::memcpy(&seed_bits, &seed, sizeof seed_bits);  // the full unsigned range round-trips
  return {kFormatVersion, seed_bits, epoch, samples_consumed, dataset_size, replicas};
}

SamplerState SamplerState::from_words(const std::array<std::int64_t, kWords>& words) {
  require(words[0] == kFormatVersion,
          "fsdp::SamplerState: unknown format version " + std::to_string(words[0]) +
              " (this build reads version " + std::to_string(kFormatVersion) +
              "); the checkpoint was written by another fsdp or is not a sampler state");
  SamplerState state;
  std::memcpy(&state.seed, &words[1], sizeof state.seed);
  state.epoch = words[2];
  state.samples_consumed = words[3];
  state.dataset_size = words[4];
  state.replicas = words[5];
  require(state.epoch >= 0 && state.samples_consumed >= 0 && state.dataset_size >= 1 &&
              state.replicas >= 1,
          "fsdp::SamplerState: invalid state " + state.to_string() +
              ": need epoch >= 0, samples_consumed >= 0, dataset_size >= 1, replicas >= 1");
  return state;
}

std::string SamplerState::to_string() const {
  return "seed=" + std::to_string(seed) + " epoch=" + std::to_string(epoch) +
         " samples_consumed=" + std::to_string(samples_consumed) +
         " dataset_size=" + std::to_string(dataset_size) + " replicas=" + std::to_string(replicas);
}

bool SamplerState::operator==(const SamplerState& other) const {
  return seed == other.seed && epoch == other.epoch && samples_consumed == other.samples_consumed &&
         dataset_size == other.dataset_size && replicas == other.replicas;
}

}  // namespace fsdp
