#include "fsdp/shard/sharding_plan.hpp"

#include <algorithm>
#include <cctype>
#include <limits>
#include <nlohmann/json.hpp>

#include "../core/json_input.hpp"
#include "fsdp/core/enum_names.hpp"
#include "fsdp/core/error.hpp"
#include "fsdp/shard/shard_range.hpp"
#include "plan_rank_sums.hpp"

namespace fsdp {
namespace {

constexpr const char* kFormatName = "fsdp-sharding-plan";
constexpr int kFormatVersion = 1;  // the same as kPlanFormatVersion in io/plan_file.hpp

void validate_strategy_name(const std::string& name) {
  const bool word =
      !name.empty() && name.size() <= kMostStrategyName &&
      std::all_of(name.begin(), name.end(), [](char c) {
        return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.';
      });
  require(word, "a sharding plan's strategy name is 1 to " + std::to_string(kMostStrategyName) +
                    " letters, digits, '_', '-' or '.', not " + json_excerpt(name));
}

const EnumNames<Placement>& placement_names() {
  static const EnumNames<Placement> names("placement", {{Placement::sharded, "sharded"},
                                                        {Placement::whole, "whole"},
                                                        {Placement::replicated, "replicated"}});
  return names;
}

}  // namespace

const char* name_of(Placement placement) {
  return placement_names().name_of(placement);
}

Placement parse_placement(const std::string& name) {
  return placement_names().parse(name);
}

ShardingPlan::ShardingPlan(std::string strategy, int world_size,
                           std::vector<ParameterInfo> parameters,
                           std::vector<ParameterPlacement> placements)
    : strategy_(std::move(strategy)),
      world_size_(world_size),
      parameters_(std::move(parameters)),
      placements_(std::move(placements)) {
  validate_strategy_name(strategy_);
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
  // The bytes each rank holds, as runs of ranks holding equal bytes (a loop over the ranks per
  // parameter grew with the world size).
  detail::ByteSums owned(world_size_);
  for (std::size_t i = 0; i < parameters_.size(); ++i) {
    const std::int64_t element = static_cast<std::int64_t>(size_of(parameters_[i].dtype));
    if (placements_[i].placement == Placement::sharded) {
      detail::add_piece_bytes(owned, parameters_[i].numel(), element, world_size_, i);
    } else if (placements_[i].placement == Placement::whole) {
      owned.add(placements_[i].owner_rank, placements_[i].owner_rank + 1,
                parameters_[i].numel() * element, i);
    }
  }
  std::int64_t total = 0, largest = 0;
  for (const detail::ByteRun& run : detail::byte_runs(owned)) {
    std::int64_t bytes = 0;
    require(!__builtin_mul_overflow(run.sum, std::int64_t{run.count}, &bytes) &&
                !__builtin_add_overflow(total, bytes, &total),
            "the bytes all ranks hold overflow 64 bits; the balance cannot be computed");
    largest = std::max(largest, run.sum);
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
    if (!p.trainable) {
      entry["trainable"] = false;  // written only when frozen: older readers take the rest
    }
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
  try {
    return document.dump(indent);
  } catch (const nlohmann::json::type_error& error) {
    // JSON text is UTF-8; nlohmann refuses other bytes rather than write what no reader takes.
    throw Error(
        "the sharding plan cannot be written as JSON: a parameter name or layer is not "
        "UTF-8 (" +
        std::string(error.what()) + "); an HDF5 plan file (.h5) holds any bytes");
  }
}

namespace {

// The JSON plan's fields, read strictly: every field of the right JSON type (an integer is not
// 8.0, 8.9 or "8"), integers within their range (2^32 + 8 is refused, never truncated to 8), no
// unknown field, no key twice (parse_json_input). Messages quote short excerpts.
const std::string& string_field(const nlohmann::json& object, const char* key,
                                const std::string& where) {
  require(object.contains(key), where + " has no \"" + key + "\"");
  const nlohmann::json& value = object.at(key);
  require(value.is_string(),
          where + ": \"" + key + "\" must be a string, not " + json_excerpt(value));
  return value.get_ref<const std::string&>();
}

// A name from a short list (a dtype, a placement): a longer string is quoted as an excerpt.
const std::string& short_string_field(const nlohmann::json& object, const char* key,
                                      const std::string& where) {
  const std::string& value = string_field(object, key, where);
  require(value.size() <= kMostExcerpt,
          where + ": \"" + key + "\" is not a known name: " + json_excerpt(value));
  return value;
}

std::int64_t integer_field(const nlohmann::json& object, const char* key, std::int64_t lo,
                           std::int64_t hi, const std::string& where) {
  require(object.contains(key), where + " has no \"" + key + "\"");
  return json_integer(object.at(key), lo, hi, where + ": \"" + key + "\"");
}

constexpr std::int64_t kMostRank = std::numeric_limits<int>::max();

std::pair<ParameterInfo, ParameterPlacement> parameter_from_json(const nlohmann::json& entry,
                                                                 std::size_t index,
                                                                 const std::string& source) {
  std::string where = source + ": parameter #" + std::to_string(index);
  require(entry.is_object(), where + " must be an object, not " + json_excerpt(entry));
  ParameterInfo p;
  p.name = string_field(entry, "name", where);
  where += " " + json_excerpt(p.name);
  require_known_fields(
      entry,
      {"name", "shape", "dtype", "layer", "always_gather", "trainable", "placement", "owner_rank"},
      where);
  require(entry.contains("shape") && entry.at("shape").is_array(),
          where + " needs a \"shape\" array of positive integers ([] for a scalar)");
  const nlohmann::json& shape = entry.at("shape");
  for (std::size_t d = 0; d < shape.size(); ++d) {
    p.shape.push_back(json_integer(shape[d], 1, std::numeric_limits<std::int64_t>::max(),
                                   where + ": dimension " + std::to_string(d)));
  }
  try {
    p.dtype = parse_dtype(short_string_field(entry, "dtype", where));
  } catch (const Error& error) {
    throw Error(where + ": " + message_of(error));
  }
  if (entry.contains("layer")) {
    p.layer = string_field(entry, "layer", where);
  }
  if (entry.contains("always_gather")) {
    const nlohmann::json& value = entry.at("always_gather");
    require(value.is_boolean(),
            where + ": \"always_gather\" must be true or false, not " + json_excerpt(value));
    p.always_gather = value.get<bool>();
  }
  if (entry.contains("trainable")) {
    const nlohmann::json& value = entry.at("trainable");
    require(value.is_boolean(),
            where + ": \"trainable\" must be true or false, not " + json_excerpt(value));
    p.trainable = value.get<bool>();
  }
  ParameterPlacement placement;
  try {
    placement.placement = parse_placement(short_string_field(entry, "placement", where));
  } catch (const Error& error) {
    throw Error(where + ": " + message_of(error));
  }
  if (entry.contains("owner_rank")) {
    placement.owner_rank =
        static_cast<int>(integer_field(entry, "owner_rank", -1, kMostRank - 1, where));
  }
  return {std::move(p), placement};
}

}  // namespace

ShardingPlan plan_from_json(const std::string& text, const std::string& source) {
  const std::string where = "plan " + source;
  const nlohmann::json document = parse_json_input(text, where);
  require(document.is_object() && document.contains("format") && document["format"] == kFormatName,
          where + " is not a sharding plan (its \"format\" is not \"" + kFormatName + "\")");
  require_known_fields(document,
                       {"format", "format_version", "strategy", "world_size", "parameters"}, where);
  const nlohmann::json version = document.value("format_version", nlohmann::json());
  // An integer: 1.0 equals 1 to nlohmann, and 1.99 is not version 1.
  require(version.is_number_integer() && version == kFormatVersion,
          where + " has format version " + json_excerpt(version) + "; this fsdp reads version " +
              std::to_string(kFormatVersion));
  const std::string& strategy = string_field(document, "strategy", where);
  const int world_size =
      static_cast<int>(integer_field(document, "world_size", 1, kMostRank, where));
  require(document.contains("parameters") && document.at("parameters").is_array(),
          where + " needs a \"parameters\" array");
  std::vector<ParameterInfo> parameters;
  std::vector<ParameterPlacement> placements;
  const nlohmann::json& list = document.at("parameters");
  parameters.reserve(list.size());
  placements.reserve(list.size());
  for (std::size_t i = 0; i < list.size(); ++i) {
    auto [parameter, placement] = parameter_from_json(list[i], i, where);
    parameters.push_back(std::move(parameter));
    placements.push_back(placement);
  }
  try {
    return ShardingPlan(strategy, world_size, std::move(parameters), std::move(placements));
  } catch (const Error& error) {
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
