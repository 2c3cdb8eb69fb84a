// Reduction operators of the reducing collectives.
#pragma once

namespace fsdp {

// avg divides the sum by the group size after the reduction (floating dtypes only).
enum class ReduceOp { sum, avg, max, min };

const char* name_of(ReduceOp op);

}  // namespace fsdp
