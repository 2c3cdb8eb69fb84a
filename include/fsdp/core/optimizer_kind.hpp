// OptimizerKind: which optimizer rule, as vocabulary shared by the memory estimates (shard), the
// solver's step model and the optimizers themselves (optim). It lives in core, below all three, so
// that naming a rule does not make one module include another.
#pragma once

#include <cstdint>
#include <string>

namespace fsdp {

enum class OptimizerKind : std::uint8_t { sgd, sgd_momentum, adam, adamw };
// "sgd", "sgd_momentum", "adam", "adamw"
const char* name_of(OptimizerKind optimizer);
// The names above, also "momentum" and "sgd-momentum"; any case.
OptimizerKind parse_optimizer(const std::string& name);
// State buffers per parameter element (the K of the ZeRO paper counts their bytes): 0 (SGD),
// 1 (momentum), 2 (Adam, AdamW: m and v).
int state_buffers(OptimizerKind optimizer);

}  // namespace fsdp
