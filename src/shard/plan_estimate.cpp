#include "fsdp/shard/plan_estimate.hpp"

#include <algorithm>
#include <cctype>
#include <map>

#include "fsdp/core/error.hpp"
#include "fsdp/core/text.hpp"
#include "fsdp/shard/shard_range.hpp"

namespace fsdp {
namespace {}  // namespace

const char* name_of(OptimizerKind optimizer) {
  switch (optimizer) {
    case OptimizerKind::sgd:
      return "sgd";
    case OptimizerKind::sgd_momentum:
      return "sgd_momentum";
    case OptimizerKind::adam:
      return "adam";
    case OptimizerKind::adamw:
      return "adamw";
  }
  return "unknown";
}

OptimizerKind parse_optimizer(const std::string& name) {
  const std::string key = to_lower(name);
  if (key == "sgd") {
    return OptimizerKind::sgd;
  }
  if (key == "sgd_momentum" || key == "sgd-momentum" || key == "momentum") {
    return OptimizerKind::sgd_momentum;
  }
  if (key == "adam") {
    return OptimizerKind::adam;
  }
  if (key == "adamw") {
    return OptimizerKind::adamw;
  }
  throw Error("unknown optimizer '" + name + "'; expected sgd, sgd_momentum, adam or adamw");
}

int state_buffers(OptimizerKind optimizer) {
  switch (optimizer) {
    case OptimizerKind::sgd:
      return 0;
    case OptimizerKind::sgd_momentum:
      return 1;
    case OptimizerKind::adam:
    case OptimizerKind::adamw:
      return 2;
  }
  return 0;
}

const char* name_of(Precision precision) {
  return precision == Precision::mixed ? "mixed" : "fp32";
}

Precision parse_precision(const std::string& name) {
  const std::string key = to_lower(name);
  if (key == "fp32" || key == "full") {
    return Precision::fp32;
  }
  if (key == "mixed" || key == "bf16" || key == "fp16" || key == "amp") {
    return Precision::mixed;
  }
  throw Error("unknown precision '" + name +
              "'; expected fp32 (each parameter in its own dtype) or mixed (16-bit parameters "
              "and gradients, fp32 master weights and optimizer states)");
}

ElementBytes element_bytes(DType dtype, const EstimateOptions& options) {
  const std::int64_t own = static_cast<std::int64_t>(size_of(dtype));
  if (!is_floating(dtype)) {
    return ElementBytes{own, 0, 0};
  }
  const std::int64_t buffers = state_buffers(options.optimizer);
  if (options.precision == Precision::mixed) {
    // ZeRO: 2 + 2 bytes of fp16/bf16 parameter and gradient, K = 4 (fp32 master) + 4 per state.
    return ElementBytes{2, 2, 4 + 4 * buffers};
  }
  return ElementBytes{own, own, buffers * own};
}

std::int64_t PlanEstimate::peak_bytes() const {
  std::int64_t fullest = 0;
  for (const RankEstimate& rank : ranks) {
    fullest = std::max(fullest, rank.persistent_bytes());
  }
  return fullest + gathered_working_set_bytes;
}

PlanEstimate estimate(const ShardingPlan& plan, const EstimateOptions& options) {
  const int n = plan.world_size();
  const std::int64_t others = n - 1;
  PlanEstimate result;
  result.options = options;
  result.world_size = n;
  result.ranks.resize(static_cast<std::size_t>(n));
  for (int r = 0; r < n; ++r) {
    result.ranks[static_cast<std::size_t>(r)].rank = r;
  }
  std::map<std::string, std::pair<std::int64_t, std::int64_t>> units;  // elements, bytes

  for (std::size_t i = 0; i < plan.parameters().size(); ++i) {
    const ParameterInfo& parameter = plan.parameters()[i];
    const ParameterPlacement& where = plan.placements()[i];
    const ElementBytes bytes = element_bytes(parameter.dtype, options);
    const std::int64_t numel = parameter.numel();
    const std::int64_t block =
        ceil_div(numel, std::int64_t{n});  // the padded piece every ring step moves
    result.total_elements += numel;
    result.unsharded_persistent_bytes +=
        numel * (bytes.parameter + bytes.gradient + bytes.optimizer);

    const auto hold = [&](RankEstimate& rank, std::int64_t elements) {
      rank.elements += elements;
      rank.parameter_bytes += elements * bytes.parameter;
      rank.gradient_bytes += elements * bytes.gradient;
      rank.optimizer_bytes += elements * bytes.optimizer;
    };
    for (int r = 0; r < n; ++r) {
      RankEstimate& rank = result.ranks[static_cast<std::size_t>(r)];
      switch (where.placement) {
        case Placement::sharded: {
          hold(rank, shard_range(numel, n, r).size);
          // Ring all-gather before forward and again before backward, ring reduce-scatter of
          // the gradient: N-1 blocks each.
          rank.forward_gather_send_bytes += others * block * bytes.parameter;
          rank.backward_gather_send_bytes += others * block * bytes.parameter;
          rank.gradient_send_bytes += others * block * bytes.gradient;
          break;
        }
        case Placement::whole: {
          const bool owner = r == where.owner_rank;
          hold(rank, owner ? numel : 0);
          // Broadcast from the owner as scatter + ring all-gather; gradient reduced to the owner
          // as ring reduce-scatter + gather.
          const std::int64_t gather = (owner ? 2 : 1) * others * block * bytes.parameter;
          rank.forward_gather_send_bytes += gather;
          rank.backward_gather_send_bytes += gather;
          rank.gradient_send_bytes += (owner ? others : others + 1) * block * bytes.gradient;
          break;
        }
        case Placement::replicated:
          hold(rank, numel);
          // Ring all-reduce of the gradient: reduce-scatter + all-gather.
          rank.gradient_send_bytes += 2 * others * block * bytes.gradient;
          break;
      }
    }
    if (where.placement != Placement::replicated) {
      auto& unit = units[parameter.unit()];
      unit.first += numel;
      unit.second += numel * (bytes.parameter + bytes.gradient);
    }
  }
  for (const auto& [name, unit] : units) {  // ordered: the first of equal units by name
    if (unit.second > result.gathered_working_set_bytes) {
      result.largest_unit = name;
      result.largest_unit_elements = unit.first;
      result.gathered_working_set_bytes = unit.second;
    }
  }
  return result;
}

}  // namespace fsdp
