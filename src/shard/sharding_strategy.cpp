#include "fsdp/shard/sharding_strategy.hpp"

#include <algorithm>
#include <cctype>
#include <map>

#include "fsdp/core/error.hpp"
#include "fsdp/core/text.hpp"
#include "fsdp/shard/shard_range.hpp"

namespace fsdp {
namespace {

// The whole-placement part of LayerWise and Hybrid. Places every parameter whose index is in
// `members` whole, unit by unit, starting from the bytes `load` already holds per rank.
void place_units_whole(const std::vector<ParameterInfo>& parameters,
                       const std::vector<std::size_t>& members, std::vector<std::int64_t>& load,
                       std::vector<ParameterPlacement>& placements) {
  // Units by name (std::map: ordered, so the result never depends on a hash or on addresses).
  std::map<std::string, std::pair<std::int64_t, std::vector<std::size_t>>> units;
  for (std::size_t index : members) {
    auto& unit = units[parameters[index].unit()];
    unit.first += parameters[index].bytes();
    unit.second.push_back(index);
  }
  std::vector<const decltype(units)::value_type*> order;
  for (const auto& unit : units) {
    order.push_back(&unit);
  }
  // Largest first; equal sizes in name order (std::map order, kept by the stable sort).
  std::stable_sort(order.begin(), order.end(),
                   [](const auto* a, const auto* b) { return a->second.first > b->second.first; });
  for (const auto* unit : order) {
    // The least-loaded rank; on equal loads the lowest rank (min_element returns the first).
    const auto lightest = std::min_element(load.begin(), load.end());
    const int rank = static_cast<int>(lightest - load.begin());
    *lightest += unit->second.first;
    for (std::size_t index : unit->second.second) {
      placements[index] = ParameterPlacement{Placement::whole, rank};
    }
  }
}

// Bytes each rank holds of the sharded parameters among `members`.
void add_sharded_load(const std::vector<ParameterInfo>& parameters,
                      const std::vector<std::size_t>& members, std::vector<std::int64_t>& load) {
  const int ranks = static_cast<int>(load.size());
  for (std::size_t index : members) {
    const std::int64_t numel = parameters[index].numel();
    const std::int64_t element = static_cast<std::int64_t>(size_of(parameters[index].dtype));
    // The pieces after the first empty one are empty too.
    for (int r = 0; r < ranks; ++r) {
      const std::int64_t size = shard_range(numel, ranks, r).size;
      if (size == 0) {
        break;
      }
      load[static_cast<std::size_t>(r)] += size * element;
    }
  }
}

void check_inputs(const std::vector<ParameterInfo>& parameters, int world_size) {
  validate_world_size(world_size);
  validate_parameters(parameters);
}

std::vector<ParameterPlacement> initial_placements(const std::vector<ParameterInfo>& parameters) {
  std::vector<ParameterPlacement> placements(parameters.size());
  for (std::size_t i = 0; i < parameters.size(); ++i) {
    placements[i] = ParameterPlacement{
        parameters[i].always_gather ? Placement::replicated : Placement::sharded, -1};
  }
  return placements;
}

}  // namespace

ShardingPlan FullSharding::make_plan(const std::vector<ParameterInfo>& parameters,
                                     int world_size) const {
  check_inputs(parameters, world_size);
  return ShardingPlan(name(), world_size, parameters, initial_placements(parameters));
}

ShardingPlan LayerWiseSharding::make_plan(const std::vector<ParameterInfo>& parameters,
                                          int world_size) const {
  check_inputs(parameters, world_size);
  std::vector<ParameterPlacement> placements = initial_placements(parameters);
  std::vector<std::size_t> members;
  for (std::size_t i = 0; i < parameters.size(); ++i) {
    if (!parameters[i].always_gather) {
      members.push_back(i);
    }
  }
  std::vector<std::int64_t> load(static_cast<std::size_t>(world_size), 0);
  place_units_whole(parameters, members, load, placements);
  return ShardingPlan(name(), world_size, parameters, std::move(placements));
}

HybridSharding::HybridSharding(std::vector<std::string> full_shard_patterns,
                               std::vector<std::string> layer_wise_patterns)
    : full_(std::move(full_shard_patterns)), layer_wise_(std::move(layer_wise_patterns)) {
  require(!full_.empty() || !layer_wise_.empty(),
          "the hybrid strategy needs at least one full-shard or layer-wise pattern; "
          "without patterns every layer would be fully sharded (use the \"full\" strategy)");
  for (const auto* list : {&full_, &layer_wise_}) {
    for (const std::string& pattern : *list) {
      require(!pattern.empty(),
              "hybrid: an empty pattern matches no layer; remove it or "
              "write \"*\" for every layer");
    }
  }
}

ShardingPlan HybridSharding::make_plan(const std::vector<ParameterInfo>& parameters,
                                       int world_size) const {
  check_inputs(parameters, world_size);
  std::vector<ParameterPlacement> placements = initial_placements(parameters);
  const auto matches = [](const std::vector<std::string>& patterns, const std::string& layer) {
    return std::any_of(patterns.begin(), patterns.end(),
                       [&](const std::string& pattern) { return glob_match(pattern, layer); });
  };
  std::vector<std::size_t> sharded, whole;
  for (std::size_t i = 0; i < parameters.size(); ++i) {
    if (parameters[i].always_gather) {
      continue;
    }
    const std::string& unit = parameters[i].unit();
    if (!matches(full_, unit) && matches(layer_wise_, unit)) {
      whole.push_back(i);
    } else {
      sharded.push_back(i);  // full-shard patterns and everything unmatched
    }
  }
  std::vector<std::int64_t> load(static_cast<std::size_t>(world_size), 0);
  add_sharded_load(parameters, sharded, load);
  place_units_whole(parameters, whole, load, placements);
  return ShardingPlan(name(), world_size, parameters, std::move(placements));
}

bool glob_match(const std::string& pattern, const std::string& text) {
  // Iterative matching with one backtrack point for the last '*': linear for typical patterns,
  // no recursion.
  std::size_t p = 0, t = 0;
  std::size_t star = std::string::npos, star_text = 0;
  while (t < text.size()) {
    if (p < pattern.size() && (pattern[p] == '?' || pattern[p] == text[t])) {
      ++p;
      ++t;
    } else if (p < pattern.size() && pattern[p] == '*') {
      star = p++;
      star_text = t;
    } else if (star != std::string::npos) {
      p = star + 1;
      t = ++star_text;
    } else {
      return false;
    }
  }
  while (p < pattern.size() && pattern[p] == '*') {
    ++p;
  }
  return p == pattern.size();
}

std::unique_ptr<ShardingStrategy> make_strategy(const std::string& name,
                                                const StrategyOptions& options) {
  const std::string key = to_lower(name);
  const bool has_patterns =
      !options.full_shard_patterns.empty() || !options.layer_wise_patterns.empty();
  if (key == "hybrid") {
    return std::make_unique<HybridSharding>(options.full_shard_patterns,
                                            options.layer_wise_patterns);
  }
  std::unique_ptr<ShardingStrategy> strategy;
  if (key == "full") {
    strategy = std::make_unique<FullSharding>();
  } else if (key == "layerwise" || key == "layer_wise" || key == "layer-wise") {
    strategy = std::make_unique<LayerWiseSharding>();
  } else {
    throw Error("unknown sharding strategy '" + name +
                "'; expected \"full\", \"layerwise\" or \"hybrid\"");
  }
  require(!has_patterns,
          "the " + strategy->name() + " strategy takes no layer patterns; they are for \"hybrid\"");
  return strategy;
}

}  // namespace fsdp
