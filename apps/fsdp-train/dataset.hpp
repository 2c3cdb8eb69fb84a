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

// The text fsdp-train's transformer learns when no --text is given: Debian's fortunes package
// (2.5 MB of English prose, verse, definitions and quotations in 60 files), which
// scripts/install-deps installs. Byte-level, so no tokenizer is downloaded.
inline constexpr const char* kDefaultCorpus = "/usr/share/games/fortunes";

// A text as next-byte prediction samples: windows of seq + 1 bytes, each starting seq bytes after
// the one before, so every byte but the first is a target once per epoch; features(i, j) is the
// byte value (0-255), classes 256, labels 0 (the targets are the window shifted by one). path is
// a file, or a directory whose regular files are joined in name order, leaving out strfile(1)
// indexes (*.dat, binary) and symbolic links (the fortunes package's *.u8 repeat their files).
// max_bytes > 0 keeps only the first max_bytes bytes. Throws fsdp::Error naming the path when it
// cannot be read or holds fewer than two windows.
Dataset read_text(const std::string& path, std::int64_t seq, std::int64_t max_bytes);

// The last round(eval_fraction * samples) samples evaluate (at least one of each side).
Split split(const Dataset& data, double eval_fraction);

}  // namespace fsdp_train
