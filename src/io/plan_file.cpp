// Plan files. HDF5 layout (format_version 1), all in the root group so h5dump shows it at once:
//   attributes  format = "fsdp-sharding-plan", format_version (int32), strategy (string),
//               world_size (int32)
//   datasets    names, layers, dtypes, placements (variable-length strings, one per parameter),
//               owner_rank (int32, -1 unless placed whole), always_gather (int8), numel (int64),
//               ndims (int32), dims (int64, the shapes concatenated in parameter order)
#include "fsdp/io/plan_file.hpp"

#include <hdf5.h>

#include <cstdio>
#include <fstream>
#include <sstream>

#include "fsdp/comm/on_root.hpp"
#include "fsdp/core/error.hpp"
#include "fsdp/core/text.hpp"
#include "fsdp/io/hdf5_handle.hpp"
#include "fsdp/io/publish_file.hpp"
#include "fsdp/shard/plan_agreement.hpp"
#include "hdf5_attributes.hpp"

namespace fsdp {
namespace {

constexpr const char* kFormatName = "fsdp-sharding-plan";

using hdf5::Handle;
using hdf5::QuietErrorStack;
using hdf5::read_string_attribute;
using hdf5::string_type;
using hdf5::write_string_attribute;

constexpr const char* kExpected = "an fsdp sharding plan";

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

void write_strings(const hdf5::Checker& file, hid_t group, const char* name,
                   const std::vector<std::string>& values) {
  std::vector<const char*> pointers;
  pointers.reserve(values.size());
  for (const std::string& value : values) {
    pointers.push_back(value.c_str());
  }
  Handle type = string_type(file);
  write_dataset(file, group, name, type.get(), type.get(), values.size(), pointers.data());
}

// Opens a 1-D dataset and checks its length: the plan's own consistency check.
Handle open_dataset(const hdf5::Checker& file, hid_t group, const char* name, std::size_t count) {
  const std::string what = std::string("dataset ") + name;
  const htri_t exists = H5Lexists(group, name, H5P_DEFAULT);
  file.check_status(exists, "H5Lexists", what);
  if (exists == 0) {
    throw Error(ErrorKind::io, "plan file '" + file.path() + "' has no dataset '" + name + "'");
  }
  Handle dataset(file.check(H5Dopen2(group, name, H5P_DEFAULT), "H5Dopen2", what), H5Dclose);
  Handle space(file.check(H5Dget_space(dataset.get()), "H5Dget_space", what), H5Sclose);
  const int rank = H5Sget_simple_extent_ndims(space.get());
  file.check_status(rank, "H5Sget_simple_extent_ndims", what);
  hsize_t extent = 0;
  if (rank == 1) {
    file.check_status(H5Sget_simple_extent_dims(space.get(), &extent, nullptr),
                      "H5Sget_simple_extent_dims", what);
  }
  if (rank != 1 || extent != count) {
    throw Error(ErrorKind::io, "plan file '" + file.path() + "': dataset '" + name +
                                   "' should be 1-D with " + std::to_string(count) +
                                   " entries; it is damaged or not an fsdp plan");
  }
  return dataset;
}

template <class T>
std::vector<T> read_numbers(const hdf5::Checker& file, hid_t group, const char* name,
                            hid_t memory_type, std::size_t count) {
  Handle dataset = open_dataset(file, group, name, count);
  std::vector<T> values(count);
  if (count > 0) {
    file.check_status(
        H5Dread(dataset.get(), memory_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data()),
        "H5Dread", std::string("dataset ") + name);
  }
  return values;
}

std::vector<std::string> read_strings(const hdf5::Checker& file, hid_t group, const char* name,
                                      std::size_t count) {
  const std::string what = std::string("dataset ") + name;
  Handle dataset = open_dataset(file, group, name, count);
  Handle stored(file.check(H5Dget_type(dataset.get()), "H5Dget_type", what), H5Tclose);
  const htri_t variable = H5Tis_variable_str(stored.get());
  file.check_status(variable, "H5Tis_variable_str", what);
  if (H5Tget_class(stored.get()) != H5T_STRING || variable == 0) {
    throw Error(ErrorKind::io, "plan file '" + file.path() + "': " + what +
                                   " is not a variable-length string dataset");
  }
  Handle type = string_type(file);
  std::vector<char*> pointers(count, nullptr);
  file.check_status(
      H5Dread(dataset.get(), type.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, pointers.data()), "H5Dread",
      what);
  std::vector<std::string> values;
  values.reserve(count);
  for (char* pointer : pointers) {
    values.emplace_back(pointer ? pointer : "");
  }
  Handle space(file.check(H5Dget_space(dataset.get()), "H5Dget_space", what), H5Sclose);
#if H5_VERSION_GE(1, 12, 0)
  file.check_status(H5Treclaim(type.get(), space.get(), H5P_DEFAULT, pointers.data()), "H5Treclaim",
                    what);
#else
  file.check_status(H5Dvlen_reclaim(type.get(), space.get(), H5P_DEFAULT, pointers.data()),
                    "H5Dvlen_reclaim", what);
#endif
  return values;
}

bool ends_with(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() &&
         text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// The finished temporary becomes the plan file (publish_file), or goes.
void rename_into_place(const std::string& from, const std::string& to) {
  try {
    publish_file(from, to);
  } catch (...) {
    std::remove(from.c_str());
    throw;
  }
}

void write_hdf5(const std::string& path, const ShardingPlan& plan) {
  const hdf5::Checker file(path, "plan file '" + path + "'");
  Handle handle(file.check(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT),
                           "H5Fcreate", "the file"),
                H5Fclose);
  Handle root(file.check(H5Gopen2(handle.get(), "/", H5P_DEFAULT), "H5Gopen2", "group /"),
              H5Gclose);
  write_string_attribute(file, root.get(), "format", kFormatName);
  hdf5::write_attribute<std::int32_t>(file, root.get(), "format_version", kPlanFormatVersion);
  write_string_attribute(file, root.get(), "strategy", plan.strategy());
  hdf5::write_attribute<std::int32_t>(file, root.get(), "world_size", plan.world_size());

  const std::size_t n = plan.parameters().size();
  std::vector<std::string> names, layers, dtypes, placements;
  std::vector<std::int32_t> owners, ndims;
  std::vector<std::int8_t> always;
  std::vector<std::int64_t> numel, dims;
  for (std::size_t i = 0; i < n; ++i) {
    const ParameterInfo& p = plan.parameters()[i];
    names.push_back(p.name);
    layers.push_back(p.layer);
    dtypes.push_back(name_of(p.dtype));
    placements.push_back(name_of(plan.placements()[i].placement));
    owners.push_back(plan.placements()[i].owner_rank);
    always.push_back(p.always_gather ? 1 : 0);
    numel.push_back(p.numel());
    ndims.push_back(static_cast<std::int32_t>(p.shape.size()));
    dims.insert(dims.end(), p.shape.begin(), p.shape.end());
  }
  write_strings(file, root.get(), "names", names);
  write_strings(file, root.get(), "layers", layers);
  write_strings(file, root.get(), "dtypes", dtypes);
  write_strings(file, root.get(), "placements", placements);
  write_dataset(file, root.get(), "owner_rank", H5T_STD_I32LE, H5T_NATIVE_INT32, n, owners.data());
  write_dataset(file, root.get(), "always_gather", H5T_STD_I8LE, H5T_NATIVE_INT8, n, always.data());
  write_dataset(file, root.get(), "numel", H5T_STD_I64LE, H5T_NATIVE_INT64, n, numel.data());
  write_dataset(file, root.get(), "ndims", H5T_STD_I32LE, H5T_NATIVE_INT32, n, ndims.data());
  write_dataset(file, root.get(), "dims", H5T_STD_I64LE, H5T_NATIVE_INT64, dims.size(),
                dims.data());
  file.check_status(root.close(), "H5Gclose", "group /");
  file.check_status(handle.close(), "H5Fclose", "the file");
}

ShardingPlan read_hdf5(const std::string& path) {
  const hdf5::Checker file(path, "plan file '" + path + "'");
  const htri_t is_hdf5 = H5Fis_hdf5(path.c_str());
  if (is_hdf5 <= 0) {
    throw Error(ErrorKind::io, "plan file '" + path + "' " +
                                   (is_hdf5 < 0 ? "cannot be opened" : "is not an HDF5 file"));
  }
  Handle handle(
      file.check(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), "H5Fopen", "the file"),
      H5Fclose);
  Handle root(file.check(H5Gopen2(handle.get(), "/", H5P_DEFAULT), "H5Gopen2", "group /"),
              H5Gclose);
  const std::string format = read_string_attribute(file, root.get(), "format", kExpected);
  if (format != kFormatName) {
    throw Error(ErrorKind::io,
                "plan file '" + path + "' has format '" + format + "', not '" + kFormatName + "'");
  }
  const int version =
      hdf5::read_attribute<std::int32_t>(file, root.get(), "format_version", kExpected);
  if (version != kPlanFormatVersion) {
    throw Error(ErrorKind::io, "plan file '" + path + "' has format version " +
                                   std::to_string(version) + "; this fsdp reads version " +
                                   std::to_string(kPlanFormatVersion));
  }
  const std::string strategy = read_string_attribute(file, root.get(), "strategy", kExpected);
  const int world_size =
      hdf5::read_attribute<std::int32_t>(file, root.get(), "world_size", kExpected);

  // The number of parameters is the length of "names"; every other dataset must agree with it.
  std::size_t n = 0;
  {
    const htri_t exists = H5Lexists(root.get(), "names", H5P_DEFAULT);
    file.check_status(exists, "H5Lexists", "dataset names");
    if (exists == 0) {
      throw Error(ErrorKind::io, "plan file '" + path + "' has no dataset 'names'");
    }
    Handle dataset(
        file.check(H5Dopen2(root.get(), "names", H5P_DEFAULT), "H5Dopen2", "dataset names"),
        H5Dclose);
    Handle space(file.check(H5Dget_space(dataset.get()), "H5Dget_space", "dataset names"),
                 H5Sclose);
    const hssize_t points = H5Sget_simple_extent_npoints(space.get());
    file.check_status(points < 0 ? -1 : 0, "H5Sget_simple_extent_npoints", "dataset names");
    n = static_cast<std::size_t>(points);
  }
  const auto names = read_strings(file, root.get(), "names", n);
  const auto layers = read_strings(file, root.get(), "layers", n);
  const auto dtypes = read_strings(file, root.get(), "dtypes", n);
  const auto placements = read_strings(file, root.get(), "placements", n);
  const auto owners =
      read_numbers<std::int32_t>(file, root.get(), "owner_rank", H5T_NATIVE_INT32, n);
  const auto always =
      read_numbers<std::int8_t>(file, root.get(), "always_gather", H5T_NATIVE_INT8, n);
  const auto numel = read_numbers<std::int64_t>(file, root.get(), "numel", H5T_NATIVE_INT64, n);
  const auto ndims = read_numbers<std::int32_t>(file, root.get(), "ndims", H5T_NATIVE_INT32, n);
  std::size_t total_dims = 0;
  for (std::int32_t d : ndims) {
    if (d < 0) {
      throw Error(ErrorKind::io,
                  "plan file '" + path + "': dataset 'ndims' holds " + std::to_string(d));
    }
    total_dims += static_cast<std::size_t>(d);
  }
  const auto dims =
      read_numbers<std::int64_t>(file, root.get(), "dims", H5T_NATIVE_INT64, total_dims);
  file.check_status(root.close(), "H5Gclose", "group /");
  file.check_status(handle.close(), "H5Fclose", "the file");

  try {
    std::vector<ParameterInfo> parameters(n);
    std::vector<ParameterPlacement> where(n);
    std::size_t next_dim = 0;
    for (std::size_t i = 0; i < n; ++i) {
      ParameterInfo& p = parameters[i];
      p.name = names[i];
      p.layer = layers[i];
      p.dtype = parse_dtype(dtypes[i]);
      p.always_gather = always[i] != 0;
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
    throw Error(ErrorKind::io, "plan file '" + path + "' is inconsistent: " + message_of(error));
  }
}

}  // namespace

void save_plan_hdf5(const std::string& path, const ShardingPlan& plan) {
  const QuietErrorStack quiet;
  const std::string temporary = temporary_beside(path);
  try {
    write_hdf5(temporary, plan);
  } catch (...) {
    std::remove(temporary.c_str());
    throw;
  }
  rename_into_place(temporary, path);
}

ShardingPlan load_plan_hdf5(const std::string& path) {
  const QuietErrorStack quiet;
  return read_hdf5(path);
}

void save_plan_json(const std::string& path, const ShardingPlan& plan) {
  const std::string temporary = temporary_beside(path);
  {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    require(static_cast<bool>(out), "cannot create plan file '" + temporary + "'", ErrorKind::io);
    out << plan_to_json(plan, 2) << '\n';
    out.close();
    if (!out) {
      std::remove(temporary.c_str());
      throw Error(ErrorKind::io, "cannot write plan file '" + temporary + "'");
    }
  }
  rename_into_place(temporary, path);
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
