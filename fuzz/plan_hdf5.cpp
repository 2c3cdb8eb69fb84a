// Sharding plans in HDF5 (load_plan_hdf5), fed raw bytes: any file gives a plan or fsdp::Error,
// leaves no HDF5 object open, and a plan read is saved again (save_plan_hdf5) to a file that
// loads as the same plan.
#include <cstdint>
#include <string>

#include "fsdp/io/plan_file.hpp"
#include "open_hdf5_objects.hpp"
#include "reader_contract.hpp"
#include "scratch_file.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string path = fsdp_fuzz::scratch_file("plan.h5", data, size);
  const auto plan =
      fsdp_fuzz::value_or_error("load_plan_hdf5", [&] { return fsdp::load_plan_hdf5(path); });
  fsdp_fuzz::expect_no_open_hdf5_objects("load_plan_hdf5");
  if (!plan) {
    return 0;
  }
  fsdp_fuzz::must_succeed("saving the plan and loading it again", [&] {
    const std::string again = fsdp_fuzz::scratch_path("plan-again.h5");
    fsdp::save_plan_hdf5(again, *plan);
    if (!(fsdp::load_plan_hdf5(again) == *plan)) {
      fsdp_fuzz::finding("the plan saved again loads as another plan");
    }
  });
  fsdp_fuzz::expect_no_open_hdf5_objects("save_plan_hdf5 and load_plan_hdf5");
  return 0;
}
