#include "fsdp/shard/plan_estimate.hpp"

#include <algorithm>
#include <map>
#include <tuple>

#include "plan_rank_sums.hpp"

#include "fsdp/core/enum_names.hpp"
#include "fsdp/core/error.hpp"
#include "fsdp/core/text.hpp"
#include "fsdp/shard/shard_range.hpp"

namespace fsdp {
namespace {

// How the estimates account for a mode, all derived from what it keeps in pieces.
struct ModeAccounting {
  ShardedState pieces;
  // Parameter gathers per step: parameters in pieces are gathered before the forward and again
  // before the backward; whole parameters updated in pieces (their optimizer state is) are
  // gathered once, after the step; with nothing in pieces, never.
  int gathers_per_step = 0;
  // Without optimizer state in pieces every rank runs the whole update and needs every averaged
  // gradient: an all-reduce instead of a reduce-scatter.
  bool all_reduce_gradients = false;
  // Transient full-size buffers while a unit runs: gathered parameters (when they are in pieces);
  // full-size gradients before their reduce-scatter into pieces, or the buffer the all-reduce
  // runs from. shard_optimizer reduce-scatters its resident whole gradients in place.
  bool transient_parameters = false;
  bool transient_gradients = false;
};

// Every figure is a 64-bit byte count. A parameter may have up to 2^57 elements (its state and
// traffic, at most 64 bytes per element, fit), and every sum is checked: an estimate that would
// overflow is an error naming what overflowed, never a negative size.
constexpr std::int64_t kMostElements = std::int64_t{1} << 57;

void add_checked(std::int64_t& total, std::int64_t value, const std::string& what) {
  if (__builtin_add_overflow(total, value, &total)) {
    throw Error("the estimate of " + what +
                " overflows 64 bits (more than 9.2e18 bytes); estimate fewer ranks or a "
                "smaller model");
  }
}

ModeAccounting accounting(ShardingMode mode) {
  ModeAccounting a;
  a.pieces = sharded_state(mode);
  a.gathers_per_step = a.pieces.parameters ? 2 : a.pieces.optimizer_state ? 1 : 0;
  a.all_reduce_gradients = !a.pieces.optimizer_state;
  a.transient_parameters = a.pieces.parameters;
  a.transient_gradients = a.pieces.gradients || a.all_reduce_gradients;
  return a;
}

const EnumNames<Precision>& precision_names() {
  static const EnumNames<Precision> names(
      "precision",
      {{Precision::fp32, "fp32", "each parameter in its own dtype"},
       {Precision::mixed, "mixed",
        "16-bit parameters and gradients, fp32 master weights and optimizer states"}},
      {{"full", Precision::fp32},
       {"bf16", Precision::mixed},
       {"fp16", Precision::mixed},
       {"amp", Precision::mixed}},
      Spelling::any_case);
  return names;
}

}  // namespace

const char* name_of(Precision precision) {
  return precision_names().name_of(precision);
}

Precision parse_precision(const std::string& name) {
  return precision_names().parse(name);
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

ElementBytes element_bytes(const ParameterInfo& parameter, const EstimateOptions& options) {
  ElementBytes bytes = element_bytes(parameter.dtype, options);
  if (!parameter.trainable && is_floating(parameter.dtype)) {
    bytes.gradient = 0;
    bytes.optimizer = options.precision == Precision::mixed ? 4 : 0;  // the fp32 piece
  }
  return bytes;
}

RankEstimates::RankEstimates(std::vector<RankRun> runs, int group_size, int world_size)
    : runs_(std::move(runs)), group_size_(group_size), world_size_(world_size) {}

RankEstimate RankEstimates::operator[](std::size_t rank) const {
  const int position = static_cast<int>(rank % static_cast<std::size_t>(group_size_));
  // The last run starting at or before the position.
  const auto run = std::upper_bound(runs_.begin(), runs_.end(), position,
                                    [](int p, const RankRun& r) { return p < r.first; }) -
                   1;
  RankEstimate estimate = run->estimate;
  estimate.rank = static_cast<int>(rank);
  return estimate;
}

RankEstimate RankEstimates::at(std::size_t rank) const {
  require(rank < size(), "rank " + std::to_string(rank) + " is outside the estimate's " +
                             std::to_string(size()) + " ranks");
  return (*this)[rank];
}

const RankEstimate& PlanEstimate::fullest_rank() const {
  require(!ranks.runs().empty(), "the estimate has no ranks", ErrorKind::state);
  // Runs are in rank order within the first shard group, whose ranks come first.
  return std::max_element(ranks.runs().begin(), ranks.runs().end(),
                          [](const RankRun& a, const RankRun& b) {
                            return a.estimate.persistent_bytes() < b.estimate.persistent_bytes();
                          })
      ->estimate;
}

std::int64_t PlanEstimate::peak_bytes() const {
  return (ranks.empty() ? 0 : fullest_rank().persistent_bytes()) + gathered_working_set_bytes;
}

std::int64_t PlanEstimate::max_send_bytes() const {
  std::int64_t most = 0;
  for (const RankRun& run : ranks.runs()) {
    most = std::max(most, run.estimate.send_bytes());
  }
  return most;
}

namespace {

// The figures of RankEstimate that are summed, as member pointers: one list for adding, taking
// back, comparing and totalling.
constexpr std::int64_t RankEstimate::*kFigures[] = {&RankEstimate::elements,
                                                    &RankEstimate::parameter_bytes,
                                                    &RankEstimate::gradient_bytes,
                                                    &RankEstimate::optimizer_bytes,
                                                    &RankEstimate::forward_gather_send_bytes,
                                                    &RankEstimate::backward_gather_send_bytes,
                                                    &RankEstimate::gradient_send_bytes,
                                                    &RankEstimate::replica_gradient_send_bytes};

bool same_figures(const RankEstimate& a, const RankEstimate& b) {
  return std::all_of(std::begin(kFigures), std::end(kFigures),
                     [&](auto figure) { return a.*figure == b.*figure; });
}

void multiply_checked(std::int64_t& value, std::int64_t factor, const std::string& what) {
  if (__builtin_mul_overflow(value, factor, &value)) {
    throw Error("the estimate of " + what +
                " overflows 64 bits (more than 9.2e18 bytes); estimate fewer ranks or a "
                "smaller model");
  }
}

}  // namespace

PlanEstimate estimate(const ShardingPlan& plan, const EstimateOptions& options) {
  const int world = plan.world_size();
  require(options.shard_group_size >= 0 &&
              (options.shard_group_size == 0 || world % options.shard_group_size == 0),
          "shard group size " + std::to_string(options.shard_group_size) +
              " does not divide the plan's world size " + std::to_string(world) +
              " (HSDP keeps world size / group size copies of each shard group; 0 "
              "means one group of the whole world)");
  require(options.reductions_in_flight >= 0,
          "reductions in flight must be >= 0, got " + std::to_string(options.reductions_in_flight));
  const int n = options.shard_group_size == 0 ? world : options.shard_group_size;
  const std::int64_t others = n - 1;
  const std::int64_t replicas = world / n;
  const ModeAccounting mode = accounting(options.mode);
  PlanEstimate result;
  result.options = options;
  result.options.shard_group_size = n;
  result.world_size = world;
  const bool mixed = options.precision == Precision::mixed;
  // 16-bit kept gradients (UnitOptions::grad_dtype bf16): pieces and shard_optimizer's whole
  // gradients at 2 bytes, so ZeRO-1 and ZeRO-2 come to the paper's bytes; fsdp keeps no 16-bit
  // parameter piece, so no_shard and full_shard hold 2 Psi (2 Psi / N) less than the paper, which
  // counts one. What a backward writes is fp32 and transient in every mode then: shard_optimizer
  // folds it into its 16-bit whole gradients (never accumulates it) and reduces from a copy.
  const bool half_gradients = mixed && options.keeps_16_bit_gradients;
  const bool folds = half_gradients && !mode.pieces.gradients && mode.pieces.optimizer_state;
  const bool transient_gradients = mode.transient_gradients || folds;
  // Mixed precision where parameters stay whole for the step (shard_grad_op, shard_optimizer):
  // every float parameter is held whole in 16 bits from its forward to its backward (the paper's
  // 2 Psi of parameters, which it keeps between steps too; fsdp keeps the fp32 master pieces,
  // in K), and its gradients are fp32. ZeRO-1 comes to the paper's 2 Psi + 2 Psi + K Psi / N with
  // fp32 whole gradients in place of the 16-bit parameters and gradients plus 2 Psi during the
  // step; ZeRO-2 to (4 + K) Psi / N persistent, plus 2 Psi held during the step. Elsewhere mixed
  // precision gathers a 16-bit copy of what the mode keeps whole too (no_shard, replicated
  // parameters) with each unit.
  const bool whole_in_half = mixed && !mode.pieces.parameters && mode.pieces.optimizer_state;
  const bool transient_parameters = mode.transient_parameters || (mixed && !whole_in_half);
  // (gradients are transient whenever parameters are: both are in pieces then)
  result.working_set_holds =
      transient_gradients ? (transient_parameters ? "parameters and gradients" : "gradients") : "";
  // Every rank of a shard group is laid out as the plan's first n ranks (rank r is position
  // r % n of group r / n), so the sums are over the n positions of one group.
  detail::RankSums<RankEstimate> positions(n);
  std::map<std::string, std::pair<std::int64_t, std::int64_t>> units;  // elements, bytes
  std::map<std::string, std::int64_t> reducing;  // bytes a unit's reduction in flight holds
  // Of each unit's 16-bit whole parameters held through the step (whole_half_bytes), which it
  // releases before its reduction.
  std::map<std::string, std::int64_t> released_before_reducing;
  std::int64_t whole_half_bytes = 0;  // of every float parameter held whole through the step

  for (std::size_t i = 0; i < plan.parameters().size(); ++i) {
    const ParameterInfo& parameter = plan.parameters()[i];
    const ParameterPlacement& where = plan.placements()[i];
    const ElementBytes bytes = element_bytes(parameter, options);
    const std::int64_t numel = parameter.numel();
    require(numel <= kMostElements,
            "parameter " + describe(parameter) + " has " + std::to_string(numel) +
                " elements: its bytes of state and traffic would overflow 64 bits; the estimate "
                "takes at most 2^57 elements per parameter");
    const bool widened = whole_in_half && is_floating(parameter.dtype);
    // The paper's 16-bit working copy, which fsdp does not keep: a trained parameter's is made
    // up for by its 16-bit gradient (fsdp's fp32 gradient pieces are 2 + 2 bytes), a frozen
    // one's only copy between steps is its fp32 piece (in `optimizer`).
    const bool frozen = bytes.gradient == 0 && is_floating(parameter.dtype);
    const std::int64_t kept_parameter_bytes =
        (frozen || half_gradients) && options.precision == Precision::mixed ? 0 : bytes.parameter;
    const std::int64_t held_parameter_bytes = widened ? 0 : kept_parameter_bytes;
    const std::int64_t held_gradient_bytes =
        widened && !frozen && !half_gradients ? 4 : bytes.gradient;
    // A gradient element as fsdp computes with it, in the model's dtype: fp32 under mixed
    // precision too, 4 bytes where the paper's are 2. So are the whole gradients a backward
    // writes (reduced in reduce_dtype from there), the reduced piece, whatever dtype the pieces
    // keep, and what shard groups average over the replicas (PyTorch's HSDP all-reduces in
    // reduce_dtype instead; fsdp keeps fp32 here, docs/modes.md).
    const std::int64_t whole_gradient_bytes = mixed && bytes.gradient > 0 ? 4 : bytes.gradient;
    add_checked(whole_half_bytes, widened ? 2 * numel : 0, "the 16-bit whole parameters");
    add_checked(released_before_reducing[parameter.unit()], widened ? 2 * numel : 0,
                "the 16-bit whole parameters");

    const std::int64_t block =
        ceil_div(numel, std::int64_t{n});  // the padded piece every ring step moves
    add_checked(result.total_elements, numel, "the model's elements");
    add_checked(result.unsharded_persistent_bytes,
                numel * (kept_parameter_bytes + bytes.gradient + bytes.optimizer),
                "the unsharded model state");

    // What one position holds and sends of this parameter, given its piece of a sharded
    // parameter (shard_range at that position) and whether it owns a whole one.
    const auto at_position = [&](std::int64_t piece, bool owner) {
      // The elements this rank holds of state kept in pieces: its piece of a sharded parameter,
      // all of a whole one it owns or of a replicated one.
      std::int64_t pieces = numel;
      // Bytes of one gather: a ring all-gather (N-1 blocks) of a sharded parameter; a broadcast
      // from the owner, as scatter (the owner's N-1 blocks) + ring all-gather, of a whole one.
      std::int64_t gather = 0;
      // Bytes of the gradient's reduction: ring reduce-scatter (N-1 blocks) of a sharded
      // parameter; reduce to the owner, as ring reduce-scatter + gather (the owner's block from
      // each other rank), of a whole one; ring all-reduce (reduce-scatter + all-gather) of a
      // replicated one and of every parameter when no optimizer state is in pieces.
      std::int64_t reduce = 2 * others * block;
      // The gradient elements this rank holds reduced afterwards, which shard groups
      // all-reduce across the copies: its block of the reduce-scatter (of the all-reduce's
      // reduce-scatter phase), or the whole gradient on a whole parameter's owner.
      std::int64_t reduced = piece;
      switch (where.placement) {
        case Placement::sharded:
          pieces = piece;
          gather = others * block;
          if (!mode.all_reduce_gradients) {
            reduce = others * block;
          }
          break;
        case Placement::whole:
          pieces = owner ? numel : 0;
          gather = (owner ? 2 : 1) * others * block;
          if (!mode.all_reduce_gradients) {
            reduce = (owner ? others : others + 1) * block;
            reduced = pieces;
          }
          break;
        case Placement::replicated:
          break;
      }
      const auto held = [&](bool in_pieces) { return in_pieces ? pieces : numel; };
      RankEstimate rank;
      rank.elements = held(mode.pieces.parameters);
      rank.parameter_bytes = held(mode.pieces.parameters) * held_parameter_bytes;
      rank.gradient_bytes = held(mode.pieces.gradients) * held_gradient_bytes;
      rank.optimizer_bytes = held(mode.pieces.optimizer_state) * bytes.optimizer;
      rank.forward_gather_send_bytes = (mode.gathers_per_step >= 1 ? gather : 0) * bytes.parameter;
      rank.backward_gather_send_bytes = (mode.gathers_per_step >= 2 ? gather : 0) * bytes.parameter;
      rank.gradient_send_bytes = reduce * bytes.gradient;
      rank.replica_gradient_send_bytes =
          2 * (replicas - 1) * ceil_div(reduced, replicas) * whole_gradient_bytes;
      return rank;
    };
    // The positions with equal pieces (piece_runs), split at a whole parameter's owner.
    const int owner = where.placement == Placement::whole ? where.owner_rank % n : -1;
    for (const PieceRun& run : piece_runs(numel, n)) {
      for (const auto& [begin, end, owns] :
           {std::tuple<int, int, bool>{run.begin, std::min(run.end, std::max(owner, run.begin)),
                                       false},
            {std::max(owner, run.begin), std::min(run.end, owner + 1), true},
            {std::max(owner + 1, run.begin), run.end, false}}) {
        if (begin < end) {
          positions.add(begin, end, at_position(run.size, owns), i);
        }
      }
    }
    // The parameter as a gathered unit holds it: in pieces, gathered whole (bytes.parameter); in
    // mixed precision also where it is kept whole (no_shard, replicated), as a 16-bit copy made
    // at each gather, unless the mode holds that copy through the step (whole_half_bytes).
    const std::int64_t gathered_bytes =
        mixed && is_floating(parameter.dtype) && !widened                       ? 2
        : mode.transient_parameters && where.placement != Placement::replicated ? bytes.parameter
                                                                                : 0;
    if (where.placement == Placement::replicated && gathered_bytes > 0) {
      add_checked(units[parameter.unit()].second, numel * gathered_bytes,
                  "unit '" + parameter.unit() + "'");
    }
    // Mixed precision reduces a 16-bit copy of the gradients (2 bytes per element, an
    // all-reduce's in place), and receives this rank's piece in 16 bits beside its fp32 result.
    const bool reduced_piece = where.placement == Placement::sharded && !mode.all_reduce_gradients;
    const std::int64_t half_reduction =
        mixed && bytes.gradient > 0 ? 2 * numel + (reduced_piece ? 2 * block : 0) : 0;
    add_checked(reducing[parameter.unit()], half_reduction, "unit '" + parameter.unit() + "'");
    if (where.placement != Placement::replicated) {
      auto& unit = units[parameter.unit()];
      const std::int64_t gradient = transient_gradients ? numel * whole_gradient_bytes : 0;
      const bool accumulates = options.accumulates_whole_gradients && !folds;
      add_checked(unit.first, numel, "unit '" + parameter.unit() + "'");
      // Accumulating, every unit's gradients are held at once (added below), not only its own.
      add_checked(unit.second, numel * gathered_bytes + (accumulates ? 0 : gradient),
                  "unit '" + parameter.unit() + "'");
      add_checked(result.accumulated_gradient_bytes, accumulates ? gradient : 0,
                  "the whole gradients");
      add_checked(reducing[parameter.unit()],
                  (accumulates ? 0 : gradient) + (reduced_piece ? block * whole_gradient_bytes : 0),
                  "unit '" + parameter.unit() + "'");
    }
  }
  // Mixed precision: a unit's reduction, after its parameters are released, holds more than its
  // computation (the 16-bit copies beside the fp32 gradients): the working set is the larger.
  // (In fp32 the computation's parameters and gradients are the most.)
  for (auto& [name, unit] : units) {
    if (mixed && options.reductions_in_flight == 0) {
      unit.second = std::max(unit.second, reducing[name] - released_before_reducing[name]);
    }
  }
  for (const auto& [name, unit] : units) {  // ordered: the first of equal units by name
    if (unit.second > result.gathered_working_set_bytes) {
      result.largest_unit = name;
      result.largest_unit_elements = unit.first;
      result.gathered_working_set_bytes = unit.second;
    }
  }
  if (result.largest_unit.empty() && result.accumulated_gradient_bytes == 0) {
    result.working_set_holds.clear();  // nothing transient: no unit, or no trained element
  }
  if (result.accumulated_gradient_bytes > 0) {
    result.working_set_holds = transient_parameters
                                   ? "one unit's parameters and every unit's gradients"
                                   : "every unit's gradients";
  }
  for (const auto& [name, bytes] : reducing) {
    result.reduction_in_flight_bytes = std::max(result.reduction_in_flight_bytes, bytes);
  }
  multiply_checked(result.reduction_in_flight_bytes, options.reductions_in_flight,
                   "the reductions in flight");
  result.whole_half_parameter_bytes = whole_half_bytes;
  add_checked(result.gathered_working_set_bytes, whole_half_bytes, "the working set");
  add_checked(result.gathered_working_set_bytes, result.accumulated_gradient_bytes,
              "the working set");
  add_checked(result.gathered_working_set_bytes, result.reduction_in_flight_bytes,
              "the working set");

  const auto runs = positions.runs(
      [&plan](RankEstimate& sum, const RankEstimate& value, std::size_t parameter) {
        const std::string what = "parameter '" + plan.parameters()[parameter].name + "'";
        for (auto figure : kFigures) {
          add_checked(sum.*figure, value.*figure, what);
        }
      },
      [](RankEstimate& sum, const RankEstimate& value) {
        for (auto figure : kFigures) {
          sum.*figure -= value.*figure;
        }
      },
      same_figures);
  // Each rank's totals, and the sums over the ranks (fsdp-plan's "all" row and totals), fit too.
  const std::string over = "the sum over " + std::to_string(world) + " ranks";
  std::vector<RankRun> rank_runs;
  RankEstimate& all = result.all_ranks;
  all.rank = -1;
  std::int64_t persistent_all = 0, sent_all = 0;
  for (const auto& run : runs) {
    RankEstimate estimate = run.sum;
    estimate.rank = run.first;
    const std::string of_rank = "rank " + std::to_string(run.first) + "'s totals";
    std::int64_t persistent = 0, sent = 0;
    for (std::int64_t bytes :
         {estimate.parameter_bytes, estimate.gradient_bytes, estimate.optimizer_bytes}) {
      add_checked(persistent, bytes, of_rank);
    }
    for (std::int64_t bytes :
         {estimate.forward_gather_send_bytes, estimate.backward_gather_send_bytes,
          estimate.gradient_send_bytes, estimate.replica_gradient_send_bytes}) {
      add_checked(sent, bytes, of_rank);
    }
    // The run's ranks in every shard group.
    std::int64_t copies = run.count;
    multiply_checked(copies, replicas, over);
    multiply_checked(persistent, copies, over);
    multiply_checked(sent, copies, over);
    add_checked(persistent_all, persistent, over);
    add_checked(sent_all, sent, over);
    for (auto figure : kFigures) {
      std::int64_t total = estimate.*figure;
      multiply_checked(total, copies, over);
      add_checked(all.*figure, total, over);
    }
    rank_runs.push_back(RankRun{run.first, run.count, estimate});
  }
  result.ranks = RankEstimates(std::move(rank_runs), n, world);
  return result;
}

std::vector<PlanEstimate> estimate_every_mode(const ShardingPlan& plan, EstimateOptions options) {
  std::vector<PlanEstimate> result;
  for (ShardingMode mode : {ShardingMode::no_shard, ShardingMode::shard_optimizer,
                            ShardingMode::shard_grad_op, ShardingMode::full_shard}) {
    options.mode = mode;
    result.push_back(estimate(plan, options));
  }
  return result;
}

}  // namespace fsdp
