#include "units_configuration.hpp"

namespace fsdp::detail {

Configuration units_configuration(Configuration configuration, DType element,
                                  const ShardingPlan& plan, const std::vector<std::size_t>& indices,
                                  const UnitOptions& options) {
  configuration.text("element type", name_of(element))
      .integer("world size", plan.world_size())
      .text("strategy", plan.strategy())
      .integer("parameters", static_cast<std::int64_t>(indices.size()));
  for (std::size_t i = 0; i < indices.size(); ++i) {
    const std::size_t index = indices[i];
    const ParameterPlacement& placement = plan.placements().at(index);
    std::string where = name_of(placement.placement);
    if (placement.placement == Placement::whole) {
      where += " on rank " + std::to_string(placement.owner_rank);
    }
    configuration.text("parameter #" + std::to_string(i),
                       describe(plan.parameters().at(index)) + ", " + where);
  }
  return configuration.text("mode", name_of(options.mode))
      .integer("direct_gather_bytes", options.direct_gather_bytes)
      .text("param_dtype", name_of(options.param_dtype))
      .text("reduce_dtype", name_of(options.reduce_dtype))
      .text("grad_dtype", name_of(options.grad_dtype))
      .integer("replica group size", options.replicas ? options.replicas->size() : 0);
}

}  // namespace fsdp::detail
