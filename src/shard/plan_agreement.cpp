#include "fsdp/shard/plan_agreement.hpp"

#include <cstring>
#include <limits>
#include <optional>

#include "broadcast_text.hpp"
#include "fsdp/core/error.hpp"
#include "message.hpp"

namespace fsdp {
using detail::broadcast_text;

ShardingPlan agree_on_plan(const std::function<ShardingPlan()>& make_on_root,
                           const std::vector<ParameterInfo>& parameters, ProcessGroup& group) {
  const int rank = group.rank();
  // 1. Rank 0 makes the plan; a failure there is carried to every rank in the same broadcast.
  std::int64_t root_failed = 0;
  std::string payload;
  if (rank == 0) {
    try {
      payload = plan_to_json(make_on_root());
    } catch (const std::exception& error) {
      root_failed = 1;
      payload = detail::unprefixed(error);
    } catch (...) {
      root_failed = 1;
      payload = "an exception that is not a std::exception";
    }
  }
  group.broadcast(&root_failed, 1, 0);
  payload = broadcast_text(payload, 0, group);
  if (root_failed != 0) {
    throw Error("fsdp: rank 0 could not make the sharding plan: " + payload);
  }

  // 2. Every rank checks the plan against its own parameters, locally.
  std::optional<ShardingPlan> plan;
  std::optional<ParameterListDifference> problem;
  try {
    plan.emplace(plan_from_json(payload, "broadcast by rank 0"));
    problem =
        first_difference(plan->parameters(), parameters, "rank 0", "rank " + std::to_string(rank));
  } catch (const std::exception& error) {
    problem = ParameterListDifference{0, detail::unprefixed(error)};
  }

  // 3. The lowest (parameter index, rank) with a problem wins, so every rank reports the same
  // one; its rank broadcasts the message. All ranks enter both collectives whatever happened.
  const std::int64_t size = group.size();
  const std::int64_t none = std::numeric_limits<std::int64_t>::max();
  std::int64_t key = problem ? static_cast<std::int64_t>(problem->index) * size + rank : none;
  group.all_reduce(&key, 1, ReduceOp::min);
  if (key != none) {
    const int culprit = static_cast<int>(key % size);
    const std::string message =
        broadcast_text(rank == culprit ? problem->message : "", culprit, group);
    throw Error("fsdp: ranks disagree on the sharding plan: " + message);
  }
  // 4. The plan's world size is the same on every rank, so this check needs no collective.
  require(plan->world_size() == group.size(),
          "fsdp: rank 0's sharding plan is for world size " + std::to_string(plan->world_size()) +
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
