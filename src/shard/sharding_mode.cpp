#include "fsdp/shard/sharding_mode.hpp"

#include <algorithm>

#include "fsdp/core/error.hpp"
#include "fsdp/core/text.hpp"

namespace fsdp {

const char* name_of(ShardingMode mode) {
  switch (mode) {
    case ShardingMode::full_shard:
      return "full_shard";
    case ShardingMode::shard_grad_op:
      return "shard_grad_op";
    case ShardingMode::shard_optimizer:
      return "shard_optimizer";
    case ShardingMode::no_shard:
      return "no_shard";
  }
  return "unknown";
}

ShardingMode parse_sharding_mode(const std::string& name) {
  std::string key = to_lower(name);
  std::replace(key.begin(), key.end(), '-', '_');
  if (key == "full_shard" || key == "zero3") {
    return ShardingMode::full_shard;
  }
  if (key == "shard_grad_op" || key == "zero2") {
    return ShardingMode::shard_grad_op;
  }
  if (key == "shard_optimizer" || key == "zero1") {
    return ShardingMode::shard_optimizer;
  }
  if (key == "no_shard" || key == "ddp" || key == "zero0") {
    return ShardingMode::no_shard;
  }
  throw Error(ErrorKind::usage,
              "unknown sharding mode '" + name +
                  "'; expected full_shard (ZeRO-3), shard_grad_op (ZeRO-2), shard_optimizer "
                  "(ZeRO-1) or no_shard (replicated data parallel)");
}

int zero_stage(ShardingMode mode) {
  switch (mode) {
    case ShardingMode::full_shard:
      return 3;
    case ShardingMode::shard_grad_op:
      return 2;
    case ShardingMode::shard_optimizer:
      return 1;
    case ShardingMode::no_shard:
      return 0;
  }
  return 3;
}

ShardedState sharded_state(ShardingMode mode) {
  const int stage = zero_stage(mode);  // each stage shards one more kind of state
  return ShardedState{stage >= 3, stage >= 2, stage >= 1};
}

}  // namespace fsdp
