// Internal: the strategies of one node as an op rule lists them, each costed from the op's work.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "fsdp/solver/strategy.hpp"

namespace fsdp::solver::detail {

class StrategyList {
 public:
  // `flops`: the whole op's work, what one device does when it runs the op alone.
  StrategyList(int devices, std::int64_t flops)
      : devices_(devices), flops_(static_cast<double>(flops)) {}

  int devices() const { return devices_; }
  double flops() const { return flops_; }

  // A dimension is cut only if every device gets at least one element of it.
  bool can_cut(std::int64_t size) const { return devices_ > 1 && size >= devices_; }

  // Adds a strategy; a sharded output or a contraction split divides the work over the devices, a
  // partial or replicated output means every device did the whole op.
  Strategy& add(StrategyRole role, std::vector<ShardingSpec> inputs, ShardingSpec output) {
    Strategy strategy;
    strategy.role = role;
    strategy.inputs = std::move(inputs);
    strategy.output = output;
    strategy.flops_per_device =
        output.is_sharded() || role == StrategyRole::split_contracting ? flops_ / devices_ : flops_;
    strategies_.push_back(std::move(strategy));
    return strategies_.back();
  }

  // The strategies added, in order; the list is empty afterwards.
  std::vector<Strategy> take() { return std::move(strategies_); }

 private:
  int devices_;
  double flops_;
  std::vector<Strategy> strategies_;
};

}  // namespace fsdp::solver::detail
