#include "fsdp/solver/step_options.hpp"

#include "fsdp/core/error.hpp"
#include "fsdp/core/text.hpp"

namespace fsdp::solver {

const char* name_of(StepKind step) {
  return step == StepKind::training ? "training" : "forward";
}

StepKind parse_step_kind(const std::string& name) {
  const std::string key = to_lower(name);
  if (key == "forward" || key == "inference") {
    return StepKind::forward;
  }
  if (key == "training" || key == "train") {
    return StepKind::training;
  }
  throw Error("unknown step '" + name + "'; expected training or forward");
}

void StepOptions::validate() const {
  require(memory_budget_bytes >= 0,
          "the memory budget per device is " + std::to_string(memory_budget_bytes) +
              " bytes; give a positive number of bytes, or 0 for no limit");
}

}  // namespace fsdp::solver
