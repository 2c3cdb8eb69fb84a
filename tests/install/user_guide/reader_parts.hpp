// What docs/user-guide.md leaves to the reader, for the test that builds the guide's code
// (docs_user_guide): a model's initial values, its data and its layers.
#pragma once

#include <cstdint>
#include <fsdp/fsdp.hpp>

inline float my_initial_value(std::int64_t) {
  return 0.0f;
}

inline const std::int64_t dataset_size = 1024;
inline const std::int64_t epochs = 2;
inline const std::int64_t local_batch = 32;

struct Batch {};
inline Batch load_batch(const fsdp::DistributedSampler&, std::int64_t, std::int64_t) {
  return {};
}

template <class... Args>
void my_layer_forward(const Args&...) {}
template <class... Args>
void my_layer_backward(const Args&...) {}
