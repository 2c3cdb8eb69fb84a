// Sharding plans in HDF5 (load_plan_hdf5), fed raw bytes: any file gives a plan or fsdp::Error,
// leaves no HDF5 object open, and a plan read is saved again (save_plan_hdf5) to a file that
// loads as the same plan.
//
// Each input is read in two modes: as it is, and resealed (seal_plan_hdf5_bytes: the header and
// the whole-file checksum recomputed over the mutated bytes, as a hostile writer would). As it is,
// almost every mutation stops at the checksum, before HDF5 parses a byte; resealed, the same
// mutation reaches libhdf5's parser and the plan's own checks behind it. FSDP_FUZZ_VERBOSE=1 names
// the mode of each verdict ("load_plan_hdf5 (resealed) refused it: ...").
#include <cstdint>
#include <string>

#include "fsdp/io/plan_file.hpp"
#include "open_hdf5_objects.hpp"
#include "reader_contract.hpp"
#include "scratch_file.hpp"

namespace {

// The reader's contract on the plan file at path; reader names the mode in findings.
void read_plan(const std::string& path, const std::string& reader) {
  const auto plan =
      fsdp_fuzz::value_or_error(reader.c_str(), [&] { return fsdp::load_plan_hdf5(path); });
  fsdp_fuzz::expect_no_open_hdf5_objects(reader.c_str());
  if (!plan) {
    return;
  }
  fsdp_fuzz::must_succeed("saving the plan and loading it again", [&] {
    const std::string again = fsdp_fuzz::scratch_path("plan-again.h5");
    fsdp::save_plan_hdf5(again, *plan);
    if (!(fsdp::load_plan_hdf5(again) == *plan)) {
      fsdp_fuzz::finding("the plan saved again loads as another plan (" + reader + ")");
    }
  });
  fsdp_fuzz::expect_no_open_hdf5_objects(("save_plan_hdf5 and " + reader).c_str());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  read_plan(fsdp_fuzz::scratch_file("plan.h5", data, size), "load_plan_hdf5");
  // Resealed: only bytes that hold a user block can carry the header; bytes already sealed (a
  // seed) were read above.
  std::string bytes(reinterpret_cast<const char*>(data), size);
  if (bytes.size() < fsdp::kPlanHdf5UserBlockBytes) {
    return 0;
  }
  const std::string as_given = bytes;
  fsdp::seal_plan_hdf5_bytes(bytes);
  if (bytes != as_given) {
    read_plan(
        fsdp_fuzz::scratch_file("plan-resealed.h5",
                                reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size()),
        "load_plan_hdf5 (resealed)");
  }
  return 0;
}
