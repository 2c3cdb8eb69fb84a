// What every rank must give a model or a unit alike, for the configuration agreement
// (fsdp/comm/configuration_agreement.hpp): ranks that shard different parameters, or the same
// ones differently, would issue collectives that do not match or average different models.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "fsdp/comm/configuration_agreement.hpp"
#include "fsdp/shard/sharding_plan.hpp"
#include "fsdp/unit/sharded_unit.hpp"

namespace fsdp::detail {

// Appends to configuration (its subject and what it already holds: a unit's name) the element
// type, the plan's world size and strategy, the parameters plan.parameters()[i] for
// i in indices (name, shape, dtype, unit, placement), and the unit options that decide what moves
// (mode, direct_gather_bytes, param_dtype, reduce_dtype, the replica group's size). Not the
// buffer pool's capacity: how much memory a rank keeps for reuse is its own business.
Configuration units_configuration(Configuration configuration, DType element,
                                  const ShardingPlan& plan, const std::vector<std::size_t>& indices,
                                  const UnitOptions& options);

}  // namespace fsdp::detail
