// Checkpoint files (format_version 2). HDF5 layout:
//   /                 attributes format = "fsdp-checkpoint", format_version (int32),
//                     library_version, step (int64), epoch (int64), world_size (int32), strategy,
//                     plan (the sharding plan as JSON), checksum_algorithm, sampler (int64[6],
//                     SamplerState::to_words, only when saved)
//   /metadata         one string attribute per key of the caller's metadata
//   /state            one string attribute per named object (CheckpointState::objects): its
//                     Stateful::state_dict(), JSON text; only when a save had objects
//   /model/<p>        one dataset per parameter p: its logical shape and dtype, attribute
//                     checksum (uint64)
//   /optimizer        attributes name, lr, weight_decay, momentum, dampening, nesterov, beta1,
//                     beta2, eps, step; only when an optimizer was saved
//   /optimizer/<s>/<p> state s (exp_avg, exp_avg_sq, momentum) of parameter p, p's shape
// A parameter name with '/' nests groups, as HDF5 paths do. Every string is a fixed-length,
// NUL-terminated UTF-8 string: a variable-length one lives in the file's global heap, and libhdf5
// 1.10.8 hangs reading a damaged global heap (fuzz/corpus/checkpoint_hdf5/regressions). Format 1
// stored them as variable-length strings; it is refused without reading one, and only
// upgrade_checkpoint (fsdp-ckpt upgrade), which trusts the file, reads it. The file uses HDF5 1.8's
// object format (libver bounds), the oldest that stores an attribute over 64 KiB (the plan).
#include "fsdp/io/checkpoint.hpp"

#include <fcntl.h>
#include <hdf5.h>
#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <thread>
#include <type_traits>
#include <utility>

#include "../core/json_input.hpp"
#include "fsdp/comm/control_words.hpp"
#include "fsdp/comm/on_root.hpp"
#include "fsdp/comm/raise_on_every_rank.hpp"
#include "fsdp/config.hpp"
#include "fsdp/core/checked_size.hpp"
#include "fsdp/core/error.hpp"
#include "fsdp/core/memory_space.hpp"
#include "fsdp/core/profiling_region.hpp"
#include "fsdp/core/regular_file.hpp"
#include "fsdp/core/text.hpp"
#include "fsdp/io/background_save.hpp"
#include "fsdp/io/hdf5_handle.hpp"
#include "fsdp/io/hdf5_storage.hpp"
#include "fsdp/io/publish_file.hpp"
#include "fsdp/io/row_major_boxes.hpp"
#include "fsdp/io/tensor_checksum.hpp"
#include "fsdp/shard/sharding_plan.hpp"
#include "fsdp/unit/memory_tracker.hpp"
#include "hdf5_attributes.hpp"
#include "host_block.hpp"
#include "read_ahead.hpp"

namespace fsdp {
namespace {

using hdf5::Handle;
using Json = nlohmann::json;

constexpr const char* kFormatName = "fsdp-checkpoint";
constexpr const char* kExpected = "an fsdp checkpoint";
constexpr const char* kModelGroup = "model";
constexpr const char* kOptimizerGroup = "optimizer";
constexpr const char* kMetadataGroup = "metadata";
constexpr const char* kStateGroup = "state";

std::string file_text(const std::string& path) {
  return "checkpoint '" + path + "'";
}
std::string model_tensor(const std::string& parameter) {
  return std::string(kModelGroup) + "/" + parameter;
}
std::string state_tensor(const std::string& state, const std::string& parameter) {
  return std::string(kOptimizerGroup) + "/" + state + "/" + parameter;
}

// One tensor a checkpoint holds: a parameter's elements (state 0) or its optimizer state
// state_names[state - 1].
struct ListedTensor {
  std::string name;
  const ParameterInfo* parameter = nullptr;
  std::size_t state = 0;
};

// The tensors of a checkpoint, in the order of the file's header: every parameter, then each of
// the optimizer's states (none before its first step) of every trainable parameter. A frozen
// parameter (ParameterInfo::trainable) has no optimizer state.
std::vector<ListedTensor> listed_tensors(const std::vector<ParameterInfo>& parameters,
                                         const std::vector<std::string>& state_names) {
  std::vector<ListedTensor> tensors;
  for (std::size_t s = 0; s <= state_names.size(); ++s) {
    for (const ParameterInfo& info : parameters) {
      if (s == 0) {
        tensors.push_back({model_tensor(info.name), &info, 0});
      } else if (info.trainable) {
        tensors.push_back({state_tensor(state_names[s - 1], info.name), &info, s});
      }
    }
  }
  return tensors;
}

// The one rule every reader of a checkpoint's tensors applies: a tensor's data is sound when the
// file holds its checksum and the sum of the data read (tensor_checksum.hpp) is that checksum.
bool checksum_matches(const CheckpointTensor& tensor, std::uint64_t sum) {
  return tensor.has_checksum && tensor.checksum == sum;
}

// How a damaged tensor is named in messages.
std::string damaged_text(const CheckpointTensor& tensor) {
  return tensor.name + (tensor.has_checksum ? "" : " (no checksum)");
}

// The error of every reader that found damaged tensors; outcome says what the reader did not do
// ("nothing was loaded"), empty for verify.
Error damaged_error(const std::string& file, const std::vector<std::string>& damaged,
                    const std::string& outcome) {
  return Error(ErrorKind::io, file + " is damaged: the checksum of " + join(damaged, ", ") +
                                  " does not match its data" +
                                  (outcome.empty() ? std::string() : "; " + outcome));
}

// ---- files: create and open, serial or through MPI-IO ----

Handle access_list(const hdf5::Checker& file, MPI_Comm comm) {
  Handle fapl(file.check(H5Pcreate(H5P_FILE_ACCESS), "H5Pcreate", "the file access list"),
              H5Pclose);
  if (comm != MPI_COMM_NULL) {
    file.check_status(H5Pset_fapl_mpio(fapl.get(), comm, MPI_INFO_NULL), "H5Pset_fapl_mpio",
                      "the file access list");
  }
  return fapl;
}

// A new checkpoint file, written by the calling rank alone (a save lays its file out on rank 0:
// save_in_shard_group says why).
Handle create_file(const hdf5::Checker& file) {
  Handle fapl = access_list(file, MPI_COMM_NULL);
  // HDF5 1.8's object format: a fixed-length attribute over 64 KiB (the plan of a large model)
  // fails in H5Acreate2 with the 1.0 format, and 1.8's moves it into dense attribute storage. Its
  // metadata also carries checksums, which HDF5 checks when it reads them. Readable by HDF5 1.8 on.
  file.check_status(H5Pset_libver_bounds(fapl.get(), H5F_LIBVER_V18, H5F_LIBVER_V18),
                    "H5Pset_libver_bounds", "the file access list");
  return Handle(file.check(H5Fcreate(file.path().c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl.get()),
                           "H5Fcreate", "the file"),
                H5Fclose);
}

// what: how a message names the file ("checkpoint", "HDF5 file").
Handle open_file(const hdf5::Checker& file, MPI_Comm comm, const char* what = "checkpoint") {
  // Looked at before HDF5 opens it: opening a FIFO blocks until a writer comes.
  require_regular_file(file.path(), what);
  const htri_t is_hdf5 = H5Fis_hdf5(file.path().c_str());
  if (is_hdf5 <= 0) {
    throw Error(ErrorKind::io,
                file.file() + (is_hdf5 < 0 ? " cannot be opened (missing, unreadable "
                                             "or truncated)"
                                           : " is not an HDF5 file"));
  }
  Handle fapl = access_list(file, comm);
  return Handle(file.check(H5Fopen(file.path().c_str(), H5F_ACC_RDONLY, fapl.get()), "H5Fopen",
                           "the file (damaged or truncated?)"),
                H5Fclose);
}

Handle open_group(const hdf5::Checker& file, hid_t parent, const std::string& name) {
  return Handle(
      file.check(H5Gopen2(parent, name.c_str(), H5P_DEFAULT), "H5Gopen2", "group " + name),
      H5Gclose);
}

Handle create_group(const hdf5::Checker& file, hid_t parent, const std::string& name) {
  return Handle(file.check(H5Gcreate2(parent, name.c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
                           "H5Gcreate2", "group " + name),
                H5Gclose);
}

bool has_link(const hdf5::Checker& file, hid_t parent, const std::string& name) {
  const htri_t exists = H5Lexists(parent, name.c_str(), H5P_DEFAULT);
  file.check_status(exists, "H5Lexists", name);
  return exists > 0;
}

std::string dtype_text(const hdf5::Checker& file, hid_t dataset, const std::string& what) {
  Handle type(file.check(H5Dget_type(dataset), "H5Dget_type", what), H5Tclose);
  const H5T_class_t type_class = H5Tget_class(type.get());
  const std::size_t size = H5Tget_size(type.get());
  if (type_class == H5T_FLOAT && (size == 4 || size == 8 || size == 2)) {
    return size == 4 ? "fp32" : size == 8 ? "fp64" : "fp16";
  }
  if (type_class == H5T_INTEGER && (size == 4 || size == 8)) {
    return size == 4 ? "int32" : "int64";
  }
  return "an HDF5 type of class " + std::to_string(static_cast<int>(type_class)) + " and " +
         std::to_string(size) + " bytes";
}

std::vector<std::int64_t> dataset_shape(const hdf5::Checker& file, hid_t dataset,
                                        const std::string& what) {
  Handle space(file.check(H5Dget_space(dataset), "H5Dget_space", what), H5Sclose);
  const int rank = H5Sget_simple_extent_ndims(space.get());
  file.check_status(rank, "H5Sget_simple_extent_ndims", what);
  std::vector<hsize_t> dims(static_cast<std::size_t>(rank));
  if (rank > 0) {
    file.check_status(H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr),
                      "H5Sget_simple_extent_dims", what);
  }
  // libhdf5 1.10 refuses to open a dataset this large; a tensor's extent is an int64 anyway.
  for (hsize_t extent : dims) {
    if (extent > static_cast<hsize_t>(std::numeric_limits<std::int64_t>::max())) {
      throw Error(ErrorKind::io, file.file() + ": " + what + " has an extent of " +
                                     std::to_string(extent) +
                                     ", more than any tensor's (2^63 - 1 at most)");
    }
  }
  std::vector<std::int64_t> shape(dims.begin(), dims.end());
  checked_element_count(shape, file.file() + ": " + what, ErrorKind::io);
  return shape;
}

// Every dataset below `group` of the open file, as tensors named prefix + its relative path.
std::vector<CheckpointTensor> list_tensors(const hdf5::Checker& file, hid_t handle,
                                           const std::string& group, const std::string& prefix) {
  std::vector<CheckpointTensor> tensors;
  if (group != "/" && !has_link(file, handle, group)) {
    return tensors;
  }
  Handle parent = open_group(file, handle, group);
  std::vector<std::string> names;
  auto collect = [](hid_t, const char* name, const H5L_info_t*, void* data) -> herr_t {
    static_cast<std::vector<std::string>*>(data)->emplace_back(name);
    return 0;
  };
  file.check_status(H5Lvisit(parent.get(), H5_INDEX_NAME, H5_ITER_INC, collect, &names), "H5Lvisit",
                    "group " + group);
  for (const std::string& name : names) {
    Handle object(file.check(H5Oopen(parent.get(), name.c_str(), H5P_DEFAULT), "H5Oopen", name),
                  H5Oclose);
    if (H5Iget_type(object.get()) != H5I_DATASET) {
      continue;
    }
    CheckpointTensor tensor;
    tensor.name = prefix + name;
    const std::string what = "dataset " + tensor.name;
    tensor.shape = dataset_shape(file, object.get(), what);
    tensor.dtype = dtype_text(file, object.get(), what);
    tensor.has_checksum = hdf5::has_attribute(file, object.get(), "checksum");
    if (tensor.has_checksum) {
      tensor.checksum =
          hdf5::read_attribute<std::uint64_t>(file, object.get(), "checksum", kExpected);
    }
    tensors.push_back(std::move(tensor));
  }
  return tensors;
}

// ---- the header: read on one process, sent to the others as JSON ----

// The most bytes of a short string of the header (format, library_version, checksum_algorithm,
// the optimizer's name), NUL included.
constexpr std::size_t kMostShortString = 256;
// The most bytes of the plan and of a metadata value, NUL included: as many as a JSON plan file
// may have (kMostTextBytes, 256 MiB). A reader also takes no more than the file's size.
constexpr std::size_t kMostLongString = static_cast<std::size_t>(kMostTextBytes);
// The most bytes of a metadata key, NUL included (an attribute's name, which HDF5 keeps in the
// group's object header beside its type).
constexpr std::size_t kMostMetadataKey = 1025;

// How read_header reads strings.
enum class Strings {
  // Fixed-length only, each of at most its bound: any bytes are safe to read (format 2).
  fixed,
  // Variable-length ones too, from the global heap: a file the caller trusts (format 1, for
  // upgrade_checkpoint only).
  trusted_variable,
};

// What a load says about a checkpoint of format version 1, found without reading its strings.
std::string format_1_refusal(const hdf5::Checker& file) {
  const std::string& path = file.path();
  return file.file() +
         " stores its attribute 'format' as a variable-length string, as checkpoints of format "
         "version 1 did; this fsdp reads format version " +
         std::to_string(kCheckpointFormatVersion) +
         " only, since reading a damaged variable-length string can hang HDF5 (on every rank of a "
         "job). If it is a checkpoint you trust, convert it and load the new file: fsdp-ckpt "
         "upgrade " +
         path + " NEW.h5 (or 'fsdp-ckpt upgrade " + path + " " + path + "' in place)";
}

// Rules out a format 1 checkpoint (or another file of variable-length strings) before any
// string of it is read: then the global heap is never read.
void refuse_variable_strings(const hdf5::Checker& file, hid_t root) {
  if (hdf5::is_variable_string_attribute(file, root, "format")) {
    throw Error(ErrorKind::io, format_1_refusal(file));
  }
}

// A count of the header (steps taken, epochs begun) is never negative: a file that says so was
// not written by fsdp (a resume from step -5 went on as if it had been).
void require_count(const hdf5::Checker& file, const std::string& what, std::int64_t value) {
  if (value < 0) {
    throw Error(ErrorKind::io, file.file() + " has " + what + " " + std::to_string(value) +
                                   ": a count of what training did, never negative; the file is "
                                   "damaged or not written by fsdp");
  }
}

// The string attributes of group `name` under parent, by name (none when there is no such group):
// the caller's metadata, the objects' states. text(object, name, most_bytes) reads one.
template <class ReadText>
std::map<std::string, std::string> text_attributes(const hdf5::Checker& file, hid_t parent,
                                                   const char* name, const ReadText& text,
                                                   std::size_t most_bytes) {
  std::map<std::string, std::string> values;
  if (!has_link(file, parent, name)) {
    return values;
  }
  Handle group = open_group(file, parent, name);
  const std::string what = std::string("group ") + name;
  H5O_info_t info;
#if H5_VERSION_GE(1, 12, 0)
  file.check_status(H5Oget_info3(group.get(), &info, H5O_INFO_NUM_ATTRS), "H5Oget_info3", what);
#else
  file.check_status(H5Oget_info2(group.get(), &info, H5O_INFO_NUM_ATTRS), "H5Oget_info2", what);
#endif
  for (hsize_t i = 0; i < info.num_attrs; ++i) {
    const ssize_t length = H5Aget_name_by_idx(group.get(), ".", H5_INDEX_NAME, H5_ITER_INC, i,
                                              nullptr, 0, H5P_DEFAULT);
    file.check_status(length < 0 ? -1 : 0, "H5Aget_name_by_idx", what);
    std::string key(static_cast<std::size_t>(length) + 1, '\0');
    file.check_status(H5Aget_name_by_idx(group.get(), ".", H5_INDEX_NAME, H5_ITER_INC, i,
                                         key.data(), key.size(), H5P_DEFAULT) < 0
                          ? -1
                          : 0,
                      "H5Aget_name_by_idx", what);
    key.resize(static_cast<std::size_t>(length));
    values[key] = text(group.get(), key.c_str(), most_bytes);
  }
  return values;
}

CheckpointHeader read_header(const hdf5::Checker& file, hid_t handle,
                             Strings strings = Strings::fixed) {
  Handle root = open_group(file, handle, "/");
  if (strings == Strings::fixed) {
    refuse_variable_strings(file, root.get());
  }
  hsize_t file_size = 0;
  file.check_status(H5Fget_filesize(handle, &file_size), "H5Fget_filesize", "the file");
  // A long string takes no more memory than the file's size: a damaged type cannot ask for more.
  const std::size_t most_long =
      static_cast<std::size_t>(std::min<hsize_t>(kMostLongString, std::max<hsize_t>(file_size, 1)));
  const auto text = [&](hid_t object, const char* name, std::size_t most_bytes) {
    return strings == Strings::fixed
               ? hdf5::read_fixed_string_attribute(file, object, name, kExpected, most_bytes)
               : hdf5::read_string_attribute(file, object, name, kExpected);
  };
  CheckpointHeader header;
  const std::string format = text(root.get(), "format", kMostShortString);
  if (format != kFormatName) {
    throw Error(ErrorKind::io,
                file.file() + " has format '" + format + "'; it is not " + kExpected);
  }
  header.format_version =
      hdf5::read_attribute<std::int32_t>(file, root.get(), "format_version", kExpected);
  const int readable = strings == Strings::fixed ? kCheckpointFormatVersion : 1;
  if (header.format_version != readable) {
    // Which fsdp wrote it, when that can be read safely (a newer format may store it otherwise).
    std::string writer;
    try {
      writer = " (written by fsdp " + text(root.get(), "library_version", kMostShortString) + ")";
    } catch (const Error&) {
      // Not readable as this fsdp stores it: the message goes without it.
    }
    throw Error(ErrorKind::io,
                file.file() + " has format version " + std::to_string(header.format_version) +
                    writer +
                    (strings == Strings::fixed
                         ? "; this fsdp (" + std::string(FSDP_VERSION_STRING) + ") reads version " +
                               std::to_string(kCheckpointFormatVersion) +
                               (header.format_version > kCheckpointFormatVersion
                                    ? ": load it with a newer fsdp"
                                    : "")
                         : "; fsdp-ckpt upgrade converts version 1"));
  }
  header.library_version = text(root.get(), "library_version", kMostShortString);
  header.state.step = hdf5::read_attribute<std::int64_t>(file, root.get(), "step", kExpected);
  header.state.epoch = hdf5::read_attribute<std::int64_t>(file, root.get(), "epoch", kExpected);
  require_count(file, "step", header.state.step);
  require_count(file, "epoch", header.state.epoch);
  header.world_size = hdf5::read_attribute<std::int32_t>(file, root.get(), "world_size", kExpected);
  header.strategy = text(root.get(), "strategy", kMostStrategyName + 1);
  header.plan_json = text(root.get(), "plan", most_long);
  const std::string algorithm = text(root.get(), "checksum_algorithm", kMostShortString);
  if (algorithm != kChecksumAlgorithm) {
    throw Error(ErrorKind::io, file.file() + " has checksums by '" + algorithm +
                                   "'; this fsdp knows '" + kChecksumAlgorithm + "'");
  }
  if (hdf5::has_attribute(file, root.get(), "sampler")) {
    const auto words = hdf5::read_array_attribute<std::int64_t>(file, root.get(), "sampler",
                                                                SamplerState::kWords, kExpected);
    std::array<std::int64_t, SamplerState::kWords> fixed{};
    std::copy(words.begin(), words.end(), fixed.begin());
    header.state.sampler = SamplerState::from_words(fixed);
  }
  header.state.metadata = text_attributes(file, root.get(), kMetadataGroup, text, most_long);
  header.objects = text_attributes(file, root.get(), kStateGroup, text, most_long);
  if (has_link(file, root.get(), kOptimizerGroup)) {
    Handle optimizer = open_group(file, root.get(), kOptimizerGroup);
    const hid_t o = optimizer.get();
    header.optimizer = text(o, "name", kMostShortString);
    // A saved optimizer always has a name; an empty one would make its tensors unlisted, and so
    // unchecked by verify and unread by load (found by fuzzing).
    if (header.optimizer.empty()) {
      throw Error(ErrorKind::io, file.file() +
                                     " has an optimizer group whose name is empty; it is "
                                     "not a checkpoint written by fsdp (or it is damaged)");
    }
    OptimizerSettings& s = header.optimizer_settings;
    s.lr = hdf5::read_attribute<double>(file, o, "lr", kExpected);
    s.weight_decay = hdf5::read_attribute<double>(file, o, "weight_decay", kExpected);
    s.momentum = hdf5::read_attribute<double>(file, o, "momentum", kExpected);
    s.dampening = hdf5::read_attribute<double>(file, o, "dampening", kExpected);
    s.nesterov = hdf5::read_attribute<std::int32_t>(file, o, "nesterov", kExpected) != 0;
    s.beta1 = hdf5::read_attribute<double>(file, o, "beta1", kExpected);
    s.beta2 = hdf5::read_attribute<double>(file, o, "beta2", kExpected);
    s.eps = hdf5::read_attribute<double>(file, o, "eps", kExpected);
    header.optimizer_steps = hdf5::read_attribute<std::int64_t>(file, o, "step", kExpected);
    require_count(file, "optimizer step", header.optimizer_steps);
  }
  header.tensors = list_tensors(file, handle, kModelGroup, std::string(kModelGroup) + "/");
  if (!header.optimizer.empty()) {
    auto state = list_tensors(file, handle, kOptimizerGroup, std::string(kOptimizerGroup) + "/");
    header.tensors.insert(header.tensors.end(), state.begin(), state.end());
  }
  std::sort(header.tensors.begin(), header.tensors.end(),
            [](const CheckpointTensor& a, const CheckpointTensor& b) { return a.name < b.name; });
  return header;
}

Json to_json(const CheckpointHeader& h) {
  Json tensors = Json::array();
  for (const CheckpointTensor& t : h.tensors) {
    tensors.push_back({{"name", t.name},
                       {"shape", t.shape},
                       {"dtype", t.dtype},
                       {"checksum", t.checksum},
                       {"has_checksum", t.has_checksum}});
  }
  const OptimizerSettings& s = h.optimizer_settings;
  Json json = {{"format_version", h.format_version},
               {"library_version", h.library_version},
               {"step", h.state.step},
               {"epoch", h.state.epoch},
               {"metadata", h.state.metadata},
               {"objects", h.objects},
               {"world_size", h.world_size},
               {"strategy", h.strategy},
               {"plan", h.plan_json},
               {"optimizer", h.optimizer},
               {"optimizer_settings",
                {s.lr, s.weight_decay, s.momentum, s.dampening, s.nesterov ? 1.0 : 0.0, s.beta1,
                 s.beta2, s.eps}},
               {"optimizer_steps", h.optimizer_steps},
               {"tensors", tensors}};
  if (h.state.sampler) {
    json["sampler"] = h.state.sampler->to_words();
  }
  return json;
}

CheckpointHeader header_from_json(const Json& json) {
  CheckpointHeader h;
  h.format_version = json.at("format_version").get<int>();
  h.library_version = json.at("library_version").get<std::string>();
  h.state.step = json.at("step").get<std::int64_t>();
  h.state.epoch = json.at("epoch").get<std::int64_t>();
  h.state.metadata = json.at("metadata").get<std::map<std::string, std::string>>();
  h.objects = json.at("objects").get<std::map<std::string, std::string>>();
  if (json.contains("sampler")) {
    h.state.sampler = SamplerState::from_words(
        json.at("sampler").get<std::array<std::int64_t, SamplerState::kWords>>());
  }
  h.world_size = json.at("world_size").get<int>();
  h.strategy = json.at("strategy").get<std::string>();
  h.plan_json = json.at("plan").get<std::string>();
  h.optimizer = json.at("optimizer").get<std::string>();
  const auto s = json.at("optimizer_settings").get<std::vector<double>>();
  h.optimizer_settings = {s.at(0),      s.at(1), s.at(2), s.at(3),
                          s.at(4) != 0, s.at(5), s.at(6), s.at(7)};
  h.optimizer_steps = json.at("optimizer_steps").get<std::int64_t>();
  for (const Json& t : json.at("tensors")) {
    CheckpointTensor tensor;
    tensor.name = t.at("name").get<std::string>();
    tensor.shape = t.at("shape").get<std::vector<std::int64_t>>();
    tensor.dtype = t.at("dtype").get<std::string>();
    tensor.checksum = t.at("checksum").get<std::uint64_t>();
    tensor.has_checksum = t.at("has_checksum").get<bool>();
    h.tensors.push_back(std::move(tensor));
  }
  return h;
}

// Rank 0 reads the header; every rank gets it, or the same Error.
CheckpointHeader agreed_header(ProcessGroup& group, const std::string& path) {
  const std::string text = on_root(group, "read " + file_text(path), [&] {
    hdf5::QuietErrorStack quiet;
    const hdf5::Checker file(path, file_text(path));
    Handle handle = open_file(file, MPI_COMM_NULL);
    return to_json(read_header(file, handle.get())).dump();
  });
  return header_from_json(parse_json_input(text, file_text(path) + "'s header"));
}

// ---- what this rank holds: one entry per tensor, in the same order on every rank ----

template <class T>
struct Piece {
  std::string tensor;               // its name in the file
  std::vector<std::int64_t> shape;  // the tensor's logical shape
  DeviceView<T> view;               // this rank's elements (empty View for none)
  std::int64_t first = 0;           // flat index of view(0)
  std::int64_t count = 0;
  // This rank writes these elements and counts them in the checksum: every element of a tensor
  // is counted by exactly one rank (a replicated parameter's by rank 0 only).
  bool counted = false;
  // The view is not the model's yet (optimizer state a load makes): a load may read into it
  // directly, since it joins the model only when every check passed.
  bool fresh = false;
  ExecutionSpace space;
};

// The model's parameters, then (when state_names is not empty) each state of each parameter.
// state_views(p, k) gives the k-th state View of a parameter's piece.
template <class T, class StateView>
std::vector<Piece<T>> pieces_of(ShardedModel<T>& model, const std::vector<std::string>& state_names,
                                const StateView& state_view) {
  std::vector<Piece<T>> pieces;
  const int rank = model.group().rank();
  for (const ListedTensor& tensor : listed_tensors(model.plan().parameters(), state_names)) {
    const ParameterInfo& info = *tensor.parameter;
    ShardedParameter<T>& p = model.parameter(info.name);
    Piece<T> piece;
    piece.tensor = tensor.name;
    piece.shape = info.shape;
    piece.first = p.shard_offset();
    piece.count = p.shard_size();
    piece.counted = piece.count > 0 && (p.placement() != Placement::replicated || rank == 0);
    piece.space = model.unit_of(info.name).execution_space();
    if (piece.count > 0) {
      piece.view = tensor.state == 0 ? p.shard() : state_view(p, tensor.state - 1);
    }
    pieces.push_back(std::move(piece));
  }
  return pieces;
}

// The selection of [first, first + count) in a dataset of the given shape, and a 1-D memory
// space of count elements (or nothing selected in either when count is 0).
std::pair<Handle, Handle> selections(const hdf5::Checker& file, hid_t dataset,
                                     const std::vector<std::int64_t>& shape, std::int64_t first,
                                     std::int64_t count, const std::string& what) {
  Handle file_space(file.check(H5Dget_space(dataset), "H5Dget_space", what), H5Sclose);
  const hsize_t extent = static_cast<hsize_t>(std::max<std::int64_t>(count, 1));
  Handle memory(file.check(H5Screate_simple(1, &extent, nullptr), "H5Screate_simple", what),
                H5Sclose);
  if (count == 0) {
    file.check_status(H5Sselect_none(file_space.get()), "H5Sselect_none", what);
    file.check_status(H5Sselect_none(memory.get()), "H5Sselect_none", what);
  } else if (shape.empty()) {
    file.check_status(H5Sselect_all(file_space.get()), "H5Sselect_all", what);
  } else {
    file.check_status(H5Sselect_none(file_space.get()), "H5Sselect_none", what);
    for (const Box& box : row_major_boxes(shape, first, first + count)) {
      const std::vector<hsize_t> start(box.start.begin(), box.start.end());
      const std::vector<hsize_t> size(box.count.begin(), box.count.end());
      file.check_status(H5Sselect_hyperslab(file_space.get(), H5S_SELECT_OR, start.data(), nullptr,
                                            size.data(), nullptr),
                        "H5Sselect_hyperslab", what);
    }
  }
  return {std::move(file_space), std::move(memory)};
}

// Each rank's part of a tensor is a few large contiguous runs of the file (a flat piece): MPI-IO
// independent transfers read them as plain pread would, where collective buffering would route
// them through aggregator buffers for no gain.
Handle transfer_list(const hdf5::Checker& file) {
  Handle dxpl(file.check(H5Pcreate(H5P_DATASET_XFER), "H5Pcreate", "the transfer list"), H5Pclose);
  file.check_status(H5Pset_dxpl_mpio(dxpl.get(), H5FD_MPIO_INDEPENDENT), "H5Pset_dxpl_mpio",
                    "the transfer list");
  return dxpl;
}

// The ranks write the elements' bytes as they are in memory, which is what these types say on a
// little-endian machine (every machine fsdp is built for; a big-endian one fails to build here).
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "fsdp checkpoints store little-endian IEEE floats, written from memory as they are"
#endif
template <class T>
hid_t stored_type() {
  return sizeof(T) == 4 ? H5T_IEEE_F32LE : H5T_IEEE_F64LE;
}
template <class T>
hid_t memory_type() {
  return sizeof(T) == 4 ? H5T_NATIVE_FLOAT : H5T_NATIVE_DOUBLE;
}

Handle dataset_space(const hdf5::Checker& file, const std::vector<std::int64_t>& shape,
                     const std::string& what) {
  if (shape.empty()) {
    return Handle(file.check(H5Screate(H5S_SCALAR), "H5Screate", what), H5Sclose);
  }
  const std::vector<hsize_t> dims(shape.begin(), shape.end());
  return Handle(file.check(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr),
                           "H5Screate_simple", what),
                H5Sclose);
}

// Creates the dataset (and the groups its name implies).
Handle create_dataset(const hdf5::Checker& file, hid_t handle, const std::string& name,
                      const std::vector<std::int64_t>& shape, hid_t type) {
  const std::string what = "dataset " + name;
  Handle space = dataset_space(file, shape, what);
  Handle lcpl(file.check(H5Pcreate(H5P_LINK_CREATE), "H5Pcreate", what), H5Pclose);
  file.check_status(H5Pset_create_intermediate_group(lcpl.get(), 1),
                    "H5Pset_create_intermediate_group", what);
  Handle dcpl(file.check(H5Pcreate(H5P_DATASET_CREATE), "H5Pcreate", what), H5Pclose);
  // Contiguous storage allocated at creation, so that it has its place in the file before any
  // element is written (the ranks write them there themselves); every element is written: no
  // fill values first.
  file.check_status(H5Pset_layout(dcpl.get(), H5D_CONTIGUOUS), "H5Pset_layout", what);
  file.check_status(H5Pset_alloc_time(dcpl.get(), H5D_ALLOC_TIME_EARLY), "H5Pset_alloc_time", what);
  file.check_status(H5Pset_fill_time(dcpl.get(), H5D_FILL_TIME_NEVER), "H5Pset_fill_time", what);
  return Handle(file.check(H5Dcreate2(handle, name.c_str(), type, space.get(), lcpl.get(),
                                      dcpl.get(), H5P_DEFAULT),
                           "H5Dcreate2", what),
                H5Dclose);
}

// The element sums of every tensor, each rank adding what it counts; the sums wrap modulo 2^64.
template <class T>
std::vector<std::uint64_t> checksums(ProcessGroup& group, const std::vector<Piece<T>>& pieces) {
  std::vector<std::uint64_t> sums(pieces.size(), 0);
  for (std::size_t i = 0; i < pieces.size(); ++i) {
    if (pieces[i].counted) {
      sums[i] = partial_checksum(pieces[i].view, pieces[i].first);
    }
  }
  all_reduce_wrapping_sums(group, sums.data(), sums.size());
  return sums;
}

// What a checkpoint's file takes besides its tensors' values: HDF5's metadata (measured: 13 KB for
// fsdp-train's 18 datasets and header, about 0.7 KB per dataset; counted here as 2 KiB each, with
// 16 KiB for the superblock and groups) and the header's attributes.
long long header_bytes(const CheckpointHeader& header, std::size_t datasets) {
  return 16384 + static_cast<long long>(header.plan_json.size()) +
         static_cast<long long>(to_json(header).dump().size()) +
         2048 * static_cast<long long>(datasets);
}

long long element_count(const std::vector<std::int64_t>& shape) {
  long long numel = 1;
  for (const std::int64_t extent : shape) {
    numel *= extent;
  }
  return numel;
}

// What a checkpoint's file takes: the header (header_bytes) and the elements of every parameter
// and of each of its `states` optimizer states.
template <class T>
long long file_bytes_of(const CheckpointHeader& header, const ShardingPlan& plan,
                        std::size_t states) {
  const auto tensors = listed_tensors(plan.parameters(), std::vector<std::string>(states));
  long long bytes = header_bytes(header, tensors.size());
  for (const ListedTensor& tensor : tensors) {
    bytes += element_count(tensor.parameter->shape) * static_cast<long long>(sizeof(T));
  }
  return bytes;
}

// The state of each of objects (Stateful::state_dict), checked to be JSON so that the file holds
// what a load and h5py can parse. caller: the function that saves, for the message.
std::map<std::string, std::string> object_states(const StatefulObjects& objects,
                                                 const std::string& caller) {
  std::map<std::string, std::string> states;
  for (const auto& [name, object] : objects) {
    require(object != nullptr, caller + ": object '" + name + "' is a null pointer",
            ErrorKind::usage);
    std::string state = object->state_dict();
    try {
      parse_json_input(state, "the state_dict of object '" + name + "'");
    } catch (const Error& e) {
      throw Error(ErrorKind::usage, caller + ": " + e.message());
    }
    states.emplace(name, std::move(state));
  }
  return states;
}

// The header save_checkpoint writes for the model, the optimizer (none when null) and state
// (whose objects' states are taken now).
template <class T>
CheckpointHeader header_for(ShardedModel<T>& model, const Optimizer<T>* optimizer,
                            const CheckpointState& state) {
  CheckpointHeader header;
  header.format_version = kCheckpointFormatVersion;
  header.library_version = FSDP_VERSION_STRING;
  header.world_size = model.group().size();
  header.strategy = model.plan().strategy();
  header.plan_json = plan_to_json(model.plan());
  header.state = state;
  header.objects = object_states(state.objects, "save_checkpoint");
  if (optimizer != nullptr) {
    header.optimizer = optimizer->name();
    header.optimizer_settings = optimizer->settings();
    header.optimizer_steps = optimizer->step_count();
  }
  return header;
}

// The rank a fault-injection variable names (FSDP_CHECKPOINT_CRASH_RANK, ..._FAIL_RANK), or -1.
int rank_named_by(const char* variable) {
  const char* value = std::getenv(variable);
  return value != nullptr && *value != '\0' ? std::atoi(value) : -1;
}

// Every string of the header fits what read_header reads back: a NUL-terminated string holds no
// NUL byte (one would cut it short, silently), and each has its bound. The header is the same on
// every rank (the plan is agreed on, the state is rank 0's), so every rank throws alike. caller:
// the function that writes the header, for the message.
void check_strings(const CheckpointHeader& h, const std::string& caller) {
  const auto check = [&](const std::string& what, const std::string& value,
                         std::size_t most_bytes) {
    require(value.find('\0') == std::string::npos,
            caller + ": " + what + " holds a NUL byte; checkpoints store NUL-terminated strings",
            ErrorKind::usage);
    require(value.size() < most_bytes,
            caller + ": " + what + " has " + std::to_string(value.size()) +
                " bytes; a checkpoint holds at most " + std::to_string(most_bytes - 1),
            ErrorKind::usage);
  };
  check("the library version", h.library_version, kMostShortString);
  check("the strategy", h.strategy, kMostStrategyName + 1);
  check("the plan", h.plan_json, kMostLongString);
  check("the optimizer's name", h.optimizer, kMostShortString);
  for (const auto& [key, value] : h.state.metadata) {
    require(!key.empty(), caller + ": a metadata key is empty", ErrorKind::usage);
    check("metadata key '" + key + "'", key, kMostMetadataKey);
    check("the value of metadata key '" + key + "'", value, kMostLongString);
  }
  for (const auto& [name, value] : h.objects) {
    require(!name.empty(), caller + ": an object's name is empty", ErrorKind::usage);
    check("object name '" + name + "'", name, kMostMetadataKey);
    check("the state of object '" + name + "'", value, kMostLongString);
  }
}

void write_header(const hdf5::Checker& file, hid_t handle, const CheckpointHeader& h) {
  Handle root = open_group(file, handle, "/");
  const hid_t r = root.get();
  hdf5::write_fixed_string_attribute(file, r, "format", kFormatName);
  hdf5::write_attribute<std::int32_t>(file, r, "format_version", h.format_version);
  hdf5::write_fixed_string_attribute(file, r, "library_version", h.library_version);
  hdf5::write_attribute<std::int64_t>(file, r, "step", h.state.step);
  hdf5::write_attribute<std::int64_t>(file, r, "epoch", h.state.epoch);
  hdf5::write_attribute<std::int32_t>(file, r, "world_size", h.world_size);
  hdf5::write_fixed_string_attribute(file, r, "strategy", h.strategy);
  hdf5::write_fixed_string_attribute(file, r, "plan", h.plan_json);
  hdf5::write_fixed_string_attribute(file, r, "checksum_algorithm", kChecksumAlgorithm);
  if (h.state.sampler) {
    const auto words = h.state.sampler->to_words();
    hdf5::write_array_attribute<std::int64_t>(
        file, r, "sampler", std::vector<std::int64_t>(words.begin(), words.end()));
  }
  Handle metadata = create_group(file, r, kMetadataGroup);
  for (const auto& [key, value] : h.state.metadata) {
    hdf5::write_fixed_string_attribute(file, metadata.get(), key.c_str(), value);
  }
  if (!h.objects.empty()) {
    Handle objects = create_group(file, r, kStateGroup);
    for (const auto& [name, value] : h.objects) {
      hdf5::write_fixed_string_attribute(file, objects.get(), name.c_str(), value);
    }
  }
  if (!h.optimizer.empty()) {
    Handle optimizer = create_group(file, r, kOptimizerGroup);
    const hid_t o = optimizer.get();
    const OptimizerSettings& s = h.optimizer_settings;
    hdf5::write_fixed_string_attribute(file, o, "name", h.optimizer);
    hdf5::write_attribute<double>(file, o, "lr", s.lr);
    hdf5::write_attribute<double>(file, o, "weight_decay", s.weight_decay);
    hdf5::write_attribute<double>(file, o, "momentum", s.momentum);
    hdf5::write_attribute<double>(file, o, "dampening", s.dampening);
    hdf5::write_attribute<std::int32_t>(file, o, "nesterov", s.nesterov ? 1 : 0);
    hdf5::write_attribute<double>(file, o, "beta1", s.beta1);
    hdf5::write_attribute<double>(file, o, "beta2", s.beta2);
    hdf5::write_attribute<double>(file, o, "eps", s.eps);
    hdf5::write_attribute<std::int64_t>(file, o, "step", h.optimizer_steps);
  }
}

// Every difference between what the file holds and what the model (and optimizer) expect.
std::vector<std::string> differences(const std::vector<CheckpointTensor>& in_file,
                                     const std::vector<CheckpointTensor>& expected,
                                     const std::string& ignored_prefix) {
  std::map<std::string, const CheckpointTensor*> file_tensors, model_tensors;
  for (const auto& t : in_file) {
    file_tensors[t.name] = &t;
  }
  for (const auto& t : expected) {
    model_tensors[t.name] = &t;
  }
  std::vector<std::string> lines;
  for (const auto& [name, want] : model_tensors) {
    const auto found = file_tensors.find(name);
    if (found == file_tensors.end()) {
      lines.push_back(name + ": missing from the file (the model has " + shape_text(want->shape) +
                      " " + want->dtype + ")");
      continue;
    }
    const CheckpointTensor& have = *found->second;
    if (have.shape != want->shape) {
      lines.push_back(name + ": shape " + shape_text(have.shape) + " in the file, " +
                      shape_text(want->shape) + " in the model");
    }
    if (have.dtype != want->dtype) {
      lines.push_back(name + ": dtype " + have.dtype + " in the file, " + want->dtype +
                      " in the model");
    }
  }
  for (const auto& [name, have] : file_tensors) {
    const bool ignored = !ignored_prefix.empty() && name.rfind(ignored_prefix, 0) == 0;
    if (!ignored && model_tensors.count(name) == 0) {
      lines.push_back(name + ": in the file (" + shape_text(have->shape) + " " + have->dtype +
                      "), not in the model");
    }
  }
  return lines;
}

// host_checksum over raw bytes holding T elements: what the threads of a load and of a
// background save sum with.
template <class T>
std::uint64_t host_checksum(const char* data, std::int64_t count, std::int64_t first) {
  return fsdp::host_checksum(reinterpret_cast<const T*>(data), count, first);
}

// Reads every piece's elements into one staging block of host memory (same order on every rank:
// the reads are collective), checks the checksums (checksummed: a checkpoint's tensors, each of
// which must match its checksum; not: a plain file's, which have none), and only then copies them
// into the pieces. A fresh piece the host can write is read into directly instead. A ReadAhead
// thread faults in the memory ahead of the reads and sums each piece once it is read. A read
// that fails on one rank does not stop it from joining the others' collective reads: failures
// are agreed on at the end.
template <class T>
void read_pieces(ProcessGroup& group, const std::string& path, const std::string& group_prefix,
                 std::vector<Piece<T>>& pieces, const std::vector<CheckpointTensor>& header_tensors,
                 const std::function<std::string(const std::string&)>& file_name,
                 bool checksummed) {
  const hdf5::Checker file(path, file_text(path));
  constexpr bool host_writes_pieces =
      Kokkos::SpaceAccessibility<Kokkos::HostSpace,
                                 typename DeviceView<T>::memory_space>::accessible;
  std::vector<bool> staged(pieces.size());
  std::vector<std::size_t> at(pieces.size(), 0);  // a staged piece's byte in the staging
  std::size_t bytes = 0;
  for (std::size_t i = 0; i < pieces.size(); ++i) {
    staged[i] = !(host_writes_pieces && pieces[i].fresh && pieces[i].view.span_is_contiguous());
    if (staged[i]) {
      at[i] = bytes;
      bytes += static_cast<std::size_t>(pieces[i].count) * sizeof(T);
    }
  }
  const HostBlock staging(bytes, HostBlock::Pages::base);
  std::vector<ReadAhead::Range> ranges(pieces.size());
  for (std::size_t i = 0; i < pieces.size(); ++i) {
    char* data =
        staged[i] ? staging.data() + at[i] : reinterpret_cast<char*>(pieces[i].view.data());
    ranges[i] = {data, pieces[i].count, pieces[i].first, checksummed && pieces[i].counted};
  }
  std::vector<std::uint64_t> sums;
  std::exception_ptr failure;
  {
    ReadAhead ahead(ranges, sizeof(T), &host_checksum<T>);
    hdf5::QuietErrorStack quiet;
    try {
      Handle handle = open_file(file, group.mpi_comm());
      Handle dxpl = transfer_list(file);
      for (std::size_t i = 0; i < pieces.size(); ++i) {
        const Piece<T>& piece = pieces[i];
        const std::string name = file_name(piece.tensor);
        const std::string what = "dataset " + name;
        try {
          Handle dataset(
              file.check(H5Dopen2(handle.get(), (group_prefix + name).c_str(), H5P_DEFAULT),
                         "H5Dopen2", what),
              H5Dclose);
          auto [file_space, memory] =
              selections(file, dataset.get(), piece.shape, piece.first, piece.count, what);
          ahead.await_pages(i);
          file.check_status(H5Dread(dataset.get(), memory_type<T>(), memory.get(), file_space.get(),
                                    dxpl.get(), ranges[i].data),
                            "H5Dread", what);
        } catch (...) {
          if (!failure) {
            failure = std::current_exception();
          }
        }
        ahead.have_read(i);
      }
      file.check_status(handle.close(), "H5Fclose", "the file");
      sums = ahead.sums();
    } catch (...) {
      if (!failure) {
        failure = std::current_exception();
      }
    }
  }
  raise_on_every_rank(group, "read " + file_text(path), failure);

  if (checksummed) {
    all_reduce_wrapping_sums(group, sums.data(), sums.size());
  }
  std::vector<std::string> damaged;
  for (std::size_t i = 0; checksummed && i < pieces.size(); ++i) {
    const std::string name = file_name(pieces[i].tensor);
    const auto found = std::find_if(header_tensors.begin(), header_tensors.end(),
                                    [&](const CheckpointTensor& t) { return t.name == name; });
    // (Every piece's tensor is in the header: the names were compared before any read.)
    if (found != header_tensors.end() && !checksum_matches(*found, sums[i])) {
      damaged.push_back(damaged_text(*found));
    }
  }
  if (!damaged.empty()) {
    throw damaged_error(file_text(path), damaged, "nothing was loaded");
  }
  for (std::size_t i = 0; i < pieces.size(); ++i) {
    if (staged[i] && pieces[i].count > 0) {
      Kokkos::deep_copy(pieces[i].space, pieces[i].view,
                        host_view(reinterpret_cast<const T*>(ranges[i].data),
                                  static_cast<std::size_t>(pieces[i].count)));
    }
  }
  for (const Piece<T>& piece : pieces) {
    piece.space.fence();
  }
}

// The model's pieces among pieces (their tensors are "model/<parameter>") are pointed at new
// memory of their units (ShardedUnit::new_pieces) and marked fresh, so that read_pieces reads
// them in place instead of staging and copying them; adopt_new_pieces hands the memory to the
// units once every check passed. Returns it, by unit; a unit without it keeps the copy.
template <class T>
std::vector<TrackedView<T>> read_into_new_pieces(ShardedModel<T>& model,
                                                 std::vector<Piece<T>>& pieces) {
  std::vector<TrackedView<T>> buffers(model.unit_count());
  std::map<const ShardedUnit<T>*, std::size_t> index;
  for (std::size_t u = 0; u < model.unit_count(); ++u) {
    buffers[u] = model.unit(u).new_pieces();
    index[&model.unit(u)] = u;
  }
  const std::string prefix = std::string(kModelGroup) + "/";
  for (Piece<T>& piece : pieces) {
    if (piece.tensor.compare(0, prefix.size(), prefix) != 0) {
      continue;
    }
    const std::string name = piece.tensor.substr(prefix.size());
    ShardedUnit<T>& unit = model.unit_of(name);
    const TrackedView<T>& buffer = buffers[index.at(&unit)];
    if (buffer.allocated()) {
      DeviceView<T> view = unit.piece_in(buffer, model.parameter(name));
      if (view.data() != nullptr || piece.count == 0) {
        piece.view = view;
        piece.fresh = true;
      }
    }
  }
  return buffers;
}

template <class T>
void adopt_new_pieces(ShardedModel<T>& model, std::vector<TrackedView<T>>& buffers) {
  for (std::size_t u = 0; u < buffers.size(); ++u) {
    if (buffers[u].allocated()) {
      model.unit(u).adopt_pieces(std::move(buffers[u]));
    }
  }
}

template <class T>
CheckpointTensor expected_tensor(const std::string& name, const ParameterInfo& info) {
  CheckpointTensor t;
  t.name = name;
  t.shape = info.shape;
  t.dtype = name_of(dtype_of<T>());
  return t;
}

// The file of a checkpoint without its elements, on the calling rank alone: the header, and
// every tensor as a contiguous dataset whose storage is allocated now and never filled (the
// ranks write it next). Returns each dataset's byte offset in the file (-1 for one of no
// elements, which has no storage).
template <class T>
std::vector<std::int64_t> lay_out(const std::string& path, const CheckpointHeader& header,
                                  const std::vector<Piece<T>>& pieces,
                                  const std::vector<std::uint64_t>& sums) {
  hdf5::QuietErrorStack quiet;
  const hdf5::Checker file(path, file_text(path));
  Handle handle = create_file(file);
  write_header(file, handle.get(), header);
  std::vector<std::int64_t> offsets(pieces.size(), -1);
  for (std::size_t i = 0; i < pieces.size(); ++i) {
    const Piece<T>& piece = pieces[i];
    Handle dataset =
        create_dataset(file, handle.get(), piece.tensor, piece.shape, stored_type<T>());
    hdf5::write_attribute<std::uint64_t>(file, dataset.get(), "checksum", sums[i]);
    if (element_count(piece.shape) > 0) {
      const haddr_t offset = H5Dget_offset(dataset.get());
      require(offset != HADDR_UNDEF &&
                  offset <= static_cast<haddr_t>(std::numeric_limits<std::int64_t>::max()),
              "HDF5 gave dataset " + piece.tensor + " of " + file.file() +
                  " no place in the file although its storage was allocated",
              ErrorKind::io);
      offsets[i] = static_cast<std::int64_t>(offset);
    }
  }
  file.check_status(handle.close(), "H5Fclose", "the file");
  return offsets;
}

// Writes count bytes at offset, all of them (pwrite may write fewer, or be interrupted).
void write_at(int fd, const void* data, std::size_t count, std::int64_t offset,
              const std::string& what, const std::string& path) {
  const char* bytes = static_cast<const char*>(data);
  while (count > 0) {
    const ssize_t wrote = ::pwrite(fd, bytes, count, static_cast<off_t>(offset));
    if (wrote < 0 && errno == EINTR) {
      continue;
    }
    if (wrote <= 0) {
      throw Error(ErrorKind::io, "cannot write " + what + " into " + file_text(path) + " (" +
                                     (wrote < 0 ? std::strerror(errno) : "nothing written") +
                                     "): is the file system full, or over a quota?");
    }
    bytes += wrote;
    count -= static_cast<std::size_t>(wrote);
    offset += wrote;
  }
}

// Opens the laid-out file, calls write_one(fd, i) for i in [0, count), then syncs and closes it:
// once every rank returns, the file is complete on disk and can be published. Fault injection for
// tests, half way through the writes: FSDP_CHECKPOINT_CRASH_RANK=r aborts rank r (as a crashed
// process would), FSDP_CHECKPOINT_FAIL_RANK=r makes rank r's write fail (as a full disk would).
void write_into(const std::string& path, std::size_t count, int rank,
                const std::function<void(int fd, std::size_t i)>& write_one) {
  const int crash = rank_named_by("FSDP_CHECKPOINT_CRASH_RANK");
  const int fail = rank_named_by("FSDP_CHECKPOINT_FAIL_RANK");
  const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) {
    throw Error(ErrorKind::io,
                "cannot open " + file_text(path) + " to write (" + std::strerror(errno) + ")");
  }
  try {
    for (std::size_t i = 0; i < count; ++i) {
      if (crash == rank && i == count / 2) {
        std::fprintf(stderr,
                     "fsdp: FSDP_CHECKPOINT_CRASH_RANK=%d: rank %d aborts while writing %s\n",
                     crash, crash, file_text(path).c_str());
        std::abort();
      }
      if (fail == rank && i == count / 2) {
        throw Error(ErrorKind::io, "cannot write into " + file_text(path) +
                                       " (FSDP_CHECKPOINT_FAIL_RANK=" + std::to_string(fail) +
                                       ": a failure injected for a test)");
      }
      write_one(fd, i);
    }
    if (::fsync(fd) != 0) {
      throw Error(ErrorKind::io,
                  "cannot sync " + file_text(path) + " to disk (" + std::strerror(errno) + ")");
    }
  } catch (...) {
    ::close(fd);
    throw;
  }
  if (::close(fd) != 0) {
    throw Error(ErrorKind::io,
                "cannot close " + file_text(path) + " (" + std::strerror(errno) + ")");
  }
}

// This rank's elements of every tensor, at the offsets lay_out gave, then synced.
template <class T>
void write_pieces(const std::string& path, const std::vector<Piece<T>>& pieces,
                  const std::vector<std::int64_t>& offsets, int rank) {
  write_into(path, pieces.size(), rank, [&](int fd, std::size_t i) {
    const Piece<T>& piece = pieces[i];
    const std::int64_t count = piece.counted ? piece.count : 0;
    if (count == 0) {
      return;
    }
    // The host copy of what this rank writes (none for a host memory space).
    const auto host = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), piece.view);
    write_at(fd, host.data(), static_cast<std::size_t>(count) * sizeof(T),
             offsets[i] + piece.first * static_cast<std::int64_t>(sizeof(T)),
             "dataset " + piece.tensor, path);
  });
}

// What a save of one shard group writes: the header (with rank 0's state: every rank must write
// the same attributes) and this rank's pieces, the optimizer's state included once it has
// stepped. Checked alike on every rank; every unit's kernels have finished.
template <class T>
struct SaveContents {
  CheckpointHeader header;
  std::vector<std::string> state_names;
  std::vector<Piece<T>> pieces;
};

template <class T>
SaveContents<T> save_contents(ShardedModel<T>& model, const Optimizer<T>* optimizer,
                              const CheckpointState& state, const std::string& caller) {
  ProcessGroup& group = model.group();
  SaveContents<T> c;
  c.header = header_for(model, optimizer, CheckpointState());
  {
    // Rank 0's state and its objects' states; a failure of one of them reaches every rank.
    const std::string text = on_root(group, "take the state to save", [&] {
      CheckpointHeader with_state;
      with_state.state = state;
      with_state.objects = object_states(state.objects, caller);
      return to_json(with_state).dump();
    });
    const CheckpointHeader with_state = header_from_json(Json::parse(text));
    c.header.state = with_state.state;
    c.header.objects = with_state.objects;
  }
  if (optimizer != nullptr && c.header.optimizer_steps > 0) {
    c.state_names = optimizer->state_names();
  }
  check_strings(c.header, caller);
  for (std::size_t u = 0; u < model.unit_count(); ++u) {
    model.unit(u).execution_space().fence();
  }
  c.pieces = pieces_of(model, c.state_names, [&](ShardedParameter<T>& p, std::size_t k) {
    const DeviceView<T>* state = optimizer->state().find(p.name(), c.state_names[k]);
    require(
        state != nullptr,
        [&] {
          return caller + ": parameter '" + p.name() + "' has no optimizer state '" +
                 c.state_names[k] + "' although the optimizer has taken " +
                 std::to_string(c.header.optimizer_steps) + " steps";
        },
        ErrorKind::state);
    return *state;
  });
  return c;
}

// Rank 0 alone creates the temporary (a name of its own beside path), checks that the file fits
// and lays it out with serial HDF5: the header, every dataset with its checksum (sums), and its
// place in the file. Then every rank writes its own elements there with pwrite. No rank is ever
// inside libhdf5 while another's write fails: parallel HDF5 1.10 does not survive a write that
// fails on some ranks only (a disk that fills after the check below, a quota, an I/O error)
// and its ranks went on to different collectives and hung in H5Fclose. Now such a failure is
// this rank's own, and the ranks agree on it before the file is published (publish_together).
// Returns the temporary and each dataset's offset in it, on every rank.
template <class T>
std::pair<std::string, std::vector<std::int64_t>> lay_out_on_root(
    ShardedModel<T>& model, const std::string& path, const SaveContents<T>& c,
    const std::vector<std::uint64_t>& sums) {
  ProcessGroup& group = model.group();
  const long long file_bytes = file_bytes_of<T>(c.header, model.plan(), c.state_names.size());
  std::vector<std::int64_t> offsets(c.pieces.size(), -1);
  std::string tmp = on_root(group, "prepare " + file_text(path), [&] {
    std::string name = temporary_beside(path);
    try {
      require_space(name, file_bytes);
      offsets = lay_out(name, c.header, c.pieces, sums);
    } catch (...) {
      std::remove(name.c_str());
      throw;
    }
    return name;
  });
  broadcast_words(group, offsets.data(), offsets.size(), 0);
  return {std::move(tmp), std::move(offsets)};
}

// Once every rank has written its part of tmp (failure: this rank's error, or none), the ranks
// agree on the outcome; then every rank runs collective() and rank 0 runs on_root_first() on the
// complete file and publishes it to path. The temporary is removed on any error.
void publish_together(ProcessGroup& group, const std::string& path, const std::string& tmp,
                      const std::exception_ptr& failure, const std::function<void()>& collective,
                      const std::function<void()>& on_root_first) {
  try {
    raise_on_every_rank(group, "write " + file_text(path), failure);
    collective();
    on_root(group, "publish " + file_text(path), [&] {
      on_root_first();
      publish_file(tmp, path);
      return std::string();
    });
  } catch (...) {
    if (group.rank() == 0) {
      std::remove(tmp.c_str());  // the unfinished file: its name is this save's alone
    }
    throw;
  }
}

// Rank 0 of a background save: the checksums, known once every rank has summed its pieces, put
// into the datasets' attributes that lay_out made (the same size: nothing moves in the file).
void write_checksums(const std::string& tmp, const std::vector<std::string>& tensors,
                     const std::vector<std::uint64_t>& sums) {
  hdf5::QuietErrorStack quiet;
  const hdf5::Checker file(tmp, file_text(tmp));
  Handle fapl = access_list(file, MPI_COMM_NULL);
  file.check_status(H5Pset_libver_bounds(fapl.get(), H5F_LIBVER_V18, H5F_LIBVER_V18),
                    "H5Pset_libver_bounds", "the file access list");
  Handle handle(file.check(H5Fopen(tmp.c_str(), H5F_ACC_RDWR, fapl.get()), "H5Fopen", "the file"),
                H5Fclose);
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const std::string what = "the checksum of dataset " + tensors[i];
    Handle dataset(file.check(H5Dopen2(handle.get(), tensors[i].c_str(), H5P_DEFAULT), "H5Dopen2",
                              "dataset " + tensors[i]),
                   H5Dclose);
    Handle attribute(file.check(H5Aopen(dataset.get(), "checksum", H5P_DEFAULT), "H5Aopen", what),
                     H5Aclose);
    file.check_status(H5Awrite(attribute.get(), H5T_NATIVE_UINT64, &sums[i]), "H5Awrite", what);
  }
  file.check_status(handle.close(), "H5Fclose", "the file");
}

// Hybrid sharding: every replica holds the same pieces, so the first shard group does a save's
// work and the others learn its outcome from it (each replica group holds one writer). Without
// replicas (none, or a group of one) every rank does the work.
void by_first_replica(ProcessGroup* replicas, const std::string& task,
                      const std::function<void()>& work) {
  if (replicas == nullptr || replicas->size() == 1) {
    work();
    return;
  }
  std::exception_ptr failure;
  if (replicas->rank() == 0) {
    try {
      work();
    } catch (...) {
      failure = std::current_exception();
    }
  }
  raise_on_every_rank(*replicas, task, failure);
}

}  // namespace

// ---- save ----

template <class T>
void save_in_shard_group(const std::string& path, ShardedModel<T>& model,
                         const Optimizer<T>* optimizer, const CheckpointState& state) {
  ProcessGroup& group = model.group();
  const SaveContents<T> c = save_contents(model, optimizer, state, "save_checkpoint");
  const std::vector<std::uint64_t> sums = checksums(group, c.pieces);
  const auto [tmp, offsets] = lay_out_on_root(model, path, c, sums);
  std::exception_ptr failure;
  try {
    write_pieces(tmp, c.pieces, offsets, group.rank());
  } catch (...) {
    failure = std::current_exception();
  }
  publish_together(
      group, path, tmp, failure, [] {}, [] {});
}

template <class T>
void save_checkpoint(const std::string& path, ShardedModel<T>& model, const Optimizer<T>* optimizer,
                     const CheckpointState& state) {
  const ProfilingRegion region("fsdp::save_checkpoint");
  by_first_replica(model.replicas(), "save " + file_text(path),
                   [&] { save_in_shard_group(path, model, optimizer, state); });
}

// ---- save in the background ----

struct BackgroundSave::Job {
  // One piece of this rank, in the snapshot: count elements (0 for a piece this rank does not
  // write) at byte `at`, of flat index first of the tensor, going to byte `offset` of the file.
  struct Run {
    std::size_t at = 0;
    std::int64_t count = 0;
    std::int64_t first = 0;
    std::int64_t offset = -1;
  };
  std::optional<ProcessGroup> group;     // the shard group whose ranks write the file
  std::optional<ProcessGroup> replicas;  // hybrid sharding: the ranks told the outcome
  bool pending = false;
  std::string path;
  std::string tmp;
  int rank = 0;
  HostBlock snapshot;  // kept for the next save
  // The model's tracker, where the snapshot's bytes count (MemoryCategory::checkpoint_snapshot).
  std::shared_ptr<MemoryTracker> tracker;
  std::size_t element_bytes = 0;
  std::vector<std::string> tensors;  // every piece's dataset, in the same order on every rank
  std::vector<Run> runs;
  std::vector<std::uint64_t> sums;  // this rank's share of each tensor's checksum
  std::uint64_t (*checksum)(const char* data, std::int64_t count, std::int64_t first) = nullptr;
  std::thread thread;
  std::atomic<bool> ended{false};
  std::exception_ptr failure;  // of the thread

  // The thread: sums and writes every run, syncs the file. Only POSIX I/O and host arithmetic
  // on the snapshot, which nothing else touches until the thread is joined.
  void write() {
    try {
      write_into(tmp, runs.size(), rank, [&](int fd, std::size_t i) {
        const Run& run = runs[i];
        if (run.count == 0) {
          return;
        }
        const char* data = snapshot.data() + run.at;
        sums[i] = checksum(data, run.count, run.first);
        write_at(fd, data, static_cast<std::size_t>(run.count) * element_bytes, run.offset,
                 "dataset " + tensors[i], tmp);
      });
    } catch (...) {
      failure = std::current_exception();
    }
    ended.store(true, std::memory_order_release);
  }

  // Whether this rank's shard group writes the file (the first replica does, by_first_replica).
  bool writes() const { return !replicas || replicas->rank() == 0; }
  ProcessGroup* replica_group() { return replicas ? &*replicas : nullptr; }

  void join() {
    if (thread.joinable()) {
      thread.join();
    }
  }

  // A snapshot of at least `bytes`, counted by `owner`: the one kept from the last save when it
  // is large enough. Only while no thread reads it.
  void hold_snapshot(const std::shared_ptr<MemoryTracker>& owner, std::size_t bytes) {
    if (snapshot.size() < bytes) {
      drop_snapshot();  // the old one goes before the new one comes
      snapshot = HostBlock(bytes, HostBlock::Pages::huge);
    }
    if (tracker != owner) {
      if (tracker) {
        tracker->freed(MemoryCategory::checkpoint_snapshot,
                       static_cast<std::int64_t>(snapshot.size()));
      }
      tracker = owner;
      tracker->allocated(MemoryCategory::checkpoint_snapshot,
                         static_cast<std::int64_t>(snapshot.size()));
    }
  }

  void drop_snapshot() {
    if (tracker) {
      tracker->freed(MemoryCategory::checkpoint_snapshot,
                     static_cast<std::int64_t>(snapshot.size()));
      tracker.reset();
    }
    snapshot = HostBlock();
  }

  // A save still pending is abandoned: the thread is joined (it reads the snapshot, which goes
  // with the job) and rank 0 removes the temporary; nothing is published.
  ~Job() {
    join();
    if (pending && writes() && rank == 0 && !tmp.empty()) {
      std::remove(tmp.c_str());
    }
    drop_snapshot();
  }
};

namespace {

// The writers' part of save_checkpoint_in_background: contents, snapshot, layout, thread.
template <class T>
void start_writing(BackgroundSave::Job& job, ShardedModel<T>& model, const Optimizer<T>* optimizer,
                   const CheckpointState& state) {
  ProcessGroup& group = model.group();
  const SaveContents<T> c = save_contents(model, optimizer, state, "save_checkpoint_in_background");
  const std::size_t n = c.pieces.size();
  std::size_t bytes = 0;
  for (const Piece<T>& piece : c.pieces) {
    bytes += piece.counted ? static_cast<std::size_t>(piece.count) * sizeof(T) : 0;
  }
  job.hold_snapshot(model.tracker(), bytes);
  job.tensors.assign(n, std::string());
  job.runs.assign(n, BackgroundSave::Job::Run());
  job.sums.assign(n, 0);
  std::size_t at = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const Piece<T>& piece = c.pieces[i];
    job.tensors[i] = piece.tensor;
    if (!piece.counted || piece.count == 0) {
      continue;
    }
    BackgroundSave::Job::Run& run = job.runs[i];
    run.at = at;
    run.count = piece.count;
    run.first = piece.first;
    Kokkos::deep_copy(host_view(reinterpret_cast<T*>(job.snapshot.data() + at),
                                static_cast<std::size_t>(piece.count)),
                      piece.view);
    at += static_cast<std::size_t>(piece.count) * sizeof(T);
  }
  // The checksums are not known yet: the file is laid out with zeros, which finish replaces.
  auto [tmp, offsets] = lay_out_on_root(model, job.path, c, std::vector<std::uint64_t>(n, 0));
  for (std::size_t i = 0; i < n; ++i) {
    job.runs[i].offset = offsets[i] + job.runs[i].first * static_cast<std::int64_t>(sizeof(T));
  }
  job.tmp = std::move(tmp);
  job.rank = group.rank();
  job.element_bytes = sizeof(T);
  job.checksum = &host_checksum<T>;
  job.failure = nullptr;
  job.ended.store(false);
  job.thread = std::thread([&job] { job.write(); });
}

}  // namespace

BackgroundSave::BackgroundSave() = default;
BackgroundSave::~BackgroundSave() = default;
BackgroundSave::BackgroundSave(BackgroundSave&&) noexcept = default;
BackgroundSave& BackgroundSave::operator=(BackgroundSave&&) noexcept = default;

bool BackgroundSave::pending() const {
  return job_ && job_->pending;
}

const std::string& BackgroundSave::path() const {
  static const std::string none;
  return job_ ? job_->path : none;
}

std::int64_t BackgroundSave::snapshot_bytes() const {
  return job_ ? static_cast<std::int64_t>(job_->snapshot.size()) : 0;
}

bool BackgroundSave::try_finish() {
  if (!pending()) {
    return true;
  }
  Job& job = *job_;
  int ended = !job.writes() || job.ended.load(std::memory_order_acquire) ? 1 : 0;
  job.group->all_reduce(Kokkos::DefaultHostExecutionSpace(), host_view(&ended, 1), ReduceOp::min);
  if (job.replicas) {
    job.replicas->all_reduce(Kokkos::DefaultHostExecutionSpace(), host_view(&ended, 1),
                             ReduceOp::min);
  }
  if (ended == 0) {
    return false;
  }
  finish();
  return true;
}

void BackgroundSave::finish() {
  if (!pending()) {
    return;
  }
  const ProfilingRegion region("fsdp::finish_background_save");
  Job& job = *job_;
  job.pending = false;  // whatever happens now, this save is over
  by_first_replica(job.replica_group(), "save " + file_text(job.path), [&] {
    job.join();
    ProcessGroup& group = *job.group;
    publish_together(
        group, job.path, job.tmp, job.failure,
        [&] { all_reduce_wrapping_sums(group, job.sums.data(), job.sums.size()); },
        [&] { write_checksums(job.tmp, job.tensors, job.sums); });
  });
}

template <class T>
void save_checkpoint_in_background(BackgroundSave& save, const std::string& path,
                                   ShardedModel<T>& model, const Optimizer<T>* optimizer,
                                   const CheckpointState& state) {
  const ProfilingRegion region("fsdp::save_checkpoint_in_background");
  save.finish();
  if (!save.job_) {
    save.job_ = std::make_unique<BackgroundSave::Job>();
  }
  BackgroundSave::Job& job = *save.job_;
  ProcessGroup* replicas = model.replicas();
  job.group = model.group();
  job.replicas.reset();
  if (replicas != nullptr && replicas->size() > 1) {
    job.replicas = *replicas;
  }
  job.path = path;
  job.tmp.clear();
  // The writers fail together, before any thread started, or none does.
  by_first_replica(job.replica_group(), "save " + file_text(path),
                   [&] { start_writing(job, model, optimizer, state); });
  job.pending = true;
}

template <class T>
long long checkpoint_file_bytes(ShardedModel<T>& model, const Optimizer<T>* optimizer,
                                const CheckpointState& state) {
  return file_bytes_of<T>(header_for(model, optimizer, state), model.plan(),
                          optimizer != nullptr ? optimizer->state_names().size() : 0);
}

// ---- load ----

template <class T>
CheckpointHeader load_checkpoint(const std::string& path, ShardedModel<T>& model,
                                 Optimizer<T>* optimizer, const StatefulObjects& objects) {
  const ProfilingRegion region("fsdp::load_checkpoint");
  ProcessGroup& group = model.group();
  CheckpointHeader header = agreed_header(group, path);

  std::vector<std::string> lines;
  std::vector<std::string> state_names;
  if (optimizer != nullptr) {
    if (header.optimizer.empty()) {
      lines.push_back(
          "the file holds no optimizer state; load it without an optimizer to take "
          "its parameters only");
    } else if (header.optimizer != optimizer->name()) {
      lines.push_back("optimizer " + header.optimizer + " in the file, " + optimizer->name() +
                      " given");
    } else if (header.optimizer_steps > 0) {
      state_names = optimizer->state_names();
    }
  }
  const auto tensors = listed_tensors(model.plan().parameters(), state_names);
  std::vector<CheckpointTensor> expected;
  for (const ListedTensor& tensor : tensors) {
    expected.push_back(expected_tensor<T>(tensor.name, *tensor.parameter));
  }
  const auto found = differences(header.tensors, expected,
                                 optimizer == nullptr ? std::string(kOptimizerGroup) + "/" : "");
  lines.insert(lines.end(), found.begin(), found.end());
  std::vector<std::string> lacking;
  for (const auto& [name, object] : objects) {
    require(object != nullptr, "load_checkpoint: object '" + name + "' is a null pointer",
            ErrorKind::usage);
    if (header.objects.count(name) == 0) {
      lacking.push_back("'" + name + "'");
    }
  }
  if (!lacking.empty()) {
    std::vector<std::string> held;
    for (const auto& entry : header.objects) {
      held.push_back("'" + entry.first + "'");
    }
    lines.push_back("no state for object" + std::string(lacking.size() > 1 ? "s " : " ") +
                    join(lacking, ", ") + " in the file (it holds " +
                    (held.empty() ? std::string("none") : join(held, ", ")) + ")");
  }
  if (!lines.empty()) {
    throw Error(ErrorKind::mismatch, file_text(path) +
                                         " does not match the model; nothing was "
                                         "loaded:\n  " +
                                         join(lines, "\n  "));
  }
  // Each object accepts its state on every rank, or nothing changes anywhere.
  for (const auto& [name, object] : objects) {
    on_every_rank(
        group, "load object '" + name + "' from " + file_text(path),
        [&, &name = name, object = object] { object->check_state_dict(header.objects.at(name)); });
  }

  // Optimizer state the pieces do not have yet (a resume's new optimizer has none) is made now,
  // counted as optimizer state, and filled by read_pieces (directly, where the host can write
  // it); it joins the parameters only when every check passed.
  auto pieces = pieces_of(model, state_names, [&](ShardedParameter<T>& p, std::size_t k) {
    const DeviceView<T>* state = optimizer->state().find(p.name(), state_names[k]);
    return state != nullptr ? *state : DeviceView<T>();
  });
  std::vector<TrackedView<T>> new_state(pieces.size());
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    ShardedParameter<T>& p = model.parameter(tensors[i].parameter->name);
    if (tensors[i].state > 0 && p.shard_size() > 0 && pieces[i].view.data() == nullptr) {
      new_state[i] = p.make_optimizer_state(state_names[tensors[i].state - 1], false);
      pieces[i].view = new_state[i].view();
      pieces[i].fresh = true;
    }
  }
  std::vector<TrackedView<T>> new_pieces = read_into_new_pieces(model, pieces);
  read_pieces<T>(
      group, path, "/", pieces, header.tensors, [](const std::string& name) { return name; }, true);
  adopt_new_pieces(model, new_pieces);
  if (optimizer != nullptr) {
    // Every check passed: the new state goes to the optimizer.
    for (std::size_t i = 0; i < tensors.size(); ++i) {
      if (new_state[i].allocated()) {
        optimizer->state().adopt(tensors[i].parameter->name, state_names[tensors[i].state - 1],
                                 std::move(new_state[i]));
      }
    }
    // A file saved before the first step holds no state: moments from this optimizer's own
    // earlier steps must not survive beside a step count of 0.
    if (state_names.empty()) {
      optimizer->state().clear();
    }
    optimizer->set_step_count(header.optimizer_steps);
  }
  for (const auto& [name, object] : objects) {
    object->load_state_dict(header.objects.at(name));
  }
  return header;
}

template <class T>
void load_parameters(const std::string& path, ShardedModel<T>& model, const std::string& group) {
  ProcessGroup& process_group = model.group();
  // The root learns whether the file is a checkpoint (tensors under "model", with checksums)
  // or a plain file of tensors, and lists them.
  const Json answer = Json::parse(on_root(process_group, "read '" + path + "'", [&] {
    hdf5::QuietErrorStack quiet;
    const hdf5::Checker file(path, "file '" + path + "'");
    Handle handle = open_file(file, MPI_COMM_NULL, "HDF5 file");
    Handle root = open_group(file, handle.get(), "/");
    CheckpointHeader header;
    const bool is_checkpoint = hdf5::has_attribute(file, root.get(), "format");
    if (is_checkpoint) {
      header = read_header(hdf5::Checker(path, file_text(path)), handle.get());
    } else {
      header.tensors = list_tensors(file, handle.get(), group, "");
    }
    return Json{{"checkpoint", is_checkpoint}, {"header", to_json(header)}}.dump();
  }));
  const CheckpointHeader header = header_from_json(answer.at("header"));
  const bool checkpoint = answer.at("checkpoint").get<bool>();
  std::vector<CheckpointTensor> in_file;
  for (const CheckpointTensor& t : header.tensors) {
    if (!checkpoint) {
      in_file.push_back(t);
    } else if (t.name.rfind(std::string(kModelGroup) + "/", 0) == 0) {
      in_file.push_back(t);
      in_file.back().name = t.name.substr(std::string(kModelGroup).size() + 1);
    }
  }
  std::vector<CheckpointTensor> expected;
  for (const ParameterInfo& info : model.plan().parameters()) {
    expected.push_back(expected_tensor<T>(info.name, info));
  }
  const auto lines = differences(in_file, expected, "");
  if (!lines.empty()) {
    throw Error(ErrorKind::mismatch, "'" + path +
                                         "' does not match the model; nothing was "
                                         "loaded:\n  " +
                                         join(lines, "\n  "));
  }
  auto pieces =
      pieces_of(model, {}, [](ShardedParameter<T>&, std::size_t) { return DeviceView<T>(); });
  const std::string prefix =
      checkpoint ? std::string("/") + kModelGroup + "/" : (group == "/" ? "/" : group + "/");
  std::vector<TrackedView<T>> new_pieces = read_into_new_pieces(model, pieces);
  read_pieces<T>(
      process_group, path, prefix, pieces, in_file,
      [](const std::string& name) { return name.substr(std::string(kModelGroup).size() + 1); },
      checkpoint);
  adopt_new_pieces(model, new_pieces);
}

// ---- serial tools ----

CheckpointHeader read_checkpoint_header(const std::string& path) {
  hdf5::QuietErrorStack quiet;
  const hdf5::Checker file(path, file_text(path));
  Handle handle = open_file(file, MPI_COMM_NULL);
  return read_header(file, handle.get());
}

namespace {

// A checkpoint holds every tensor its own header lists: a model tensor for each parameter of its
// plan, in the parameter's shape, and once its optimizer has stepped, that optimizer's state of
// each parameter. Error (kind io) naming what is missing (a checkpoint whose model group was
// emptied passed verify: every checksum of nothing matched).
void require_listed_tensors(const hdf5::Checker& file, const CheckpointHeader& header) {
  std::vector<std::string> states;
  std::vector<ParameterInfo> parameters;
  try {
    parameters = plan_from_json(header.plan_json, file.file() + "'s plan").parameters();
    if (!header.optimizer.empty() && header.optimizer_steps > 0) {
      states = Optimizer<double>(header.optimizer, header.optimizer_settings).state_names();
    }
  } catch (const Error& error) {
    throw Error(ErrorKind::io, file.file() +
                                   " is damaged or not written by fsdp: its header does not say "
                                   "which tensors it holds (" +
                                   error.message() + ")");
  }
  std::map<std::string, const CheckpointTensor*> held;
  for (const CheckpointTensor& tensor : header.tensors) {
    held[tensor.name] = &tensor;
  }
  std::vector<std::string> missing;
  for (const ListedTensor& tensor : listed_tensors(parameters, states)) {
    const std::vector<std::int64_t>& shape = tensor.parameter->shape;
    const auto found = held.find(tensor.name);
    if (found == held.end()) {
      missing.push_back(tensor.name + " " + shape_text(shape));
    } else if (found->second->shape != shape) {
      missing.push_back(tensor.name + " " + shape_text(shape) + " (the file's has shape " +
                        shape_text(found->second->shape) + ")");
    }
  }
  if (!missing.empty()) {
    throw Error(ErrorKind::io, file.file() + " is damaged: it lacks " +
                                   std::to_string(missing.size()) +
                                   " of the tensors its header "
                                   "lists: " +
                                   join(missing, ", "));
  }
}

// Calls fn(file, tensor, host View of all its elements) for every tensor of header (read from the
// open file) whose name starts with prefix, one at a time, and only for tensors whose data matches
// its checksum. The damaged ones are named at the end, in one Error (kind io) that says outcome;
// then the file must hold every tensor its header lists (require_listed_tensors).
template <class Fn>
void for_each_tensor(const hdf5::Checker& file, hid_t handle, const CheckpointHeader& header,
                     const std::string& prefix, const std::string& outcome, Fn&& fn) {
  std::vector<std::string> damaged;
  const auto if_sound = [&](const CheckpointTensor& tensor, const auto& values) {
    if (checksum_matches(tensor, partial_checksum(values, 0))) {
      fn(file, tensor, values);
    } else {
      damaged.push_back(damaged_text(tensor));
    }
  };
  for (const CheckpointTensor& tensor : header.tensors) {
    if (tensor.name.rfind(prefix, 0) != 0) {
      continue;
    }
    const std::string what = "dataset " + tensor.name;
    Handle dataset(file.check(H5Dopen2(handle, tensor.name.c_str(), H5P_DEFAULT), "H5Dopen2", what),
                   H5Dclose);
    // What the file declares is allocated only when the file holds it (a few bytes declared
    // 2^32 fp64 elements, 32 GiB; found by fuzz_checkpoint_structured).
    hdf5::require_stored_in_file(file, dataset.get(), what);
    std::int64_t numel = 1;
    for (std::int64_t extent : tensor.shape) {
      if (extent != 0 && numel > std::numeric_limits<std::int64_t>::max() / extent) {
        throw Error(ErrorKind::io, file.file() + ": " + what + " has shape " +
                                       shape_text(tensor.shape) + ": more elements than 2^63");
      }
      numel *= extent;
    }
    if (tensor.dtype == "fp32") {
      Kokkos::View<float*, Kokkos::HostSpace> values("fsdp::checkpoint_tensor",
                                                     static_cast<std::size_t>(numel));
      file.check_status(
          H5Dread(dataset.get(), H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data()),
          "H5Dread", what);
      if_sound(tensor, values);
    } else if (tensor.dtype == "fp64") {
      Kokkos::View<double*, Kokkos::HostSpace> values("fsdp::checkpoint_tensor",
                                                      static_cast<std::size_t>(numel));
      file.check_status(
          H5Dread(dataset.get(), H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data()),
          "H5Dread", what);
      if_sound(tensor, values);
    } else {
      throw Error(ErrorKind::io, file.file() + ": " + what + " has dtype " + tensor.dtype +
                                     "; checkpoints hold fp32 and fp64 tensors");
    }
  }
  if (!damaged.empty()) {
    throw damaged_error(file.file(), damaged, outcome);
  }
  require_listed_tensors(file, header);
}

// The same for a checkpoint this fsdp reads, opened here.
template <class Fn>
void for_each_tensor(const std::string& path, const std::string& prefix, const std::string& outcome,
                     Fn&& fn) {
  hdf5::QuietErrorStack quiet;
  const hdf5::Checker file(path, file_text(path));
  Handle handle = open_file(file, MPI_COMM_NULL);
  const CheckpointHeader header = read_header(file, handle.get());
  for_each_tensor(file, handle.get(), header, prefix, outcome, std::forward<Fn>(fn));
}

}  // namespace

void verify_checkpoint(const std::string& path) {
  for_each_tensor(path, "", "", [](const hdf5::Checker&, const CheckpointTensor&, const auto&) {});
}

void export_parameters(const std::string& checkpoint, const std::string& output) {
  require_not_input(output, "export_parameters: the output", checkpoint, "the checkpoint");
  const std::string tmp = temporary_beside(output);
  try {
    hdf5::QuietErrorStack quiet;
    const hdf5::Checker out(tmp, "file '" + tmp + "'");
    Handle handle = create_file(out);
    const std::string prefix = std::string(kModelGroup) + "/";
    for_each_tensor(checkpoint, prefix, "nothing was written",
                    [&](const hdf5::Checker&, const CheckpointTensor& tensor, const auto& values) {
                      using Element = typename std::decay_t<decltype(values)>::non_const_value_type;
                      const std::string name = tensor.name.substr(prefix.size());
                      Handle dataset = create_dataset(out, handle.get(), name, tensor.shape,
                                                      stored_type<Element>());
                      out.check_status(H5Dwrite(dataset.get(), memory_type<Element>(), H5S_ALL,
                                                H5S_ALL, H5P_DEFAULT, values.data()),
                                       "H5Dwrite", "dataset " + name);
                    });
    out.check_status(handle.close(), "H5Fclose", "the file");
    publish_file(tmp, output);
  } catch (...) {
    std::remove(tmp.c_str());
    throw;
  }
}

CheckpointHeader upgrade_checkpoint(const std::string& old_path, const std::string& new_path,
                                    const std::function<void()>& reading_trusted) {
  hdf5::QuietErrorStack quiet;
  const hdf5::Checker file(old_path, file_text(old_path));
  Handle handle = open_file(file, MPI_COMM_NULL);
  {
    Handle root = open_group(file, handle.get(), "/");
    if (!hdf5::is_variable_string_attribute(file, root.get(), "format")) {
      // Not format 1: read_header says what it is (not a checkpoint, or damaged), or it is one
      // this fsdp loads as it is.
      const CheckpointHeader current = read_header(file, handle.get());
      throw Error(ErrorKind::io, file.file() + " is already of format version " +
                                     std::to_string(current.format_version) + "; load it as it is");
    }
  }
  // Format 1: its variable-length strings are read from the global heap, trusting the file.
  if (reading_trusted) {
    reading_trusted();
  }
  const CheckpointHeader old = read_header(file, handle.get(), Strings::trusted_variable);
  CheckpointHeader header = old;
  header.format_version = kCheckpointFormatVersion;
  header.library_version = FSDP_VERSION_STRING;  // the fsdp that writes the new file
  check_strings(header, "upgrade_checkpoint: " + file.file());

  long long file_bytes = header_bytes(header, header.tensors.size());
  for (const CheckpointTensor& tensor : header.tensors) {
    file_bytes += element_count(tensor.shape) * (tensor.dtype == "fp32" ? 4 : 8);
  }
  const std::string tmp = temporary_beside(new_path);
  try {
    require_space(tmp, file_bytes);
    const hdf5::Checker out(tmp, file_text(tmp));
    Handle created = create_file(out);
    write_header(out, created.get(), header);
    // Only data that matches its checksum is carried over (for_each_tensor): the new file's
    // checksums vouch for it.
    for_each_tensor(
        file, handle.get(), old, "", "nothing was written",
        [&](const hdf5::Checker&, const CheckpointTensor& tensor, const auto& values) {
          using Element = typename std::decay_t<decltype(values)>::non_const_value_type;
          const std::string what = "dataset " + tensor.name;
          Handle dataset =
              create_dataset(out, created.get(), tensor.name, tensor.shape, stored_type<Element>());
          out.check_status(H5Dwrite(dataset.get(), memory_type<Element>(), H5S_ALL, H5S_ALL,
                                    H5P_DEFAULT, values.data()),
                           "H5Dwrite", what);
          hdf5::write_attribute<std::uint64_t>(out, dataset.get(), "checksum", tensor.checksum);
        });
    out.check_status(H5Fflush(created.get(), H5F_SCOPE_GLOBAL), "H5Fflush", "the file");
    out.check_status(created.close(), "H5Fclose", "the file");
    publish_file(tmp, new_path);
  } catch (...) {
    std::remove(tmp.c_str());
    throw;
  }
  return old;
}

template void save_checkpoint<float>(const std::string&, ShardedModel<float>&,
                                     const Optimizer<float>*, const CheckpointState&);
template void save_checkpoint<double>(const std::string&, ShardedModel<double>&,
                                      const Optimizer<double>*, const CheckpointState&);
template long long checkpoint_file_bytes<float>(ShardedModel<float>&, const Optimizer<float>*,
                                                const CheckpointState&);
template long long checkpoint_file_bytes<double>(ShardedModel<double>&, const Optimizer<double>*,
                                                 const CheckpointState&);
template void save_checkpoint_in_background<float>(BackgroundSave&, const std::string&,
                                                   ShardedModel<float>&, const Optimizer<float>*,
                                                   const CheckpointState&);
template void save_checkpoint_in_background<double>(BackgroundSave&, const std::string&,
                                                    ShardedModel<double>&, const Optimizer<double>*,
                                                    const CheckpointState&);
template CheckpointHeader load_checkpoint<float>(const std::string&, ShardedModel<float>&,
                                                 Optimizer<float>*, const StatefulObjects&);
template CheckpointHeader load_checkpoint<double>(const std::string&, ShardedModel<double>&,
                                                  Optimizer<double>*, const StatefulObjects&);
template void load_parameters<float>(const std::string&, ShardedModel<float>&, const std::string&);
template void load_parameters<double>(const std::string&, ShardedModel<double>&,
                                      const std::string&);

}  // namespace fsdp
