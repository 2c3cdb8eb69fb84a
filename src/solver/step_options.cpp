#include "fsdp/solver/step_options.hpp"

#include "fsdp/core/enum_names.hpp"
#include "fsdp/core/error.hpp"
#include "fsdp/core/text.hpp"

namespace fsdp::solver {

namespace {

const EnumNames<StepKind>& step_kind_names() {
  static const EnumNames<StepKind> names(
      "step",
      {{StepKind::training, "training", "forward, backward and optimizer"},
       {StepKind::forward, "forward", "inference"}},
      {{"train", StepKind::training}, {"inference", StepKind::forward}}, Spelling::any_case);
  return names;
}

}  // namespace

const char* name_of(StepKind step) {
  return step_kind_names().name_of(step);
}

StepKind parse_step_kind(const std::string& name) {
  return step_kind_names().parse(name);
}

void StepOptions::validate() const {
  require(memory_budget_bytes >= 0,
          "the memory budget per device is " + std::to_string(memory_budget_bytes) +
              " bytes; give a positive number of bytes, or 0 for no limit");
}

}  // namespace fsdp::solver
