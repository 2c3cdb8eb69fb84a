#include "fsdp/shard/plan_agreement.hpp"

#include <optional>

#include "fsdp/comm/first_disagreement.hpp"
#include "fsdp/comm/on_root.hpp"
#include "fsdp/core/error.hpp"

namespace fsdp {

ShardingPlan agree_on_plan(const std::function<ShardingPlan()>& make_on_root,
                           const std::vector<ParameterInfo>& parameters, ProcessGroup& group) {
  const int rank = group.rank();
  // 1. Rank 0 makes the plan; a failure there reaches every rank.
  const std::string payload =
      on_root(group, "make the sharding plan", [&] { return plan_to_json(make_on_root()); });

  // 2. Every rank checks the plan against its own parameters, locally.
  std::optional<ShardingPlan> plan;
  std::optional<ParameterListDifference> problem;
  try {
    plan.emplace(plan_from_json(payload, "broadcast by rank 0"));
    problem =
        first_difference(plan->parameters(), parameters, "rank 0", "rank " + std::to_string(rank));
  } catch (const std::exception& error) {
    problem = ParameterListDifference{0, message_of(error)};
  }

  // 3. The lowest (parameter index, rank) with a problem wins, so every rank reports the same
  // one. All ranks enter the same collectives whatever happened.
  std::optional<Disagreement> mine;
  if (problem) {
    mine = Disagreement{problem->index, problem->message};
  }
  if (const std::optional<Disagreement> first = first_disagreement(group, mine)) {
    throw Error("ranks disagree on the sharding plan: " + first->message);
  }
  // 4. The plan's world size is the same on every rank, so this check needs no collective.
  require(plan->world_size() == group.size(),
          "rank 0's sharding plan is for world size " + std::to_string(plan->world_size()) +
              ", but the group has " + std::to_string(group.size()) + " ranks");
  return std::move(*plan);
}

ShardingPlan agree_on_plan(const ShardingStrategy& strategy,
                           const std::vector<ParameterInfo>& parameters, ProcessGroup& group) {
  const int world_size = group.size();
  return agree_on_plan([&] { return strategy.make_plan(parameters, world_size); }, parameters,
                       group);
}

}  // namespace fsdp
