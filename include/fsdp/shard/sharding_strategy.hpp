// Sharding strategies: Full, LayerWise and Hybrid, and a factory that builds one by name.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "fsdp/shard/sharding_plan.hpp"

namespace fsdp {

// A strategy turns a parameter list into a plan for world_size ranks. Every strategy here is a
// pure function of its inputs (no hashes of strings, no pointer or unordered order), so every
// process computes the same plan; agree_on_plan still broadcasts rank 0's to be sure.
class ShardingStrategy {
 public:
  virtual ~ShardingStrategy() = default;
  // "full", "layerwise", "hybrid"
  virtual std::string name() const = 0;
  // Throws Error on invalid parameters (validate_parameters) or world_size < 1.
  virtual ShardingPlan make_plan(const std::vector<ParameterInfo>& parameters,
                                 int world_size) const = 0;
};

// Every parameter split across all ranks; always_gather parameters replicated.
class FullSharding : public ShardingStrategy {
 public:
  std::string name() const override { return "full"; }
  ShardingPlan make_plan(const std::vector<ParameterInfo>& parameters,
                         int world_size) const override;
};

// Every unit (layer) held whole by one rank, balanced by bytes: units from the largest to the
// smallest (equal sizes by name), each to the rank holding the fewest bytes so far (equal loads:
// the lowest rank). always_gather parameters replicated.
class LayerWiseSharding : public ShardingStrategy {
 public:
  std::string name() const override { return "layerwise"; }
  ShardingPlan make_plan(const std::vector<ParameterInfo>& parameters,
                         int world_size) const override;
};

// Units whose layer name matches a full-shard pattern are split across all ranks; those matching
// a layer-wise pattern are placed whole (balanced as in LayerWise, counting the bytes the sharded
// part already put on each rank); the rest are split. Full-shard patterns win when both match.
// Patterns are globs over the whole layer name: '*' any run of characters, '?' one character;
// no other character is special ("attn" matches only "attn"; "*attn*" any name containing it).
// At least one pattern is required: with none, use FullSharding.
class HybridSharding : public ShardingStrategy {
 public:
  HybridSharding(std::vector<std::string> full_shard_patterns,
                 std::vector<std::string> layer_wise_patterns);
  std::string name() const override { return "hybrid"; }
  ShardingPlan make_plan(const std::vector<ParameterInfo>& parameters,
                         int world_size) const override;
  const std::vector<std::string>& full_shard_patterns() const { return full_; }
  const std::vector<std::string>& layer_wise_patterns() const { return layer_wise_; }

 private:
  std::vector<std::string> full_;
  std::vector<std::string> layer_wise_;
};

// Glob match of the whole text ('*' and '?'), byte by byte: the same answer on every platform.
bool glob_match(const std::string& pattern, const std::string& text);

struct StrategyOptions {
  std::vector<std::string> full_shard_patterns;  // hybrid only
  std::vector<std::string> layer_wise_patterns;  // hybrid only
};

// "full", "layerwise" (also "layer_wise", "layer-wise") or "hybrid", in any case. Throws Error
// listing the names for anything else, and when patterns are given to a strategy other than
// hybrid (they would be ignored silently).
std::unique_ptr<ShardingStrategy> make_strategy(const std::string& name,
                                                const StrategyOptions& options = {});

}  // namespace fsdp
