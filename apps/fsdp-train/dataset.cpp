#include "dataset.hpp"

#include <hdf5.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>

#include "fsdp/core/error.hpp"
#include "fsdp/core/regular_file.hpp"
#include "fsdp/core/text.hpp"
#include "fsdp/io/hdf5_handle.hpp"
#include "fsdp/io/hdf5_storage.hpp"
#include "fsdp/io/publish_file.hpp"

namespace fsdp_train {
namespace {

// Approximately standard normal: a sum of four uniforms, centred and scaled to variance 1.
double normalish(std::uint64_t seed, std::uint64_t a, std::uint64_t b, std::uint64_t c) {
  double sum = 0;
  for (std::uint64_t k = 0; k < 4; ++k) {
    sum += hash_uniform(seed, a, b, c * 4 + k);
  }
  return (sum - 2.0) * std::sqrt(3.0);
}

// ---- HDF5: every return code checked, errors name the file and the object ----

using fsdp::hdf5::Handle;
using fsdp::hdf5::QuietErrorStack;

herr_t collect_name(hid_t, const char* name, const H5L_info_t*, void* names) {
  static_cast<std::vector<std::string>*>(names)->push_back(name);
  return 0;
}

std::string names_in(const fsdp::hdf5::Checker& h5, hid_t file) {
  std::vector<std::string> names;
  hsize_t index = 0;
  h5.check_status(H5Literate(file, H5_INDEX_NAME, H5_ITER_INC, &index, collect_name, &names),
                  "H5Literate", "the root group");
  if (names.empty()) {
    return "the file has no datasets";
  }
  for (auto& name : names) {
    name = "'" + name + "'";
  }
  return "the file has " + fsdp::join(names);
}

struct OpenDataset {
  Handle dataset;
  std::vector<hsize_t> extents;
};

// Opens dataset `name` and checks its rank and type class. The dataset is closed on every path,
// a refusal included: one left open keeps the file open until HDF5's exit handler.
OpenDataset open_dataset(const fsdp::hdf5::Checker& h5, hid_t file, const std::string& name,
                         int rank, H5T_class_t type_class, const char* what) {
  const htri_t exists = H5Lexists(file, name.c_str(), H5P_DEFAULT);
  h5.check_status(exists, "H5Lexists", "'" + name + "'");
  if (exists == 0) {
    throw fsdp::Error("no dataset '" + name + "' in '" + h5.path() + "' (" + what + "); " +
                      names_in(h5, file));
  }
  const std::string object = "dataset '" + name + "'";
  OpenDataset opened{
      Handle(h5.check(H5Dopen2(file, name.c_str(), H5P_DEFAULT), "H5Dopen2", object), H5Dclose),
      {}};
  const hid_t dataset = opened.dataset.get();
  Handle type(h5.check(H5Dget_type(dataset), "H5Dget_type", object), H5Tclose);
  const H5T_class_t stored = H5Tget_class(type.get());
  h5.check_status(stored == H5T_NO_CLASS ? -1 : 0, "H5Tget_class", object);
  if (stored != type_class) {
    throw fsdp::Error("dataset '" + name + "' in '" + h5.path() + "' (" + what + ") must hold " +
                      (type_class == H5T_FLOAT ? "floating-point" : "integer") + " values");
  }
  Handle space(h5.check(H5Dget_space(dataset), "H5Dget_space", object), H5Sclose);
  const int dims = H5Sget_simple_extent_ndims(space.get());
  h5.check_status(dims, "H5Sget_simple_extent_ndims", object);
  if (dims != rank) {
    throw fsdp::Error("dataset '" + name + "' in '" + h5.path() + "' (" + what + ") has " +
                      std::to_string(dims) + " dimensions; it must have " + std::to_string(rank) +
                      (rank == 2 ? " ([samples, features])" : " ([samples])"));
  }
  opened.extents.resize(static_cast<std::size_t>(rank));
  h5.check_status(H5Sget_simple_extent_dims(space.get(), opened.extents.data(), nullptr),
                  "H5Sget_simple_extent_dims", object);
  return opened;
}

// Writes one dataset of `rank` dimensions (extents) stored as file_type from memory of
// memory_type.
void write_dataset(const fsdp::hdf5::Checker& h5, hid_t file, const std::string& name, int rank,
                   const hsize_t* extents, hid_t file_type, hid_t memory_type, const void* values) {
  const std::string object = "dataset '" + name + "'";
  Handle space(h5.check(H5Screate_simple(rank, extents, nullptr), "H5Screate_simple", object),
               H5Sclose);
  Handle set(h5.check(H5Dcreate2(file, name.c_str(), file_type, space.get(), H5P_DEFAULT,
                                 H5P_DEFAULT, H5P_DEFAULT),
                      "H5Dcreate2", object),
             H5Dclose);
  h5.check_status(H5Dwrite(set.get(), memory_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, values),
                  "H5Dwrite", object);
  h5.check_status(set.close(), "H5Dclose", object);
}

}  // namespace

Dataset make_synthetic(const SyntheticOptions& o) {
  fsdp::require(o.samples >= 2 && o.dim >= 1 && o.classes >= 2 && o.clusters_per_class >= 1,
                "synthetic data needs at least 2 samples, 1 feature, 2 classes and 1 cluster");
  const std::int64_t centres = o.classes * o.clusters_per_class;
  // Centre c: a random direction (normal coordinates, normalized) at distance `separation`.
  std::vector<double> centre(static_cast<std::size_t>(centres * o.dim));
  for (std::int64_t c = 0; c < centres; ++c) {
    double norm = 0;
    for (std::int64_t j = 0; j < o.dim; ++j) {
      const double x =
          normalish(o.seed, 1, static_cast<std::uint64_t>(c), static_cast<std::uint64_t>(j));
      centre[static_cast<std::size_t>(c * o.dim + j)] = x;
      norm += x * x;
    }
    norm = std::sqrt(norm);
    for (std::int64_t j = 0; j < o.dim; ++j) {
      centre[static_cast<std::size_t>(c * o.dim + j)] *= o.separation / std::max(norm, 1e-12);
    }
  }
  Dataset data;
  data.samples = o.samples;
  data.dim = o.dim;
  data.classes = o.classes;
  data.features.resize(static_cast<std::size_t>(o.samples * o.dim));
  data.labels.resize(static_cast<std::size_t>(o.samples));
  for (std::int64_t i = 0; i < o.samples; ++i) {
    const auto sample = static_cast<std::uint64_t>(i);
    const std::int64_t label = i % o.classes;
    const auto cluster = static_cast<std::int64_t>(hash_uniform(o.seed, 2, sample, 0) *
                                                   static_cast<double>(o.clusters_per_class));
    const std::int64_t c = label * o.clusters_per_class + cluster;
    data.labels[static_cast<std::size_t>(i)] = label;
    for (std::int64_t j = 0; j < o.dim; ++j) {
      data.features[static_cast<std::size_t>(i * o.dim + j)] =
          centre[static_cast<std::size_t>(c * o.dim + j)] +
          normalish(o.seed, 3, sample, static_cast<std::uint64_t>(j));
    }
  }
  data.description = "synthetic: " + std::to_string(o.samples) + " samples, " +
                     std::to_string(o.dim) + " features, " + std::to_string(o.classes) +
                     " classes (" + std::to_string(o.clusters_per_class) +
                     " clusters each), seed " + std::to_string(o.seed);
  return data;
}

Dataset read_hdf5(const std::string& path, const std::string& features, const std::string& labels) {
  fsdp::require_regular_file(path, "data file");
  QuietErrorStack quiet;
  const fsdp::hdf5::Checker h5(path, "data file '" + path + "'");
  const htri_t is_hdf5 = H5Fis_hdf5(path.c_str());
  if (is_hdf5 <= 0) {
    throw fsdp::Error("data file '" + path + "' is not an HDF5 file");
  }
  Handle file(h5.check(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), "H5Fopen", "the file"),
              H5Fclose);
  const OpenDataset feature_set =
      open_dataset(h5, file.get(), features, 2, H5T_FLOAT, "features, --features");
  const OpenDataset label_set =
      open_dataset(h5, file.get(), labels, 1, H5T_INTEGER, "labels, --labels");
  const std::vector<hsize_t>& fx = feature_set.extents;
  const std::vector<hsize_t>& lx = label_set.extents;
  if (fx[0] != lx[0]) {
    throw fsdp::Error("shape mismatch in '" + path + "': features '" + features + "' has " +
                      std::to_string(fx[0]) + " samples (rows) but labels '" + labels + "' has " +
                      std::to_string(lx[0]) + "; they must be equal");
  }
  if (fx[0] < 2 || fx[1] < 1) {
    throw fsdp::Error("features '" + features + "' in '" + path + "' is [" + std::to_string(fx[0]) +
                      ", " + std::to_string(fx[1]) +
                      "]; it needs at least 2 samples and 1 feature");
  }
  // The declared extents decide the allocation: refuse what could never fit in this machine's
  // memory (a damaged or hostile file can declare anything) before allocating.
  const double bytes =
      (static_cast<double>(fx[0]) * static_cast<double>(fx[1]) + static_cast<double>(fx[0])) *
      sizeof(double);
  const double memory =
      static_cast<double>(sysconf(_SC_PHYS_PAGES)) * static_cast<double>(sysconf(_SC_PAGE_SIZE));
  if (bytes > memory) {
    char sizes[96];
    std::snprintf(sizes, sizeof sizes, "%.1f GB, more than this machine's %.1f GB", bytes / 1e9,
                  memory / 1e9);
    throw fsdp::Error("data file '" + path + "' declares features [" + std::to_string(fx[0]) +
                      ", " + std::to_string(fx[1]) + "]: reading it would take " + sizes +
                      " of memory");
  }
  fsdp::hdf5::require_stored_in_file(h5, feature_set.dataset.get(),
                                     "dataset '" + features + "' (features, --features)");
  fsdp::hdf5::require_stored_in_file(h5, label_set.dataset.get(),
                                     "dataset '" + labels + "' (labels, --labels)");
  Dataset data;
  data.samples = static_cast<std::int64_t>(fx[0]);
  data.dim = static_cast<std::int64_t>(fx[1]);
  data.features.resize(static_cast<std::size_t>(data.samples * data.dim));
  data.labels.resize(static_cast<std::size_t>(data.samples));
  h5.check_status(H5Dread(feature_set.dataset.get(), H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL,
                          H5P_DEFAULT, data.features.data()),
                  "H5Dread", "dataset '" + features + "'");
  h5.check_status(H5Dread(label_set.dataset.get(), H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT,
                          data.labels.data()),
                  "H5Dread", "dataset '" + labels + "'");
  std::int64_t largest = 0;
  for (std::size_t i = 0; i < data.labels.size(); ++i) {
    if (data.labels[i] < 0 || data.labels[i] >= kMaxClasses) {
      throw fsdp::Error("labels '" + labels + "' in '" + path + "': sample " + std::to_string(i) +
                        " has label " + std::to_string(data.labels[i]) +
                        "; labels must be class numbers from 0 to " +
                        std::to_string(kMaxClasses - 1) + " (is it the labels dataset?)");
    }
    largest = std::max(largest, data.labels[i]);
  }
  for (double x : data.features) {
    if (!std::isfinite(x)) {
      throw fsdp::Error("features '" + features + "' in '" + path +
                        "' contain a value that is not finite (NaN or infinity)");
    }
  }
  data.classes = std::max<std::int64_t>(largest + 1, 2);
  data.description = "'" + path + "' (" + features + ", " + labels +
                     "): " + std::to_string(data.samples) + " samples, " +
                     std::to_string(data.dim) + " features, " + std::to_string(data.classes) +
                     " classes";
  return data;
}

// Atomic: written to a temporary of its own beside path and renamed over it only when complete,
// so a failure (a full disk) leaves an existing file as it was.
void write_hdf5(const Dataset& data, const std::string& path, const std::string& features,
                const std::string& labels) {
  QuietErrorStack quiet;
  const std::string temporary = fsdp::temporary_beside(path);
  try {
    const fsdp::hdf5::Checker h5(path, "data file '" + path + "'");
    Handle file(h5.check(H5Fcreate(temporary.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT),
                         "H5Fcreate", "the file (is the directory writable?)"),
                H5Fclose);
    const hsize_t feature_extents[2] = {static_cast<hsize_t>(data.samples),
                                        static_cast<hsize_t>(data.dim)};
    write_dataset(h5, file.get(), features, 2, feature_extents, H5T_IEEE_F32LE, H5T_NATIVE_DOUBLE,
                  data.features.data());
    write_dataset(h5, file.get(), labels, 1, feature_extents, H5T_STD_I32LE, H5T_NATIVE_INT64,
                  data.labels.data());
    h5.check_status(file.close(), "H5Fclose", "the file");
    fsdp::publish_file(temporary, path);
  } catch (...) {
    std::remove(temporary.c_str());
    throw;
  }
}

Dataset read_text(const std::string& path, std::int64_t seq, std::int64_t max_bytes) {
  fsdp::require(seq >= 1, "--seq must be at least 1, got " + std::to_string(seq));
  namespace fs = std::filesystem;
  std::error_code error;
  std::string text;
  std::int64_t files = 0;
  if (fs::is_directory(path, error)) {
    std::vector<std::string> names;
    for (const auto& entry : fs::directory_iterator(path, error)) {
      if (entry.is_regular_file() && !entry.is_symlink() && entry.path().extension() != ".dat") {
        names.push_back(entry.path().string());
      }
    }
    fsdp::require(!error, "cannot list the text directory '" + path + "': " + error.message(),
                  fsdp::ErrorKind::io);
    std::sort(names.begin(), names.end());
    for (const std::string& name : names) {
      text += fsdp::read_text_file(name, "text file");
      ++files;
      if (max_bytes > 0 && static_cast<std::int64_t>(text.size()) >= max_bytes) {
        break;
      }
    }
  } else {
    text = fsdp::read_text_file(path, "text file");
    files = 1;
  }
  if (max_bytes > 0 && static_cast<std::int64_t>(text.size()) > max_bytes) {
    text.resize(static_cast<std::size_t>(max_bytes));
  }
  const auto bytes = static_cast<std::int64_t>(text.size());
  const std::int64_t windows = bytes > seq ? (bytes - 1) / seq : 0;
  fsdp::require(windows >= 2,
                "text '" + path + "' has " + std::to_string(bytes) + " bytes; --seq " +
                    std::to_string(seq) + " needs at least " + std::to_string(2 * seq + 1) +
                    " (two windows: one to train on, one to evaluate)",
                fsdp::ErrorKind::io);
  Dataset data;
  data.samples = windows;
  data.dim = seq + 1;
  data.classes = 256;
  data.features.resize(static_cast<std::size_t>(windows * (seq + 1)));
  for (std::int64_t w = 0; w < windows; ++w) {
    for (std::int64_t j = 0; j <= seq; ++j) {
      data.features[static_cast<std::size_t>(w * (seq + 1) + j)] =
          static_cast<unsigned char>(text[static_cast<std::size_t>(w * seq + j)]);
    }
  }
  data.labels.assign(static_cast<std::size_t>(windows), 0);
  data.description = "text " + path + " (" + std::to_string(bytes) + " bytes" +
                     (files > 1 ? " from " + std::to_string(files) + " files" : "") + ", " +
                     std::to_string(windows) + " windows of " + std::to_string(seq) + " bytes)";
  return data;
}

Split split(const Dataset& data, double eval_fraction) {
  fsdp::require(eval_fraction > 0 && eval_fraction < 1,
                "--eval-fraction must be in (0, 1), got " + std::to_string(eval_fraction));
  auto eval = static_cast<std::int64_t>(std::llround(eval_fraction * double(data.samples)));
  if (eval < 1) {
    // An evaluation of no sample would report an accuracy of nothing: the smallest fraction that
    // holds out one (1/samples, which rounds to one sample).
    char given[32], smallest[32];
    std::snprintf(given, sizeof given, "%g", eval_fraction);
    std::snprintf(smallest, sizeof smallest, "%.3g", 1.0 / double(data.samples));
    throw fsdp::Error("--eval-fraction " + std::string(given) + " holds out none of the " +
                      std::to_string(data.samples) + " samples: give at least " + smallest +
                      ", which holds out one");
  }
  eval = std::min(eval, data.samples - 1);  // at least one sample to train on
  const std::int64_t train = data.samples - eval;
  Split out;
  for (Dataset* part : {&out.train, &out.eval}) {
    const bool is_train = part == &out.train;
    const std::int64_t first = is_train ? 0 : train;
    part->samples = is_train ? train : eval;
    part->dim = data.dim;
    part->classes = data.classes;
    part->description = data.description;
    part->features.assign(data.features.begin() + first * data.dim,
                          data.features.begin() + (first + part->samples) * data.dim);
    part->labels.assign(data.labels.begin() + first, data.labels.begin() + first + part->samples);
  }
  return out;
}

}  // namespace fsdp_train
