// ShardingPlan: where every parameter of a model lives across the ranks of a group.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "fsdp/shard/parameter_info.hpp"
#include "fsdp/shard/shard_assignment.hpp"

namespace fsdp {

// How one parameter is placed. The element ranges follow from the placement by one rule (the
// shard arithmetic below), so a plan cannot describe overlapping or missing elements.
enum class Placement : std::uint8_t {
  // Split across all ranks: rank r holds elements [r*s, min((r+1)*s, numel)) with
  // s = ceil(numel / world_size); trailing ranks may hold a short or empty piece. Padding up to
  // world_size * s exists only inside communication buffers, never in a plan.
  sharded,
  // Held whole by one rank, the owner.
  whole,
  // Held whole by every rank (always-gathered parameters).
  replicated,
};
// "sharded", "whole", "replicated"
const char* name_of(Placement placement);
Placement parse_placement(const std::string& name);

struct ParameterPlacement {
  Placement placement = Placement::sharded;
  int owner_rank = -1;  // the owner of a whole parameter; -1 otherwise
  bool operator==(const ParameterPlacement& o) const {
    return placement == o.placement && owner_rank == o.owner_rank;
  }
};

// The longest strategy name. The strategy is a label (fsdp's "full", "layerwise", "hybrid", or a
// user's own strategy's name): nothing depends on it, but it is printed and stored, so it is a
// word of 1 to kMostStrategyName letters, digits, '_', '-' or '.'.
constexpr std::size_t kMostStrategyName = 64;

class ShardingPlan {
 public:
  // Validates everything: the strategy name (above), the parameters (validate_parameters),
  // world_size >= 1, one placement
  // per parameter, owners in [0, world_size) for whole parameters, and always_gather parameters
  // replicated. Throws Error naming the parameter otherwise.
  ShardingPlan(std::string strategy, int world_size, std::vector<ParameterInfo> parameters,
               std::vector<ParameterPlacement> placements);

  // The strategy that made the plan ("full", "layerwise", "hybrid", or a user's own).
  const std::string& strategy() const { return strategy_; }
  int world_size() const { return world_size_; }
  // The number of pieces a sharded parameter is cut into: world_size().
  int total_shards() const { return world_size_; }

  // In the order the plan was made with.
  const std::vector<ParameterInfo>& parameters() const { return parameters_; }
  const std::vector<ParameterPlacement>& placements() const { return placements_; }
  bool contains(const std::string& name) const { return index_.count(name) != 0; }
  // Throws Error naming the parameter when the plan does not have it.
  std::size_t index_of(const std::string& name) const;
  const ParameterInfo& parameter(const std::string& name) const;
  const ParameterPlacement& placement(const std::string& name) const;

  // The pieces the parameter is cut into, in element order, covering [0, numel) exactly once:
  // world_size() pieces for a sharded parameter (some may be empty), one for a whole parameter,
  // and none for a replicated one (every rank holds all of it).
  std::vector<ShardAssignment> assignments(const std::string& name) const;
  // What rank holds of the parameter: its piece of a sharded parameter (possibly empty), all of
  // a whole parameter it owns or of a replicated one; nullopt when it holds none of it.
  std::optional<ShardAssignment> assignment(const std::string& name, int rank) const;
  // Elements every rank's communication buffer holds for the parameter: ceil(numel / world_size)
  // for a sharded parameter, numel otherwise.
  std::int64_t padded_shard_numel(const std::string& name) const;

  // The always-gathered (replicated) parameters, sorted by name.
  const std::set<std::string>& always_gathered() const { return always_gathered_; }

  // Bytes of sharded and whole parameters that rank holds (replicated ones count on every rank
  // alike and are left out, so that the figure shows what the strategy balanced).
  std::int64_t owned_bytes(int rank) const;
  // max over ranks of owned_bytes / their mean; 1 is perfect balance (and the value when
  // everything is replicated).
  double imbalance() const;

  bool operator==(const ShardingPlan& other) const;
  bool operator!=(const ShardingPlan& other) const { return !(*this == other); }

 private:
  void check_rank(int rank) const;
  ShardAssignment piece(std::size_t index, int rank) const;

  std::string strategy_;
  int world_size_ = 1;
  std::vector<ParameterInfo> parameters_;
  std::vector<ParameterPlacement> placements_;
  std::map<std::string, std::size_t> index_;  // ordered: nothing depends on a hash
  std::set<std::string> always_gathered_;
};

// The plan as compact JSON text: format and version, strategy, world size, and per parameter its
// name, shape, dtype, layer, always_gather, placement and owner. indent < 0: one line.
std::string plan_to_json(const ShardingPlan& plan, int indent = -1);
// The inverse; source names the text in error messages (a file name, "rank 0's broadcast").
ShardingPlan plan_from_json(const std::string& text, const std::string& source);

// Throws Error unless the plan was made for world_size ranks and for exactly these parameters
// (in order), naming the first differing parameter. source names the plan in the message.
void check_plan_matches(const ShardingPlan& plan, const std::vector<ParameterInfo>& parameters,
                        int world_size, const std::string& source);

}  // namespace fsdp
