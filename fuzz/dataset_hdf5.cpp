// fsdp-train's data files (--data FILE --features features --labels labels), fed raw bytes: any
// file gives a usable training set or fsdp::Error and leaves no HDF5 object open. Mutated HDF5
// bytes mostly exercise libhdf5's own parser; dataset_structured reaches fsdp's checks.
#include <cstdint>
#include <string>

#include "fsdp-train/dataset.hpp"
#include "open_hdf5_objects.hpp"
#include "reader_contract.hpp"
#include "scratch_file.hpp"
#include "training_data_checks.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string path = fsdp_fuzz::scratch_file("data.h5", data, size);
  const auto dataset = fsdp_fuzz::value_or_error(
      "fsdp_train::read_hdf5", [&] { return fsdp_train::read_hdf5(path, "features", "labels"); });
  fsdp_fuzz::expect_no_open_hdf5_objects("fsdp_train::read_hdf5");
  if (dataset) {
    fsdp_fuzz::expect_usable(*dataset);
  }
  return 0;
}
