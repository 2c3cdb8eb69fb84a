#include "fsdp/core/optimizer_kind.hpp"

#include "fsdp/core/enum_names.hpp"

namespace fsdp {
namespace {

const EnumNames<OptimizerKind>& optimizer_kind_names() {
  static const EnumNames<OptimizerKind> names("optimizer",
                                              {{OptimizerKind::sgd, "sgd"},
                                               {OptimizerKind::sgd_momentum, "sgd_momentum"},
                                               {OptimizerKind::adam, "adam"},
                                               {OptimizerKind::adamw, "adamw"}},
                                              {{"momentum", OptimizerKind::sgd_momentum}},
                                              Spelling::any_case);
  return names;
}

}  // namespace

const char* name_of(OptimizerKind optimizer) {
  return optimizer_kind_names().name_of(optimizer);
}

OptimizerKind parse_optimizer(const std::string& name) {
  return optimizer_kind_names().parse(name);
}

int state_buffers(OptimizerKind optimizer) {
  switch (optimizer) {
    case OptimizerKind::sgd:
      return 0;
    case OptimizerKind::sgd_momentum:
      return 1;
    case OptimizerKind::adam:
    case OptimizerKind::adamw:
      return 2;
  }
  return 0;
}

}  // namespace fsdp
