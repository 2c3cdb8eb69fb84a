// Plan files. HDF5 layout (format_version 2), all in the root group so h5dump shows it at once:
//   user block  512 bytes: fsdp's header (below), which HDF5 readers skip
//   attributes  format = "fsdp-sharding-plan", format_version (int32) = 2, strategy, world_size
//               (int32); the strings fixed-length
//   datasets    names, layers, dtypes, placements (fixed-length strings, NUL-terminated, one per
//               parameter), owner_rank (int32, -1 unless placed whole), always_gather (int8),
//               numel (int64), ndims (int32), dims (int64, the shapes concatenated in order);
//               trainable (int8) only when a parameter is frozen (a file without it: all are
//               trainable, so plans written before frozen parameters read as they were)
// The file is made in memory (HDF5's core driver) and written by fsdp itself, so HDF5 never
// writes to disk: a full disk is a write() that fails, with no HDF5 state left behind (a failed
// H5Fclose on a full disk left the file open, and HDF5's exit handler crashed on it). A reader
// checks the header, the length and the checksum of the bytes before HDF5 parses any of them,
// and then opens the checked bytes from memory: a damaged file never reaches libhdf5.
#include "fsdp/io/plan_file.hpp"

#include <fcntl.h>
#include <hdf5.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <optional>

#include "fsdp/comm/on_root.hpp"
#include "fsdp/core/error.hpp"
#include "fsdp/core/text.hpp"
#include "fsdp/io/hdf5_handle.hpp"
#include "fsdp/io/publish_file.hpp"
#include "fsdp/io/tensor_checksum.hpp"
#include "fsdp/shard/plan_agreement.hpp"
#include "hdf5_attributes.hpp"

namespace fsdp {
namespace {

constexpr const char* kFormatName = "fsdp-sharding-plan";
constexpr const char* kExpected = "an fsdp sharding plan";

using hdf5::Handle;
using hdf5::QuietErrorStack;

// --- The header in the HDF5 user block ------------------------------------------------------
// Little-endian fields at the start of the 512-byte user block (the rest is zero):
//   [0, 8)   magic "fsdpplan"
//   [8, 12)  format version (kPlanHdf5FormatVersion)
//   [12, 16) user block size (512)
//   [16, 24) length of the whole file in bytes
//   [24, 32) checksum of the whole file with these 8 bytes zero (file_checksum)
constexpr std::size_t kUserBlock = kPlanHdf5UserBlockBytes;
constexpr char kMagic[8] = {'f', 's', 'd', 'p', 'p', 'l', 'a', 'n'};
constexpr std::size_t kVersionAt = 8, kUserBlockAt = 12, kLengthAt = 16, kChecksumAt = 24;
// The signature every HDF5 file starts with when it has no user block (a format 1 plan did).
constexpr char kHdf5Signature[8] = {'\x89', 'H', 'D', 'F', '\r', '\n', '\x1a', '\n'};

std::uint64_t get_le(const std::string& bytes, std::size_t at, std::size_t width) {
  std::uint64_t value = 0;
  for (std::size_t i = 0; i < width; ++i) {
    value |= std::uint64_t{static_cast<unsigned char>(bytes[at + i])} << (8 * i);
  }
  return value;
}

void put_le(std::string& bytes, std::size_t at, std::size_t width, std::uint64_t value) {
  for (std::size_t i = 0; i < width; ++i) {
    bytes[at + i] = static_cast<char>((value >> (8 * i)) & 0xFF);
  }
}

// The checksum of a plan file: the rule of tensor checksums (tensor_checksum.hpp) over the file
// read as little-endian 64-bit words (the last one padded with zeros), word i at index i, with the
// checksum field taken as zero. One changed bit changes one word, and mix64 is a bijection, so
// the sum changes; its length is stored beside it.
std::uint64_t file_checksum(const std::string& bytes) {
  std::uint64_t sum = 0;
  for (std::size_t at = 0, index = 0; at < bytes.size(); at += 8, ++index) {
    const std::uint64_t word =
        at == kChecksumAt ? 0 : get_le(bytes, at, std::min<std::size_t>(8, bytes.size() - at));
    sum += mix64(word ^ static_cast<std::uint64_t>(index) * 0x9E3779B97F4A7C15ULL);
  }
  return sum;
}

// Checks the header, length and checksum of a plan file's bytes; throws Error (kind io) saying
// what is wrong and what to do.
void check_header(const std::string& bytes, const std::string& path) {
  const std::string file = "plan file '" + path + "'";
  if (bytes.size() >= sizeof kHdf5Signature &&
      bytes.compare(0, sizeof kHdf5Signature, kHdf5Signature, sizeof kHdf5Signature) == 0) {
    throw Error(ErrorKind::io,
                file +
                    " is an HDF5 file without fsdp's checksummed plan header: a plan of "
                    "format version 1 (variable-length strings, no checksum; no longer read, "
                    "since a damaged one could crash HDF5) or another HDF5 file. This fsdp "
                    "reads HDF5 plans of format version " +
                    std::to_string(kPlanHdf5FormatVersion) +
                    ": make the plan again (fsdp-plan ... --output " + path +
                    "), or convert it with the fsdp that wrote it (fsdp-plan --plan " + path +
                    " --output plan.json) and load the JSON");
  }
  if (bytes.size() < kUserBlock || bytes.compare(0, sizeof kMagic, kMagic, sizeof kMagic) != 0) {
    throw Error(ErrorKind::io, file + " is not an fsdp sharding plan (it does not start with " +
                                   "fsdp's plan header)");
  }
  const std::uint64_t length = get_le(bytes, kLengthAt, 8);
  if (length != bytes.size()) {
    throw Error(ErrorKind::io, file + " is damaged: its header says " + std::to_string(length) +
                                   " bytes, the file has " + std::to_string(bytes.size()) +
                                   " (truncated or appended to); write the plan again");
  }
  const std::uint64_t version = get_le(bytes, kVersionAt, 4);
  const std::uint64_t stored = get_le(bytes, kChecksumAt, 8);
  if (stored != file_checksum(bytes)) {
    throw Error(ErrorKind::io,
                file + " is damaged: its checksum does not match its bytes" +
                    (version == static_cast<std::uint64_t>(kPlanHdf5FormatVersion)
                         ? std::string()
                         : " (or it is a plan of format version " + std::to_string(version) +
                               ", which this fsdp does not read)") +
                    "; it changed after fsdp wrote it: write the plan again");
  }
  if (version != static_cast<std::uint64_t>(kPlanHdf5FormatVersion) ||
      get_le(bytes, kUserBlockAt, 4) != kUserBlock) {
    throw Error(ErrorKind::io, file + " has format version " + std::to_string(version) +
                                   "; this fsdp reads HDF5 plans of format version " +
                                   std::to_string(kPlanHdf5FormatVersion));
  }
}

// --- Writing ----------------------------------------------------------------------------------

void write_dataset(const hdf5::Checker& file, hid_t group, const char* name, hid_t file_type,
                   hid_t memory_type, std::size_t count, const void* data) {
  const std::string what = std::string("dataset ") + name;
  const hsize_t extent = count;
  Handle space(file.check(H5Screate_simple(1, &extent, nullptr), "H5Screate_simple", what),
               H5Sclose);
  Handle dataset(file.check(H5Dcreate2(group, name, file_type, space.get(), H5P_DEFAULT,
                                       H5P_DEFAULT, H5P_DEFAULT),
                            "H5Dcreate2", what),
                 H5Dclose);
  if (count > 0) {
    file.check_status(H5Dwrite(dataset.get(), memory_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data),
                      "H5Dwrite", what);
  }
}

// Fixed-length strings one byte longer than the longest value, NUL-terminated (values hold no
// NUL: validate_parameters and the strategy name rule refuse them).
void write_strings(const hdf5::Checker& file, hid_t group, const char* name,
                   const std::vector<std::string>& values) {
  std::size_t longest = 1;
  for (const std::string& value : values) {
    longest = std::max(longest, value.size() + 1);
  }
  std::string packed(values.size() * longest, '\0');
  for (std::size_t i = 0; i < values.size(); ++i) {
    packed.replace(i * longest, values[i].size(), values[i]);
  }
  Handle type = hdf5::fixed_string_type(file, longest);
  write_dataset(file, group, name, type.get(), type.get(), values.size(), packed.data());
}

void write_plan_contents(const hdf5::Checker& file, hid_t root, const ShardingPlan& plan) {
  hdf5::write_fixed_string_attribute(file, root, "format", kFormatName);
  hdf5::write_attribute<std::int32_t>(file, root, "format_version", kPlanHdf5FormatVersion);
  hdf5::write_fixed_string_attribute(file, root, "strategy", plan.strategy());
  hdf5::write_attribute<std::int32_t>(file, root, "world_size", plan.world_size());

  const std::size_t n = plan.parameters().size();
  std::vector<std::string> names, layers, dtypes, placements;
  std::vector<std::int32_t> owners, ndims;
  std::vector<std::int8_t> always, trainable;
  std::vector<std::int64_t> numel, dims;
  for (std::size_t i = 0; i < n; ++i) {
    const ParameterInfo& p = plan.parameters()[i];
    names.push_back(p.name);
    layers.push_back(p.layer);
    dtypes.push_back(name_of(p.dtype));
    placements.push_back(name_of(plan.placements()[i].placement));
    owners.push_back(plan.placements()[i].owner_rank);
    always.push_back(p.always_gather ? 1 : 0);
    trainable.push_back(p.trainable ? 1 : 0);
    numel.push_back(p.numel());
    ndims.push_back(static_cast<std::int32_t>(p.shape.size()));
    dims.insert(dims.end(), p.shape.begin(), p.shape.end());
  }
  write_strings(file, root, "names", names);
  write_strings(file, root, "layers", layers);
  write_strings(file, root, "dtypes", dtypes);
  write_strings(file, root, "placements", placements);
  write_dataset(file, root, "owner_rank", H5T_STD_I32LE, H5T_NATIVE_INT32, n, owners.data());
  write_dataset(file, root, "always_gather", H5T_STD_I8LE, H5T_NATIVE_INT8, n, always.data());
  if (std::count(trainable.begin(), trainable.end(), 0) > 0) {
    write_dataset(file, root, "trainable", H5T_STD_I8LE, H5T_NATIVE_INT8, n, trainable.data());
  }
  write_dataset(file, root, "numel", H5T_STD_I64LE, H5T_NATIVE_INT64, n, numel.data());
  write_dataset(file, root, "ndims", H5T_STD_I32LE, H5T_NATIVE_INT32, n, ndims.data());
  write_dataset(file, root, "dims", H5T_STD_I64LE, H5T_NATIVE_INT64, dims.size(), dims.data());
}

// File access through HDF5's core driver: the file lives in memory, never on disk.
Handle in_memory_access(const hdf5::Checker& file) {
  Handle access(file.check(H5Pcreate(H5P_FILE_ACCESS), "H5Pcreate", "the file access list"),
                H5Pclose);
  file.check_status(H5Pset_fapl_core(access.get(), 64 * 1024, /*backing_store=*/0),
                    "H5Pset_fapl_core", "the file access list");
  return access;
}

// The whole plan file as bytes: the header, then the HDF5 file made in memory.
std::string plan_file_bytes(const std::string& path, const ShardingPlan& plan) {
  const hdf5::Checker file(path, "plan file '" + path + "'");
  Handle access = in_memory_access(file);
  Handle creation(file.check(H5Pcreate(H5P_FILE_CREATE), "H5Pcreate", "the file creation list"),
                  H5Pclose);
  file.check_status(H5Pset_userblock(creation.get(), kUserBlock), "H5Pset_userblock",
                    "the file creation list");
  const std::string memory_name = path + " (in memory)";
  Handle handle(
      file.check(H5Fcreate(memory_name.c_str(), H5F_ACC_TRUNC, creation.get(), access.get()),
                 "H5Fcreate", "the file"),
      H5Fclose);
  {
    Handle root(file.check(H5Gopen2(handle.get(), "/", H5P_DEFAULT), "H5Gopen2", "group /"),
                H5Gclose);
    write_plan_contents(file, root.get(), plan);
    file.check_status(root.close(), "H5Gclose", "group /");
  }
  file.check_status(H5Fflush(handle.get(), H5F_SCOPE_GLOBAL), "H5Fflush", "the file");
  // The image is the file after its user block (HDF5 leaves that to the writer).
  const ssize_t size = H5Fget_file_image(handle.get(), nullptr, 0);
  file.check_status(size < 0 ? -1 : 0, "H5Fget_file_image", "the file");
  std::string bytes(kUserBlock + static_cast<std::size_t>(size), '\0');
  file.check_status(
      H5Fget_file_image(handle.get(), bytes.data() + kUserBlock, static_cast<std::size_t>(size)) < 0
          ? -1
          : 0,
      "H5Fget_file_image", "the file");
  file.check_status(handle.close(), "H5Fclose", "the file");
  seal_plan_hdf5_bytes(bytes);
  return bytes;
}

// Writes bytes to a temporary of its own beside path (every write and the close checked), then
// makes it the file (publish_file); on any failure the temporary goes and path is as it was.
void write_file_atomically(const std::string& path, const std::string& bytes) {
  const std::string temporary = temporary_beside(path);
  try {
    const int fd = ::open(temporary.c_str(), O_WRONLY | O_TRUNC | O_CLOEXEC);
    require(fd >= 0, "cannot open '" + temporary + "': " + std::strerror(errno), ErrorKind::io);
    std::size_t done = 0;
    int error = 0;
    while (done < bytes.size() && error == 0) {
      const ssize_t wrote = ::write(fd, bytes.data() + done, bytes.size() - done);
      if (wrote > 0) {
        done += static_cast<std::size_t>(wrote);
      } else if (wrote < 0 && errno != EINTR) {
        error = errno;
      }
    }
    if (::close(fd) != 0 && error == 0) {
      error = errno;
    }
    require(error == 0,
            "cannot write plan file '" + path + "' (" + std::to_string(bytes.size()) +
                " bytes, through '" + temporary + "'): " + std::strerror(error) +
                "; the file is as it was",
            ErrorKind::io);
    publish_file(temporary, path);
  } catch (...) {
    std::remove(temporary.c_str());
    throw;
  }
}

// --- Reading ----------------------------------------------------------------------------------

// Reads the checked bytes of one plan: every size the file declares is checked against the
// file's own length before anything is allocated (a 10 KB plan declaring a 2^31-long dataset
// allocated 16 GB), and every type against the one fsdp writes (HDF5 would convert a float to an
// integer silently).
class PlanReader {
 public:
  PlanReader(const hdf5::Checker& file, hid_t root, std::size_t file_bytes)
      : file_(file), root_(root), file_bytes_(file_bytes) {}

  template <class T>
  std::vector<T> numbers(const char* name, hid_t stored_type, hid_t memory_type,
                         std::size_t count) const {
    Handle dataset = open(name, count, sizeof(T));
    Handle stored = type_of(dataset.get(), name);
    const htri_t equal = H5Tequal(stored.get(), stored_type);
    file_.check_status(equal, "H5Tequal", what(name));
    if (equal == 0) {
      fail(what(name) + " is not of the integer type fsdp writes");
    }
    std::vector<T> values(count);
    if (count > 0) {
      file_.check_status(
          H5Dread(dataset.get(), memory_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data()),
          "H5Dread", what(name));
    }
    return values;
  }

  std::vector<std::string> strings(const char* name, std::size_t count) const {
    Handle dataset = open(name, count, 0);
    Handle stored = type_of(dataset.get(), name);
    if (H5Tget_class(stored.get()) != H5T_STRING) {
      fail(what(name) + " is not a string dataset");
    }
    const htri_t variable = H5Tis_variable_str(stored.get());
    file_.check_status(variable, "H5Tis_variable_str", what(name));
    const std::size_t width = H5Tget_size(stored.get());
    if (variable != 0 || width == 0 || width > kMostNameBytes + 1 ||
        (count > 0 && width > file_bytes_ / count)) {
      fail(what(name) + " is not " + std::to_string(count) + " fixed-length strings of at most " +
           std::to_string(kMostNameBytes + 1) + " bytes");
    }
    std::string packed(count * width, '\0');
    if (count > 0) {
      file_.check_status(
          H5Dread(dataset.get(), stored.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, packed.data()),
          "H5Dread", what(name));
    }
    std::vector<std::string> values;
    values.reserve(count);
    for (std::size_t i = 0; i < count; ++i) {
      values.push_back(hdf5::from_fixed_string(packed.data() + i * width, width));
    }
    return values;
  }

  bool has(const char* name) const {
    const htri_t exists = H5Lexists(root_, name, H5P_DEFAULT);
    file_.check_status(exists, "H5Lexists", what(name));
    return exists != 0;
  }

  // The number of parameters: the length of "names", which every other dataset must share.
  std::size_t parameter_count() const {
    Handle dataset = open_any("names");
    return extent(dataset.get(), "names");
  }

  [[noreturn]] void fail(const std::string& message) const {
    throw Error(ErrorKind::io, file_.file() + ": " + message + "; it is not a plan fsdp wrote");
  }

 private:
  static std::string what(const char* name) { return std::string("dataset '") + name + "'"; }

  Handle open_any(const char* name) const {
    if (!has(name)) {
      throw Error(ErrorKind::io, file_.file() + " has no dataset '" + name + "'");
    }
    return Handle(file_.check(H5Dopen2(root_, name, H5P_DEFAULT), "H5Dopen2", what(name)),
                  H5Dclose);
  }

  // The length of a 1-D dataset stored whole in the file (contiguous or compact: no filters, no
  // chunks, nothing that would decode more bytes than the file holds).
  std::size_t extent(hid_t dataset, const char* name) const {
    Handle space(file_.check(H5Dget_space(dataset), "H5Dget_space", what(name)), H5Sclose);
    const int rank = H5Sget_simple_extent_ndims(space.get());
    file_.check_status(rank, "H5Sget_simple_extent_ndims", what(name));
    hsize_t length = 0;
    if (rank == 1) {
      file_.check_status(H5Sget_simple_extent_dims(space.get(), &length, nullptr),
                         "H5Sget_simple_extent_dims", what(name));
    }
    Handle creation(file_.check(H5Dget_create_plist(dataset), "H5Dget_create_plist", what(name)),
                    H5Pclose);
    const H5D_layout_t layout = H5Pget_layout(creation.get());
    if (rank != 1 || (layout != H5D_CONTIGUOUS && layout != H5D_COMPACT) || length > file_bytes_) {
      fail(what(name) + " is not a plain 1-D dataset of at most " + std::to_string(file_bytes_) +
           " entries");
    }
    return static_cast<std::size_t>(length);
  }

  // A 1-D dataset of exactly count entries of element_bytes (when known) that fit in the file.
  Handle open(const char* name, std::size_t count, std::size_t element_bytes) const {
    Handle dataset = open_any(name);
    const std::size_t length = extent(dataset.get(), name);
    if (length != count || (element_bytes > 0 && count > file_bytes_ / element_bytes)) {
      fail(what(name) + " should hold " + std::to_string(count) + " entries; it holds " +
           std::to_string(length));
    }
    return dataset;
  }

  Handle type_of(hid_t dataset, const char* name) const {
    return Handle(file_.check(H5Dget_type(dataset), "H5Dget_type", what(name)), H5Tclose);
  }

  const hdf5::Checker& file_;
  hid_t root_;
  std::size_t file_bytes_;
};

// An int32 attribute stored as fsdp stores it (not a float HDF5 would truncate silently).
int int32_attribute(const PlanReader& read, const hdf5::Checker& file, hid_t root,
                    const char* name) {
  const std::string what = std::string("attribute ") + name;
  Handle attribute = hdf5::open_attribute(file, root, name, kExpected);
  Handle stored(file.check(H5Aget_type(attribute.get()), "H5Aget_type", what), H5Tclose);
  const htri_t equal = H5Tequal(stored.get(), H5T_STD_I32LE);
  file.check_status(equal, "H5Tequal", what);
  if (equal == 0) {
    read.fail(what + " is not of the integer type fsdp writes");
  }
  return hdf5::read_attribute<std::int32_t>(file, root, name, kExpected);
}

ShardingPlan read_plan_contents(const hdf5::Checker& file, hid_t root, std::size_t file_bytes) {
  const PlanReader read(file, root, file_bytes);
  const std::string format =
      hdf5::read_fixed_string_attribute(file, root, "format", kExpected, kMostStrategyName + 1);
  if (format != kFormatName) {
    read.fail("its attribute 'format' is '" + format + "', not '" + kFormatName + "'");
  }
  const int version = int32_attribute(read, file, root, "format_version");
  if (version != kPlanHdf5FormatVersion) {
    read.fail("its attribute 'format_version' is " + std::to_string(version) +
              ", but its header says " + std::to_string(kPlanHdf5FormatVersion));
  }
  const std::string strategy =
      hdf5::read_fixed_string_attribute(file, root, "strategy", kExpected, kMostStrategyName + 1);
  const int world_size = int32_attribute(read, file, root, "world_size");

  const std::size_t n = read.parameter_count();
  const auto names = read.strings("names", n);
  const auto layers = read.strings("layers", n);
  const auto dtypes = read.strings("dtypes", n);
  const auto placements = read.strings("placements", n);
  const auto owners = read.numbers<std::int32_t>("owner_rank", H5T_STD_I32LE, H5T_NATIVE_INT32, n);
  const auto always = read.numbers<std::int8_t>("always_gather", H5T_STD_I8LE, H5T_NATIVE_INT8, n);
  const auto trainable = read.has("trainable") ? read.numbers<std::int8_t>(
                                                     "trainable", H5T_STD_I8LE, H5T_NATIVE_INT8, n)
                                               : std::vector<std::int8_t>(n, 1);
  const auto numel = read.numbers<std::int64_t>("numel", H5T_STD_I64LE, H5T_NATIVE_INT64, n);
  const auto ndims = read.numbers<std::int32_t>("ndims", H5T_STD_I32LE, H5T_NATIVE_INT32, n);
  std::size_t total_dims = 0;
  for (std::int32_t d : ndims) {
    if (d < 0) {
      read.fail("dataset 'ndims' holds " + std::to_string(d));
    }
    total_dims += static_cast<std::size_t>(d);  // n <= file bytes: no overflow
  }
  const auto dims = read.numbers<std::int64_t>("dims", H5T_STD_I64LE, H5T_NATIVE_INT64, total_dims);

  try {
    std::vector<ParameterInfo> parameters(n);
    std::vector<ParameterPlacement> where(n);
    std::size_t next_dim = 0;
    for (std::size_t i = 0; i < n; ++i) {
      ParameterInfo& p = parameters[i];
      p.name = names[i];
      p.layer = layers[i];
      p.dtype = parse_dtype(dtypes[i]);
      require(always[i] == 0 || always[i] == 1, "parameter #" + std::to_string(i) +
                                                    " has always_gather " +
                                                    std::to_string(always[i]) + " (0 or 1)");
      p.always_gather = always[i] != 0;
      require(trainable[i] == 0 || trainable[i] == 1,
              "parameter #" + std::to_string(i) + " has trainable " + std::to_string(trainable[i]) +
                  " (0 or 1)");
      p.trainable = trainable[i] != 0;
      p.shape.assign(dims.begin() + static_cast<std::ptrdiff_t>(next_dim),
                     dims.begin() + static_cast<std::ptrdiff_t>(next_dim + ndims[i]));
      next_dim += static_cast<std::size_t>(ndims[i]);
      where[i] = ParameterPlacement{parse_placement(placements[i]), owners[i]};
    }
    ShardingPlan plan(strategy, world_size, std::move(parameters), std::move(where));
    for (std::size_t i = 0; i < n; ++i) {
      require(plan.parameters()[i].numel() == numel[i],
              "parameter '" + names[i] + "' has " + std::to_string(numel[i]) +
                  " elements in dataset 'numel' but its shape gives " +
                  std::to_string(plan.parameters()[i].numel()));
    }
    return plan;
  } catch (const Error& error) {
    throw Error(ErrorKind::io, file.file() + " is inconsistent: " + message_of(error));
  }
}

// Opens checked bytes (check_header) from memory: HDF5 reads nothing from disk.
ShardingPlan read_plan_bytes(const std::string& path, const std::string& bytes) {
  const hdf5::Checker file(path, "plan file '" + path + "'");
  Handle access = in_memory_access(file);
  file.check_status(H5Pset_file_image(access.get(), const_cast<char*>(bytes.data()), bytes.size()),
                    "H5Pset_file_image", "the file access list");
  const std::string memory_name = path + " (in memory)";
  Handle handle(
      file.check(H5Fopen(memory_name.c_str(), H5F_ACC_RDONLY, access.get()), "H5Fopen", "the file"),
      H5Fclose);
  std::optional<ShardingPlan> plan;
  {
    Handle root(file.check(H5Gopen2(handle.get(), "/", H5P_DEFAULT), "H5Gopen2", "group /"),
                H5Gclose);
    plan.emplace(read_plan_contents(file, root.get(), bytes.size()));
    file.check_status(root.close(), "H5Gclose", "group /");
  }
  file.check_status(handle.close(), "H5Fclose", "the file");
  return std::move(*plan);
}

bool ends_with(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() &&
         text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

void seal_plan_hdf5_bytes(std::string& bytes) {
  require(bytes.size() >= kUserBlock,
          "an HDF5 plan file has at least its " + std::to_string(kUserBlock) +
              "-byte user block; these bytes are " + std::to_string(bytes.size()));
  bytes.replace(0, sizeof kMagic, kMagic, sizeof kMagic);
  put_le(bytes, kVersionAt, 4, static_cast<std::uint64_t>(kPlanHdf5FormatVersion));
  put_le(bytes, kUserBlockAt, 4, kUserBlock);
  put_le(bytes, kLengthAt, 8, bytes.size());
  put_le(bytes, kChecksumAt, 8, file_checksum(bytes));
}

void save_plan_hdf5(const std::string& path, const ShardingPlan& plan) {
  std::string bytes;
  {
    const QuietErrorStack quiet;
    bytes = plan_file_bytes(path, plan);
  }
  write_file_atomically(path, bytes);
}

ShardingPlan load_plan_hdf5(const std::string& path) {
  const std::string bytes = read_text_file(path, "plan file");
  check_header(bytes, path);
  const QuietErrorStack quiet;
  return read_plan_bytes(path, bytes);
}

void save_plan_json(const std::string& path, const ShardingPlan& plan) {
  write_file_atomically(path, plan_to_json(plan, 2) + "\n");
}

ShardingPlan load_plan_json(const std::string& path) {
  return plan_from_json(read_text_file(path, "plan file"), "file '" + path + "'");
}

void save_plan(const std::string& path, const ShardingPlan& plan) {
  if (ends_with(path, ".h5") || ends_with(path, ".hdf5")) {
    save_plan_hdf5(path, plan);
  } else if (ends_with(path, ".json")) {
    save_plan_json(path, plan);
  } else {
    throw Error(ErrorKind::io, "plan file '" + path + "' needs the extension .h5, .hdf5 or .json");
  }
}

ShardingPlan load_plan(const std::string& path) {
  if (ends_with(path, ".h5") || ends_with(path, ".hdf5")) {
    return load_plan_hdf5(path);
  }
  if (ends_with(path, ".json")) {
    return load_plan_json(path);
  }
  throw Error(ErrorKind::io, "plan file '" + path + "' needs the extension .h5, .hdf5 or .json");
}

ShardingPlan load_plan(const std::string& path, const std::vector<ParameterInfo>& parameters,
                       int world_size) {
  ShardingPlan plan = load_plan(path);
  check_plan_matches(plan, parameters, world_size, "'" + path + "'");
  return plan;
}

ShardingPlan load_plan(const std::string& path, const std::vector<ParameterInfo>& parameters,
                       ProcessGroup& group) {
  const int world_size = group.size();
  return agree_on_plan([&] { return load_plan(path, parameters, world_size); }, parameters, group);
}

void save_plan(const std::string& path, const ShardingPlan& plan, ProcessGroup& group) {
  on_root(group, "save the sharding plan", [&] {
    save_plan(path, plan);
    return std::string();
  });
}

}  // namespace fsdp
