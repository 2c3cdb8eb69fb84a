// Every rank of a group ends with rank 0's plan, or every rank throws the same Error.
#pragma once

#include <functional>
#include <vector>

#include "fsdp/comm/process_group.hpp"
#include "fsdp/shard/sharding_plan.hpp"
#include "fsdp/shard/sharding_strategy.hpp"

namespace fsdp {

// Collective over group. Rank 0 calls make_on_root (ignored elsewhere; it may throw, e.g. for a
// missing file) and broadcasts the serialized plan; every rank then checks that the plan is for
// group.size() ranks and for the parameters it passed itself. Any failure on any rank becomes an
// Error on every rank with the same message, naming the first differing parameter and the rank
// that has it; no rank is left waiting. Every rank enters the same collectives in all cases.
ShardingPlan agree_on_plan(const std::function<ShardingPlan()>& make_on_root,
                           const std::vector<ParameterInfo>& parameters, ProcessGroup& group);

// The usual case: strategy.make_plan(parameters, group.size()) on rank 0, agreed as above.
ShardingPlan agree_on_plan(const ShardingStrategy& strategy,
                           const std::vector<ParameterInfo>& parameters, ProcessGroup& group);

}  // namespace fsdp
