#include "fsdp/shard/sharding_plan.hpp"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "../core/json_input.hpp"
#include "fsdp/core/error.hpp"
#include "fsdp/shard/shard_range.hpp"

namespace fsdp {
namespace {

constexpr const char* kFormatName = "fsdp-sharding-plan";
constexpr int kFormatVersion = 1;  // the same as kPlanFormatVersion in io/plan_file.hpp

}  // namespace

const char* name_of(Placement placement) {
  switch (placement) {
    case Placement::sharded:
      return "sharded";
    case Placement::whole:
      return "whole";
    case Placement::replicated:
      return "replicated";
  }
  return "unknown";
}

Placement parse_placement(const std::string& name) {
  if (name == "sharded") {
    return Placement::sharded;
  }
  if (name == "whole") {
    return Placement::whole;
  }
  if (name == "replicated") {
    return Placement::replicated;
  }
  throw Error("unknown placement '" + name + "'; expected sharded, whole or replicated");
}

ShardingPlan::ShardingPlan(std::string strategy, int world_size,
                           std::vector<ParameterInfo> parameters,
                           std::vector<ParameterPlacement> placements)
    : strategy_(std::move(strategy)),
      world_size_(world_size),
      parameters_(std::move(parameters)),
      placements_(std::move(placements)) {
  validate_world_size(world_size_);
  validate_parameters(parameters_);
  require(placements_.size() == parameters_.size(),
          "a sharding plan needs one placement per parameter; got " +
              std::to_string(placements_.size()) + " placements for " +
              std::to_string(parameters_.size()) + " parameters");
  for (std::size_t i = 0; i < parameters_.size(); ++i) {
    const ParameterInfo& parameter = parameters_[i];
    const ParameterPlacement& where = placements_[i];
    const std::string prefix = "plan '" + strategy_ + "': parameter '" + parameter.name + "'";
    switch (where.placement) {
      case Placement::whole:
        require(where.owner_rank >= 0 && where.owner_rank < world_size_,
                prefix + " is placed whole on rank " + std::to_string(where.owner_rank) +
                    ", outside [0, " + std::to_string(world_size_) + ")");
        break;
      case Placement::sharded:
      case Placement::replicated:
        require(where.owner_rank == -1, prefix + " is " + name_of(where.placement) +
                                            " and cannot have an owner rank (got " +
                                            std::to_string(where.owner_rank) + "; use -1)");
        break;
      default:
        throw Error(prefix + " has an unknown placement code " +
                    std::to_string(static_cast<int>(where.placement)));
    }
    require(
        !parameter.always_gather || where.placement == Placement::replicated,
        prefix + " is always_gather, so it must be replicated, not " + name_of(where.placement));
    index_.emplace(parameter.name, i);
    if (where.placement == Placement::replicated) {
      always_gathered_.insert(parameter.name);
    }
  }
}

std::size_t ShardingPlan::index_of(const std::string& name) const {
  const auto it = index_.find(name);
  require(it != index_.end(),
          "the sharding plan ('" + strategy_ + "') has no parameter named '" + name + "'");
  return it->second;
}

const ParameterInfo& ShardingPlan::parameter(const std::string& name) const {
  return parameters_[index_of(name)];
}

const ParameterPlacement& ShardingPlan::placement(const std::string& name) const {
  return placements_[index_of(name)];
}

void ShardingPlan::check_rank(int rank) const {
  require(rank >= 0 && rank < world_size_, "rank " + std::to_string(rank) +
                                               " is outside the plan's world of " +
                                               std::to_string(world_size_) + " ranks");
}

ShardAssignment ShardingPlan::piece(std::size_t index, int rank) const {
  const ShardRange range = shard_range(parameters_[index].numel(), world_size_, rank);
  return ShardAssignment{rank, rank, range.offset, range.size};
}

std::vector<ShardAssignment> ShardingPlan::assignments(const std::string& name) const {
  const std::size_t index = index_of(name);
  const ParameterPlacement& where = placements_[index];
  std::vector<ShardAssignment> pieces;
  if (where.placement == Placement::sharded) {
    pieces.reserve(static_cast<std::size_t>(world_size_));
    for (int rank = 0; rank < world_size_; ++rank) {
      pieces.push_back(piece(index, rank));
    }
  } else if (where.placement == Placement::whole) {
    pieces.push_back(ShardAssignment{where.owner_rank, 0, 0, parameters_[index].numel()});
  }
  return pieces;
}

std::optional<ShardAssignment> ShardingPlan::assignment(const std::string& name, int rank) const {
  check_rank(rank);
  const std::size_t index = index_of(name);
  const ParameterPlacement& where = placements_[index];
  switch (where.placement) {
    case Placement::sharded:
      return piece(index, rank);
    case Placement::whole:
      if (where.owner_rank != rank) {
        return std::nullopt;
      }
      return ShardAssignment{rank, 0, 0, parameters_[index].numel()};
    case Placement::replicated:
      return ShardAssignment{rank, 0, 0, parameters_[index].numel()};
  }
  return std::nullopt;
}

std::int64_t ShardingPlan::padded_shard_numel(const std::string& name) const {
  const std::size_t index = index_of(name);
  const std::int64_t numel = parameters_[index].numel();
  return placements_[index].placement == Placement::sharded
             ? ceil_div(numel, std::int64_t{world_size_})
             : numel;
}

std::int64_t ShardingPlan::owned_bytes(int rank) const {
  check_rank(rank);
  std::int64_t bytes = 0;
  for (std::size_t i = 0; i < parameters_.size(); ++i) {
    const std::int64_t element = static_cast<std::int64_t>(size_of(parameters_[i].dtype));
    if (placements_[i].placement == Placement::sharded) {
      bytes += piece(i, rank).size * element;
    } else if (placements_[i].placement == Placement::whole && placements_[i].owner_rank == rank) {
      bytes += parameters_[i].numel() * element;
    }
  }
  return bytes;
}

double ShardingPlan::imbalance() const {
  // One pass over parameters, accumulating per-rank bytes (owned_bytes per rank would be
  // quadratic at large world sizes).
  std::vector<std::int64_t> per_rank(static_cast<std::size_t>(world_size_), 0);
  for (std::size_t i = 0; i < parameters_.size(); ++i) {
    const std::int64_t element = static_cast<std::int64_t>(size_of(parameters_[i].dtype));
    if (placements_[i].placement == Placement::sharded) {
      for (int r = 0; r < world_size_; ++r) {
        per_rank[static_cast<std::size_t>(r)] += piece(i, r).size * element;
      }
    } else if (placements_[i].placement == Placement::whole) {
      per_rank[static_cast<std::size_t>(placements_[i].owner_rank)] +=
          parameters_[i].numel() * element;
    }
  }
  std::int64_t total = 0, largest = 0;
  for (std::int64_t bytes : per_rank) {
    total += bytes;
    largest = std::max(largest, bytes);
  }
  if (total == 0) {
    return 1.0;
  }
  return static_cast<double>(largest) * world_size_ / static_cast<double>(total);
}

bool ShardingPlan::operator==(const ShardingPlan& other) const {
  return strategy_ == other.strategy_ && world_size_ == other.world_size_ &&
         parameters_ == other.parameters_ && placements_ == other.placements_;
}

std::string plan_to_json(const ShardingPlan& plan, int indent) {
  nlohmann::json parameters = nlohmann::json::array();
  for (std::size_t i = 0; i < plan.parameters().size(); ++i) {
    const ParameterInfo& p = plan.parameters()[i];
    const ParameterPlacement& where = plan.placements()[i];
    nlohmann::json entry = {{"name", p.name},
                            {"shape", p.shape},
                            {"dtype", name_of(p.dtype)},
                            {"layer", p.layer},
                            {"always_gather", p.always_gather},
                            {"placement", name_of(where.placement)}};
    if (where.placement == Placement::whole) {
      entry["owner_rank"] = where.owner_rank;
    }
    parameters.push_back(std::move(entry));
  }
  const nlohmann::json document = {{"format", kFormatName},
                                   {"format_version", kFormatVersion},
                                   {"strategy", plan.strategy()},
                                   {"world_size", plan.world_size()},
                                   {"parameters", std::move(parameters)}};
  return document.dump(indent);
}

ShardingPlan plan_from_json(const std::string& text, const std::string& source) {
  const std::string where = "plan " + source;
  const nlohmann::json document = parse_json_input(text, where);
  try {
    require(document.is_object() && document.value("format", "") == kFormatName,
            where + " is not a sharding plan (its \"format\" is not \"" + kFormatName + "\")");
    const int version = document.at("format_version").get<int>();
    require(version == kFormatVersion, where + " has format version " + std::to_string(version) +
                                           "; this fsdp reads version " +
                                           std::to_string(kFormatVersion));
    std::vector<ParameterInfo> parameters;
    std::vector<ParameterPlacement> placements;
    for (const nlohmann::json& entry : document.at("parameters")) {
      ParameterInfo p;
      p.name = entry.at("name").get<std::string>();
      p.shape = entry.at("shape").get<std::vector<std::int64_t>>();
      p.dtype = parse_dtype(entry.at("dtype").get<std::string>());
      p.layer = entry.value("layer", "");
      p.always_gather = entry.value("always_gather", false);
      ParameterPlacement placement;
      placement.placement = parse_placement(entry.at("placement").get<std::string>());
      placement.owner_rank = entry.value("owner_rank", -1);
      parameters.push_back(std::move(p));
      placements.push_back(placement);
    }
    return ShardingPlan(document.at("strategy").get<std::string>(),
                        document.at("world_size").get<int>(), std::move(parameters),
                        std::move(placements));
  } catch (const nlohmann::json::exception& error) {
    throw Error(where + " is malformed: " + error.what());
  } catch (const Error& error) {
    const std::string message = error.what();
    if (message.rfind(where, 0) == 0) {
      throw;
    }
    throw Error(where + ": " + message_of(error));
  }
}

void check_plan_matches(const ShardingPlan& plan, const std::vector<ParameterInfo>& parameters,
                        int world_size, const std::string& source) {
  require(plan.world_size() == world_size,
          "plan " + source + " was made for world size " + std::to_string(plan.world_size()) +
              ", but this job has " + std::to_string(world_size) + " ranks; make a plan for " +
              std::to_string(world_size) + " ranks (fsdp-plan --world-size " +
              std::to_string(world_size) + ")");
  if (auto difference = first_difference(plan.parameters(), parameters, "the plan", "the model")) {
    throw Error("plan " + source + " does not fit this model: " + difference->message);
  }
}

}  // namespace fsdp
