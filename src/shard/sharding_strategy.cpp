#include "fsdp/shard/sharding_strategy.hpp"

#include <algorithm>
#include <cctype>
#include <map>
#include <set>

#include "fsdp/core/error.hpp"
#include "fsdp/core/text.hpp"
#include "fsdp/shard/shard_range.hpp"
#include "plan_rank_sums.hpp"

namespace fsdp {
namespace {

// The bytes each rank holds while units are placed, without a value per rank (a vector of loads
// and a search over it per unit grew with the world size). Ranks given a unit are kept one by one,
// ordered by (load, rank); the others in runs of equal load from the sharded part, which are
// non-increasing in rank (every sharded parameter's pieces are: full, the rest, none), so the
// least loaded of them is the lowest untaken rank of the last run that has one.
class RankLoads {
 public:
  explicit RankLoads(std::vector<detail::ByteRun> runs) : runs_(std::move(runs)) {
    for (std::size_t i = 1; i < runs_.size(); ++i) {
      require(runs_[i].sum < runs_[i - 1].sum,
              "internal: the sharded bytes per rank should fall with the rank", ErrorKind::state);
    }
    taken_.assign(runs_.size(), 0);
    last_ = static_cast<int>(runs_.size()) - 1;
  }

  // The rank holding the fewest bytes; on equal loads the lowest rank.
  int lightest() const {
    std::pair<std::int64_t, int> best{0, -1};
    if (last_ >= 0) {
      best = {runs_[last_].sum, runs_[last_].first + taken_[last_]};
    }
    if (!given_.empty() && (best.second < 0 || *given_.begin() < best)) {
      best = *given_.begin();
    }
    return best.second;
  }

  void add(int rank, std::int64_t bytes) {
    const auto it = load_of_.find(rank);
    std::int64_t load = 0;
    if (it != load_of_.end()) {
      load = it->second;
      given_.erase({load, rank});
    } else {
      load = runs_[last_].sum;  // rank is its lowest untaken rank (lightest())
      if (++taken_[last_] == runs_[last_].count) {
        --last_;  // the runs before it have every rank untaken
      }
    }
    load_of_[rank] = load + bytes;
    given_.emplace(load + bytes, rank);
  }

 private:
  std::vector<detail::ByteRun> runs_;
  std::vector<int> taken_;  // ranks of each run given a unit (a prefix of the run)
  int last_ = -1;           // the last run with an untaken rank, or -1
  std::set<std::pair<std::int64_t, int>> given_;  // (load, rank) of the ranks given a unit
  std::map<int, std::int64_t> load_of_;           // and their loads by rank
};

// The whole-placement part of LayerWise and Hybrid. Places every parameter whose index is in
// `members` whole, unit by unit, starting from the bytes `load` already holds per rank.
void place_units_whole(const std::vector<ParameterInfo>& parameters,
                       const std::vector<std::size_t>& members, RankLoads& load,
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
    // The least-loaded rank; on equal loads the lowest rank.
    const int rank = load.lightest();
    load.add(rank, unit->second.first);
    for (std::size_t index : unit->second.second) {
      placements[index] = ParameterPlacement{Placement::whole, rank};
    }
  }
}

// Runs of the bytes each rank holds of the sharded parameters among `members`.
RankLoads sharded_load(const std::vector<ParameterInfo>& parameters,
                       const std::vector<std::size_t>& members, int world_size) {
  detail::ByteSums sums(world_size);
  for (std::size_t index : members) {
    detail::add_piece_bytes(sums, parameters[index].numel(),
                            static_cast<std::int64_t>(size_of(parameters[index].dtype)), world_size,
                            index);
  }
  return RankLoads(detail::byte_runs(sums));
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
  RankLoads load = sharded_load(parameters, {}, world_size);
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
  // A pattern that matches no layer is a typo or the wrong model: refused, with the layers.
  std::vector<std::string> layers;
  for (const ParameterInfo& parameter : parameters) {
    if (std::find(layers.begin(), layers.end(), parameter.unit()) == layers.end()) {
      layers.push_back(parameter.unit());
    }
  }
  for (const auto& [list, option] :
       {std::pair{&full_, "full-shard"}, {&layer_wise_, "layer-wise"}}) {
    for (const std::string& pattern : *list) {
      if (std::none_of(layers.begin(), layers.end(),
                       [&](const std::string& layer) { return glob_match(pattern, layer); })) {
        constexpr std::size_t kShown = 8;
        std::vector<std::string> shown(layers.begin(),
                                       layers.begin() + std::min(layers.size(), kShown));
        throw Error(ErrorKind::usage,
                    "hybrid: the " + std::string(option) + " pattern '" + pattern +
                        "' matches no layer of the model; its " + std::to_string(layers.size()) +
                        " layers are " + join(shown) + (layers.size() > kShown ? ", ..." : "") +
                        " (a pattern matches a whole layer name: '*' any characters, '?' one)");
      }
    }
  }
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
  RankLoads load = sharded_load(parameters, sharded, world_size);
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
