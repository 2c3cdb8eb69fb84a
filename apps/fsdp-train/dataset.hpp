// The classification data fsdp-train learns: a built-in synthetic task or a user's HDF5 file.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "hash_uniform.hpp"

namespace fsdp_train {

// The most classes fsdp-train takes (--classes, and the labels of a data file: a corrupted label
// must not become millions of classes, gigabytes of output layer).
constexpr std::int64_t kMaxClasses = std::int64_t{1} << 20;

// Samples in rows: features(i, j) = features[i * dim + j]; labels in [0, classes).
struct Dataset {
  std::int64_t samples = 0;
  std::int64_t dim = 0;
  std::int64_t classes = 0;
  std::vector<double> features;
  std::vector<std::int64_t> labels;
  std::string description;
};

// The first `train` samples train, the rest evaluate.
struct Split {
  Dataset train;
  Dataset eval;
};

struct SyntheticOptions {
  std::int64_t samples = 8192;
  std::int64_t dim = 16;
  std::int64_t classes = 4;
  int clusters_per_class = 3;
  double separation = 5.0;  // distance of each cluster's centre from the origin
  std::uint64_t seed = 0;
};

// Points around clusters_per_class centres per class (centres at distance `separation`, unit
// noise per coordinate, approximately normal: a sum of four uniforms). Every value comes from a
// splitmix64 hash of (seed, sample, coordinate), never from std:: distributions, so every rank
// and platform generates the same set. Samples of all classes are interleaved, so any split is
// balanced.
Dataset make_synthetic(const SyntheticOptions& options);

// Reads a 2-D floating-point dataset `features` [samples, dim] and a 1-D integer dataset `labels`
// [samples] from an HDF5 file (any float / integer type; converted by HDF5). classes = max label
// + 1. Throws fsdp::Error naming the file and dataset for a missing file or dataset, a wrong rank
// or type, a shape mismatch, or a negative label.
Dataset read_hdf5(const std::string& path, const std::string& features, const std::string& labels);

// Writes features (fp32) and labels (int32) under those names to a new file (truncated).
void write_hdf5(const Dataset& data, const std::string& path, const std::string& features,
                const std::string& labels);

// The last round(eval_fraction * samples) samples evaluate (at least one of each side).
Split split(const Dataset& data, double eval_fraction);

}  // namespace fsdp_train
