// fsdp-train's data files, built from the fuzz input through the HDF5 API (hdf5_builder.hpp):
// "features" and "labels" of any type, rank, extent, layout, filter, allocation and fill, written
// completely, partly or not at all, or a group or a link in their place, beside other datasets.
// read_hdf5 must give a usable set or fsdp::Error and leave no HDF5 object open; it must refuse
// a dataset whose elements were never stored (HDF5 would read fill values: a writer that died
// half way), and a set it accepts holds exactly the values written when they were written as
// float64 features and int64 labels.
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>

#include "fsdp-train/dataset.hpp"
#include "hdf5_builder.hpp"
#include "open_hdf5_objects.hpp"
#include "reader_contract.hpp"
#include "training_data_checks.hpp"

namespace {

using fsdp_fuzz::BuiltDataset;
using fsdp_fuzz::FuzzInput;
using fsdp_fuzz::Intended;

// What stands at `name`: a dataset (most choices), a group, a soft link to the other dataset or
// to nothing, an external link to a file that does not exist.
std::optional<BuiltDataset> build_object(FuzzInput& in, hid_t file, const std::string& name,
                                         const Intended& intended) {
  switch (in.choice(12)) {
    case 8:
      fsdp_fuzz::Handle(
          fsdp_fuzz::built(H5Gcreate2(file, name.c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT)),
          H5Gclose);
      return std::nullopt;
    case 9:
      fsdp_fuzz::built_status(H5Lcreate_soft(name == "features" ? "labels" : "features", file,
                                             name.c_str(), H5P_DEFAULT, H5P_DEFAULT));
      return std::nullopt;
    case 10:
      fsdp_fuzz::built_status(
          H5Lcreate_soft("/nowhere", file, name.c_str(), H5P_DEFAULT, H5P_DEFAULT));
      return std::nullopt;
    case 11:
      fsdp_fuzz::built_status(H5Lcreate_external("/nonexistent/fsdp-fuzz.h5", "/x", file,
                                                 name.c_str(), H5P_DEFAULT, H5P_DEFAULT));
      return std::nullopt;
    default:
      return fsdp_fuzz::build_dataset(in, file, name, intended);
  }
}

// A set read from datasets written whole as float64 and int64 holds exactly those values.
void expect_values_written(const fsdp_train::Dataset& data, const BuiltDataset& features,
                           const BuiltDataset& labels) {
  if (!features.values_written_as_is || !labels.values_written_as_is ||
      features.stored != fsdp_fuzz::Stored::f64le || labels.stored != fsdp_fuzz::Stored::i64le) {
    return;
  }
  if (std::memcmp(data.features.data(), features.values.data(), features.values.size()) != 0 ||
      std::memcmp(data.labels.data(), labels.values.data(), labels.values.size()) != 0) {
    fsdp_fuzz::finding("read_hdf5 returned other values than the file holds");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  FuzzInput in(data, size);
  const std::string path = fsdp_fuzz::scratch_path("data-built.h5");
  std::optional<BuiltDataset> features, labels;
  try {
    fsdp::hdf5::QuietErrorStack quiet;
    fsdp_fuzz::BuiltFile file(path, in);
    features = build_object(in, file.get(), "features", Intended{H5T_IEEE_F64LE, {4, 3}});
    labels = build_object(in, file.get(), "labels", Intended{H5T_STD_I64LE, {4}});
    const int others = in.choice(3);
    for (int i = 0; i < others; ++i) {
      fsdp_fuzz::build_dataset(in, file.get(), "other" + std::to_string(i),
                               Intended{H5T_IEEE_F32LE, {2}});
    }
    file.close();
  } catch (const fsdp_fuzz::CannotBuild&) {
    fsdp_fuzz::expect_no_open_hdf5_objects("building the input file");
    return 0;
  }
  const auto dataset = fsdp_fuzz::value_or_error(
      "fsdp_train::read_hdf5", [&] { return fsdp_train::read_hdf5(path, "features", "labels"); });
  fsdp_fuzz::expect_no_open_hdf5_objects("fsdp_train::read_hdf5");
  if (!dataset) {
    return 0;
  }
  fsdp_fuzz::expect_usable(*dataset);
  for (const auto* built : {&features, &labels}) {
    if (*built && !(*built)->fully_stored) {
      fsdp_fuzz::finding(
          "read_hdf5 accepted a dataset whose elements were never stored (HDF5 "
          "read them as fill values)");
    }
  }
  if (features && labels) {
    expect_values_written(*dataset, *features, *labels);
  }
  return 0;
}
