// Checkpoints as fsdp-ckpt inspect and verify read them (read_checkpoint_header,
// verify_checkpoint), fed raw bytes: any file gives a header (and a verdict) or fsdp::Error, and
// leaves no HDF5 object open. Mutated HDF5 bytes mostly exercise libhdf5's own parser;
// checkpoint_structured reaches fsdp's checks.
#include <cstdint>
#include <string>

#include "fsdp/io/checkpoint.hpp"
#include "kokkos_for_fuzzing.hpp"
#include "open_hdf5_objects.hpp"
#include "reader_contract.hpp"
#include "scratch_file.hpp"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  fsdp_fuzz::initialize_kokkos();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string path = fsdp_fuzz::scratch_file("checkpoint.h5", data, size);
  const auto header = fsdp_fuzz::value_or_error("read_checkpoint_header",
                                                [&] { return fsdp::read_checkpoint_header(path); });
  fsdp_fuzz::expect_no_open_hdf5_objects("read_checkpoint_header");
  if (!header) {
    return 0;
  }
  if (header->format_version != fsdp::kCheckpointFormatVersion) {
    fsdp_fuzz::finding("read_checkpoint_header accepted format version " +
                       std::to_string(header->format_version));
  }
  (void)fsdp_fuzz::value_or_error("verify_checkpoint", [&] {
    fsdp::verify_checkpoint(path);
    return true;
  });
  fsdp_fuzz::expect_no_open_hdf5_objects("verify_checkpoint");
  return 0;
}
