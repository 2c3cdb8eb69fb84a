#include "fsdp/shard/sharding_mode.hpp"

#include "fsdp/core/enum_names.hpp"

namespace fsdp {

namespace {

const EnumNames<ShardingMode>& sharding_mode_names() {
  static const EnumNames<ShardingMode> names(
      "sharding mode",
      {{ShardingMode::full_shard, "full_shard", "ZeRO-3"},
       {ShardingMode::shard_grad_op, "shard_grad_op", "ZeRO-2"},
       {ShardingMode::shard_optimizer, "shard_optimizer", "ZeRO-1"},
       {ShardingMode::no_shard, "no_shard", "replicated data parallel"}},
      {{"zero3", ShardingMode::full_shard},
       {"zero2", ShardingMode::shard_grad_op},
       {"zero1", ShardingMode::shard_optimizer},
       {"ddp", ShardingMode::no_shard},
       {"zero0", ShardingMode::no_shard}},
      Spelling::any_case);
  return names;
}

}  // namespace

const char* name_of(ShardingMode mode) {
  return sharding_mode_names().name_of(mode);
}

ShardingMode parse_sharding_mode(const std::string& name) {
  return sharding_mode_names().parse(name);
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
