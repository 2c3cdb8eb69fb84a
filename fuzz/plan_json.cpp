// Sharding plans in JSON (load_plan_json, fsdp-train --plan, fsdp-plan): any file gives a plan or
// fsdp::Error, and a plan read is saved again (save_plan_json) to a file that loads as the same
// plan.
#include <cstdint>
#include <string>

#include "fsdp/io/plan_file.hpp"
#include "reader_contract.hpp"
#include "scratch_file.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string path = fsdp_fuzz::scratch_file("plan.json", data, size);
  const auto plan =
      fsdp_fuzz::value_or_error("load_plan_json", [&] { return fsdp::load_plan_json(path); });
  if (!plan) {
    return 0;
  }
  fsdp_fuzz::must_succeed("saving the plan and loading it again", [&] {
    const std::string again = fsdp_fuzz::scratch_path("plan-again.json");
    fsdp::save_plan_json(again, *plan);
    if (!(fsdp::load_plan_json(again) == *plan)) {
      fsdp_fuzz::finding("the plan saved again loads as another plan");
    }
  });
  return 0;
}
