// Memory and traffic estimates against values computed by hand from the formulas in docs/plans.md.
#include <boost/test/unit_test.hpp>
#include <tuple>

#include "fsdp/shard/model_description.hpp"
#include "fsdp/shard/plan_estimate.hpp"
#include "fsdp/shard/shard_range.hpp"
#include "fsdp/shard/sharding_strategy.hpp"
#include "plan_test_util.hpp"

using namespace fsdp;
using fsdp::test::MessageHas;
using fsdp::test::param;

namespace {
// Every figure of a rank's estimate (its number aside) against the expected one.
void check_rank(const RankEstimate& got, const RankEstimate& want) {
  BOOST_TEST(got.elements == want.elements);
  BOOST_TEST(got.parameter_bytes == want.parameter_bytes);
  BOOST_TEST(got.gradient_bytes == want.gradient_bytes);
  BOOST_TEST(got.optimizer_bytes == want.optimizer_bytes);
  BOOST_TEST(got.forward_gather_send_bytes == want.forward_gather_send_bytes);
  BOOST_TEST(got.backward_gather_send_bytes == want.backward_gather_send_bytes);
  BOOST_TEST(got.gradient_send_bytes == want.gradient_send_bytes);
  BOOST_TEST(got.replica_gradient_send_bytes == want.replica_gradient_send_bytes);
  BOOST_TEST(got.send_bytes() == want.forward_gather_send_bytes + want.backward_gather_send_bytes +
                                     want.gradient_send_bytes + want.replica_gradient_send_bytes);
}
}  // namespace

BOOST_AUTO_TEST_CASE(element_bytes_follow_zero_accounting) {
  const EstimateOptions adam_mixed{OptimizerKind::adam, Precision::mixed};
  // ZeRO's K = 12 for mixed-precision Adam: fp32 master weights, momentum and variance.
  BOOST_TEST(element_bytes(DType::f32, adam_mixed).parameter == 2);
  BOOST_TEST(element_bytes(DType::f32, adam_mixed).gradient == 2);
  BOOST_TEST(element_bytes(DType::f32, adam_mixed).optimizer == 12);
  BOOST_TEST(element_bytes(DType::f32, {OptimizerKind::adamw, Precision::mixed}).optimizer == 12);
  BOOST_TEST(element_bytes(DType::f32, {OptimizerKind::sgd_momentum, Precision::mixed}).optimizer ==
             8);
  BOOST_TEST(element_bytes(DType::f32, {OptimizerKind::sgd, Precision::mixed}).optimizer == 4);
  // fp32 training: every tensor in the parameter's own dtype.
  BOOST_TEST(element_bytes(DType::f32, {OptimizerKind::adam, Precision::fp32}).optimizer == 8);
  BOOST_TEST(element_bytes(DType::f64, {OptimizerKind::sgd_momentum, Precision::fp32}).optimizer ==
             8);
  BOOST_TEST(element_bytes(DType::f64, {OptimizerKind::sgd, Precision::fp32}).gradient == 8);
  BOOST_TEST(element_bytes(DType::bf16, {OptimizerKind::adam, Precision::fp32}).parameter == 2);
  BOOST_TEST(element_bytes(DType::bf16, {OptimizerKind::adam, Precision::fp32}).optimizer == 4);
  // Integer parameters are not trained.
  const ElementBytes integer = element_bytes(DType::i64, adam_mixed);
  BOOST_TEST(integer.parameter == 8);
  BOOST_TEST(integer.gradient == 0);
  BOOST_TEST(integer.optimizer == 0);
}

BOOST_AUTO_TEST_CASE(full_sharding_ten_elements_on_four_ranks) {
  const ShardingPlan plan = FullSharding().make_plan({param("w", {10}, "L")}, 4);
  const PlanEstimate e = estimate(plan, {OptimizerKind::adam, Precision::fp32});
  BOOST_REQUIRE(e.ranks.size() == 4u);
  BOOST_TEST(e.total_elements == 10);
  for (int r = 0; r < 4; ++r) {
    const RankEstimate& rank = e.ranks[r];
    const std::int64_t held = r < 3 ? 3 : 1;
    BOOST_TEST(rank.elements == held);
    BOOST_TEST(rank.parameter_bytes == 4 * held);
    BOOST_TEST(rank.gradient_bytes == 4 * held);
    BOOST_TEST(rank.optimizer_bytes == 8 * held);
    // (N-1) padded blocks of ceil(10/4) = 3 elements of 4 bytes, three times.
    BOOST_TEST(rank.forward_gather_send_bytes == 36);
    BOOST_TEST(rank.backward_gather_send_bytes == 36);
    BOOST_TEST(rank.gradient_send_bytes == 36);
    BOOST_TEST(rank.send_bytes() == 108);
  }
  BOOST_TEST(e.largest_unit == "L");
  BOOST_TEST(e.largest_unit_elements == 10);
  BOOST_TEST(e.gathered_working_set_bytes == 80);  // 10 * (4 + 4)
  BOOST_TEST(e.peak_bytes() == 48 + 80);
  BOOST_TEST(e.unsharded_persistent_bytes == 160);

  const PlanEstimate mixed = estimate(plan, {OptimizerKind::adam, Precision::mixed});
  BOOST_TEST(mixed.ranks[0].parameter_bytes == 6);
  BOOST_TEST(mixed.ranks[0].optimizer_bytes == 36);
  BOOST_TEST(mixed.ranks[0].forward_gather_send_bytes == 18);
  BOOST_TEST(mixed.ranks[0].gradient_send_bytes == 18);
  // The computation holds 10 * (2 + 4) (16-bit parameters, fp32 whole gradients); the reduction
  // more: the fp32 gradients and their 16-bit copy, 10 * (4 + 2), and the piece of 3 elements in
  // 16 bits and its fp32 result, 3 * (2 + 4).
  BOOST_TEST(mixed.gathered_working_set_bytes == 78);
}

// Reductions in flight (EstimateOptions::reductions_in_flight): each holds the largest unit's
// whole gradients (where the mode reduces them from a transient buffer) and its reduced piece.
// Two units of 12 fp32 elements on 2 ranks: 48 bytes of gradients and a piece of 6 elements.
BOOST_AUTO_TEST_CASE(reductions_in_flight_add_their_buffers_to_the_working_set) {
  const ShardingPlan two_units =
      FullSharding().make_plan({param("a", {12}, "A"), param("b", {12}, "B")}, 2);
  for (const auto& [mode, gradients, piece] :
       std::vector<std::tuple<ShardingMode, std::int64_t, std::int64_t>>{
           {ShardingMode::full_shard, 48, 24},
           {ShardingMode::shard_grad_op, 48, 24},
           {ShardingMode::shard_optimizer, 0, 24},  // whole gradients resident, reduced in place
           {ShardingMode::no_shard, 48, 0}}) {      // all-reduced in place: no piece
    EstimateOptions options{OptimizerKind::adam, Precision::fp32, mode};
    const PlanEstimate waited = estimate(two_units, options);
    const std::int64_t one = gradients + piece;
    BOOST_TEST_CONTEXT("mode " << name_of(mode)) {
      BOOST_TEST(waited.reduction_in_flight_bytes == 0);
      for (int k : {1, 2}) {
        options.reductions_in_flight = k;
        const PlanEstimate e = estimate(two_units, options);
        BOOST_TEST(e.reduction_in_flight_bytes == k * one);
        BOOST_TEST(e.gathered_working_set_bytes == waited.gathered_working_set_bytes + k * one);
      }
      // Accumulating, the whole gradients are counted once already: only the piece is added.
      options.accumulates_whole_gradients = true;
      options.reductions_in_flight = 1;
      BOOST_TEST(estimate(two_units, options).reduction_in_flight_bytes == piece);
    }
  }
  EstimateOptions negative;
  negative.reductions_in_flight = -1;
  BOOST_CHECK_THROW(estimate(two_units, negative), Error);
}

BOOST_AUTO_TEST_CASE(zero3_per_rank_memory_is_16_psi_over_n) {
  // The ZeRO paper's stage 3 with mixed-precision Adam: (2 + 2 + 12) * Psi / N bytes per rank,
  // and 3 * Psi elements of 2 bytes moved per step (times (N-1)/N per rank).
  const std::int64_t psi = 1024 * 1024;
  for (int n : {1, 2, 4, 8, 64}) {
    const ShardingPlan plan = FullSharding().make_plan({param("w", {1024, 1024})}, n);
    const PlanEstimate e = estimate(plan, {OptimizerKind::adam, Precision::mixed});
    for (const RankEstimate& rank : e.ranks) {
      BOOST_TEST(rank.persistent_bytes() == 16 * psi / n);
      BOOST_TEST(rank.send_bytes() == 3 * 2 * (n - 1) * psi / n);
    }
    BOOST_TEST(e.unsharded_persistent_bytes == 16 * psi);
  }
}

BOOST_AUTO_TEST_CASE(layerwise_traffic_broadcast_and_reduce_through_the_owner) {
  // A (8 elements) on rank 0, B (4) on rank 1; fp32 SGD; blocks ceil(8/2) = 4 and ceil(4/2) = 2.
  const ShardingPlan plan =
      LayerWiseSharding().make_plan({param("a", {8}, "A"), param("b", {4}, "B")}, 2);
  BOOST_REQUIRE(plan.placement("a").owner_rank == 0);
  BOOST_REQUIRE(plan.placement("b").owner_rank == 1);
  const PlanEstimate e = estimate(plan, {OptimizerKind::sgd, Precision::fp32});
  const RankEstimate& r0 = e.ranks[0];
  const RankEstimate& r1 = e.ranks[1];
  BOOST_TEST(r0.parameter_bytes == 32);
  BOOST_TEST(r0.gradient_bytes == 32);
  BOOST_TEST(r0.optimizer_bytes == 0);
  BOOST_TEST(r1.parameter_bytes == 16);
  // Broadcast = scatter (owner sends N-1 blocks) + ring all-gather (everyone sends N-1 blocks).
  BOOST_TEST(r0.forward_gather_send_bytes == 2 * 1 * 4 * 4 + 1 * 1 * 2 * 4);
  BOOST_TEST(r1.forward_gather_send_bytes == 1 * 1 * 4 * 4 + 2 * 1 * 2 * 4);
  BOOST_TEST(r0.backward_gather_send_bytes == r0.forward_gather_send_bytes);
  // Reduce = ring reduce-scatter (N-1 blocks) + gather to the owner (one block from each other).
  BOOST_TEST(r0.gradient_send_bytes == 1 * 4 * 4 + 2 * 2 * 4);
  BOOST_TEST(r1.gradient_send_bytes == 2 * 4 * 4 + 1 * 2 * 4);
  BOOST_TEST(e.largest_unit == "A");
  BOOST_TEST(e.gathered_working_set_bytes == 64);
}

BOOST_AUTO_TEST_CASE(replicated_parameters_all_reduce_their_gradients) {
  const ShardingPlan plan =
      FullSharding().make_plan({param("e", {10}, "E", DType::f32, true), param("w", {4}, "W")}, 4);
  const PlanEstimate e = estimate(plan, {OptimizerKind::adam, Precision::fp32});
  for (const RankEstimate& rank : e.ranks) {
    BOOST_TEST(rank.elements == 10 + 1);
    BOOST_TEST(rank.parameter_bytes == 44);
    BOOST_TEST(rank.optimizer_bytes == 88);
    BOOST_TEST(rank.forward_gather_send_bytes == 3 * 1 * 4);  // only w is gathered
    // e: ring all-reduce 2 (N-1) blocks of 3; w: reduce-scatter (N-1) blocks of 1.
    BOOST_TEST(rank.gradient_send_bytes == 2 * 3 * 3 * 4 + 3 * 1 * 4);
  }
  BOOST_TEST(e.largest_unit == "W");  // replicated parameters are resident, never gathered
}

BOOST_AUTO_TEST_CASE(one_rank_sends_nothing) {
  const auto model = transformer_parameters(TransformerConfig::gpt2_small());
  for (const auto& name : {"full", "layerwise"}) {
    const PlanEstimate e = estimate(make_strategy(name)->make_plan(model, 1),
                                    {OptimizerKind::adamw, Precision::mixed});
    BOOST_TEST(e.ranks[0].send_bytes() == 0);
    BOOST_TEST(e.ranks[0].persistent_bytes() == 16 * 124439808LL);
  }
}

BOOST_AUTO_TEST_CASE(gpt2_at_1024_ranks_on_one_process) {
  const auto model = transformer_parameters(TransformerConfig::gpt2_small());
  const ShardingPlan plan = FullSharding().make_plan(model, 1024);
  const PlanEstimate e = estimate(plan, {OptimizerKind::adam, Precision::mixed});
  BOOST_TEST(e.ranks.size() == 1024u);
  std::int64_t elements = 0;
  for (const RankEstimate& rank : e.ranks) {
    elements += rank.elements;
  }
  BOOST_TEST(elements == 124439808);  // every element held exactly once
  BOOST_TEST(e.largest_unit == "embeddings");
  // The reduction of the embeddings: fp32 whole gradients and their 16-bit copy (4 + 2 bytes,
  // as much as the computation's 16-bit parameters and fp32 gradients), and each piece, ceil(numel
  // / 1024) elements, received in 16 bits beside its fp32 result (2 + 4).
  BOOST_TEST(e.gathered_working_set_bytes ==
             (50257 + 1024) * 768 * (4 + 2) + (37693 + 768) * (2 + 4));
}

// One fp32 parameter of 12 elements (unit "L", fully sharded) at N = 1..4 ranks: every N divides
// 12, so each rank's piece is 12 / N elements and every ring block is the piece. Bytes per
// element (p, g, K): fp32 Adam (4, 4, 8), mixed Adam (2, 2, 12), fp32 SGD (4, 4, 0). By hand, the
// ZeRO paper's Figure 1 per parameter:
//   no_shard         (p + g + K) * 12            e.g. fp32 Adam: 16 * 12 = 192 at every N
//   shard_optimizer  (p + g) * 12 + K * 12 / N   fp32 Adam, N = 4: 96 + 24 = 120
//   shard_grad_op    p * 12 + (g + K) * 12 / N   fp32 Adam, N = 4: 48 + 36 = 84
//   full_shard       (p + g + K) * 12 / N        fp32 Adam, N = 4: 48
// Bytes sent per rank per step, blocks of 12 / N elements, N - 1 of them per ring pass:
//   full_shard       gather (N-1)(12/N) p before forward and again before backward,
//                    reduce-scatter (N-1)(12/N) g        fp32 Adam, N = 4: 36 + 36 + 36
//   shard_grad_op,   one gather (N-1)(12/N) p after the step (counted as forward),
//   shard_optimizer  reduce-scatter (N-1)(12/N) g        fp32 Adam, N = 4: 36 + 0 + 36
//   no_shard         all-reduce 2 (N-1)(12/N) g, no gathers   fp32 Adam, N = 4: 72
// Working set (transient, the full-size unit): full_shard 12 (p + g), shard_grad_op and no_shard
// 12 g, shard_optimizer 0.
BOOST_AUTO_TEST_CASE(every_mode_on_one_to_four_ranks_by_hand) {
  struct Case {
    EstimateOptions options;
    std::int64_t p, g, k;
  };
  const std::vector<Case> cases = {{{OptimizerKind::adam, Precision::fp32}, 4, 4, 8},
                                   {{OptimizerKind::adam, Precision::mixed}, 2, 2, 12},
                                   {{OptimizerKind::sgd, Precision::fp32}, 4, 4, 0}};
  for (int n = 1; n <= 4; ++n) {
    const ShardingPlan plan = FullSharding().make_plan({param("w", {12}, "L")}, n);
    const std::int64_t piece = 12 / n, ring = (n - 1) * piece;
    for (const Case& c : cases) {
      BOOST_TEST_CONTEXT("N = " << n << ", " << name_of(c.options.optimizer) << " "
                                << name_of(c.options.precision)) {
        struct Expected {
          ShardingMode mode;
          std::int64_t parameter, gradient, optimizer, forward, backward, reduce, working_set;
        };
        // Mixed precision: the whole gradients a backward writes are fp32 (4 bytes) in every
        // mode; under shard_optimizer and shard_grad_op no 16-bit copy between steps, fp32
        // gradients, every parameter whole in 16 bits during the step.
        const bool mixed = c.options.precision == Precision::mixed;
        const std::int64_t whole_p = mixed ? 0 : c.p, whole_g = mixed ? 4 : c.g;
        const std::int64_t whole_half = mixed ? 2 * 12 : 0;
        // A mixed-precision reduction holds a 16-bit copy of the gradients (2 bytes each) and
        // the piece in 16 bits and fp32 (2 + 4), beside the fp32 whole gradients where they are
        // transient (4): more than the computation's 16-bit parameters and fp32 gradients. Under
        // shard_grad_op and shard_optimizer the unit released its 16-bit whole parameters (2
        // bytes each) before, so the copy of the gradients takes their place.
        const std::int64_t piece_copies = mixed ? (2 + 4) * piece : 0;
        const std::int64_t copies = (mixed ? 2 * 12 : 0) + piece_copies;
        const std::vector<Expected> expected = {
            // no_shard in mixed precision gathers a 16-bit copy of each unit: 2 bytes more, as
            // much as its all-reduce's 16-bit copy (in place: no piece).
            {ShardingMode::no_shard, c.p * 12, c.g * 12, c.k * 12, 0, 0, 2 * ring * c.g,
             12 * (whole_g + (mixed ? 2 : 0))},
            {ShardingMode::shard_optimizer, whole_p * 12, whole_g * 12, c.k * piece, ring * c.p, 0,
             ring * c.g, whole_half + piece_copies},
            {ShardingMode::shard_grad_op, whole_p * 12, whole_g * piece, c.k * piece, ring * c.p, 0,
             ring * c.g, 12 * whole_g + whole_half + piece_copies},
            {ShardingMode::full_shard, c.p * piece, c.g * piece, c.k * piece, ring * c.p,
             ring * c.p, ring * c.g, mixed ? 12 * whole_g + copies : 12 * (c.p + whole_g)},
        };
        const std::vector<PlanEstimate> every = estimate_every_mode(plan, c.options);
        BOOST_REQUIRE(every.size() == expected.size());
        for (std::size_t m = 0; m < expected.size(); ++m) {
          const Expected& x = expected[m];
          EstimateOptions options = c.options;
          options.mode = x.mode;
          const PlanEstimate e = estimate(plan, options);
          BOOST_TEST_CONTEXT("mode " << name_of(x.mode)) {
            BOOST_TEST((every[m].options.mode == x.mode));  // the paper's order
            BOOST_TEST(every[m].peak_bytes() == e.peak_bytes());
            BOOST_TEST(every[m].max_send_bytes() == e.max_send_bytes());
            BOOST_TEST(e.options.shard_group_size == n);
            BOOST_TEST(e.replicas() == 1);
            BOOST_REQUIRE(e.ranks.size() == static_cast<std::size_t>(n));
            RankEstimate want;
            want.elements = x.mode == ShardingMode::full_shard ? piece : 12;
            want.parameter_bytes = x.parameter;
            want.gradient_bytes = x.gradient;
            want.optimizer_bytes = x.optimizer;
            want.forward_gather_send_bytes = x.forward;
            want.backward_gather_send_bytes = x.backward;
            want.gradient_send_bytes = x.reduce;
            for (const RankEstimate& rank : e.ranks) {
              check_rank(rank, want);
            }
            BOOST_TEST(e.gathered_working_set_bytes == x.working_set);
            // shard_optimizer reduces its resident whole gradients in place: nothing transient
            // but in mixed precision, the reduction's 16-bit copies.
            BOOST_TEST(e.largest_unit ==
                       (x.mode == ShardingMode::shard_optimizer && !mixed ? "" : "L"));
            BOOST_TEST(
                e.whole_half_parameter_bytes ==
                (x.mode == ShardingMode::shard_optimizer || x.mode == ShardingMode::shard_grad_op
                     ? whole_half
                     : 0));
            BOOST_TEST(e.peak_bytes() == x.parameter + x.gradient + x.optimizer + x.working_set);
            BOOST_TEST(e.unsharded_persistent_bytes == (c.p + c.g + c.k) * 12);
          }
        }
      }
    }
  }
  // Gradient accumulation without sync: every unit's whole gradients at once (two units of 12
  // fp32 elements: 96 bytes) on top of the largest unit's gathered parameters (full_shard: 48);
  // shard_optimizer's whole gradients are persistent already.
  const ShardingPlan two_units =
      FullSharding().make_plan({param("a", {12}, "A"), param("b", {12}, "B")}, 2);
  for (const auto& [mode, accumulated, working_set, holds] :
       std::vector<std::tuple<ShardingMode, std::int64_t, std::int64_t, std::string>>{
           {ShardingMode::full_shard, 96, 48 + 96,
            "one unit's parameters and every unit's gradients"},
           {ShardingMode::shard_grad_op, 96, 96, "every unit's gradients"},
           {ShardingMode::shard_optimizer, 0, 0, ""},
           {ShardingMode::no_shard, 96, 96, "every unit's gradients"}}) {
    EstimateOptions options{OptimizerKind::adam, Precision::fp32, mode};
    options.accumulates_whole_gradients = true;
    const PlanEstimate e = estimate(two_units, options);
    BOOST_TEST_CONTEXT("accumulating, mode " << name_of(mode)) {
      BOOST_TEST(e.accumulated_gradient_bytes == accumulated);
      BOOST_TEST(e.gathered_working_set_bytes == working_set);
      BOOST_TEST(e.working_set_holds == holds);
      options.accumulates_whole_gradients = false;
      BOOST_TEST(estimate(two_units, options).accumulated_gradient_bytes == 0);
    }
  }

  // A few of the figures above written out, in case the table and the code share a slip.
  const ShardingPlan four = FullSharding().make_plan({param("w", {12}, "L")}, 4);
  EstimateOptions adam{OptimizerKind::adam, Precision::fp32};
  const std::vector<PlanEstimate> every = estimate_every_mode(four, adam);
  BOOST_TEST(every[0].ranks[0].persistent_bytes() == 192);
  BOOST_TEST(every[1].ranks[0].persistent_bytes() == 120);
  BOOST_TEST(every[2].ranks[0].persistent_bytes() == 84);
  BOOST_TEST(every[3].ranks[0].persistent_bytes() == 48);
  BOOST_TEST(every[0].ranks[3].send_bytes() == 72);
  BOOST_TEST(every[1].ranks[3].send_bytes() == 72);
  BOOST_TEST(every[2].ranks[3].send_bytes() == 72);
  BOOST_TEST(every[3].ranks[3].send_bytes() == 108);
  BOOST_TEST(every[1].working_set_holds == "");
  BOOST_TEST(every[2].working_set_holds == "gradients");
  BOOST_TEST(every[3].working_set_holds == "parameters and gradients");
  // Elements held: the parameters' (whole on every rank unless parameters are in pieces).
  BOOST_TEST(every[2].ranks[1].elements == 12);
  BOOST_TEST(every[3].ranks[1].elements == 3);
}

BOOST_AUTO_TEST_CASE(modes_of_a_layer_wise_plan_follow_the_owner) {
  // A (8 elements) on rank 0, B (4) on rank 1, fp32 Adam (4, 4, 8); blocks ceil(8/2) = 4 and
  // ceil(4/2) = 2. Pieces are the whole parameter on its owner, nothing elsewhere.
  const ShardingPlan plan =
      LayerWiseSharding().make_plan({param("a", {8}, "A"), param("b", {4}, "B")}, 2);
  BOOST_REQUIRE(plan.placement("a").owner_rank == 0);
  EstimateOptions options{OptimizerKind::adam, Precision::fp32, ShardingMode::shard_grad_op};
  const PlanEstimate zero2 = estimate(plan, options);
  BOOST_TEST(zero2.ranks[0].parameter_bytes == 12 * 4);  // whole parameters everywhere
  BOOST_TEST(zero2.ranks[0].gradient_bytes == 8 * 4);
  BOOST_TEST(zero2.ranks[0].optimizer_bytes == 8 * 8);
  BOOST_TEST(zero2.ranks[1].gradient_bytes == 4 * 4);
  BOOST_TEST(zero2.ranks[1].optimizer_bytes == 4 * 8);
  // One broadcast per step (as layerwise_traffic_broadcast_and_reduce_through_the_owner), the
  // reduce to the owner as before.
  BOOST_TEST(zero2.ranks[0].forward_gather_send_bytes == 2 * 1 * 4 * 4 + 1 * 1 * 2 * 4);
  BOOST_TEST(zero2.ranks[0].backward_gather_send_bytes == 0);
  BOOST_TEST(zero2.ranks[0].gradient_send_bytes == 1 * 4 * 4 + 2 * 2 * 4);
  BOOST_TEST(zero2.largest_unit == "A");
  BOOST_TEST(zero2.gathered_working_set_bytes == 8 * 4);  // A's full gradients

  options.mode = ShardingMode::shard_optimizer;
  const PlanEstimate zero1 = estimate(plan, options);
  BOOST_TEST(zero1.ranks[1].persistent_bytes() == 12 * (4 + 4) + 4 * 8);
  BOOST_TEST(zero1.ranks[1].forward_gather_send_bytes == 1 * 1 * 4 * 4 + 2 * 1 * 2 * 4);
  BOOST_TEST(zero1.ranks[1].gradient_send_bytes == 2 * 4 * 4 + 1 * 2 * 4);
  BOOST_TEST(zero1.gathered_working_set_bytes == 0);

  options.mode = ShardingMode::no_shard;
  const PlanEstimate ddp = estimate(plan, options);
  for (const RankEstimate& rank : ddp.ranks) {
    BOOST_TEST(rank.persistent_bytes() == 12 * 16);
    BOOST_TEST(rank.forward_gather_send_bytes + rank.backward_gather_send_bytes == 0);
    BOOST_TEST(rank.gradient_send_bytes == 2 * 1 * 4 * 4 + 2 * 1 * 2 * 4);  // all-reduce a, b
  }
  BOOST_TEST(ddp.gathered_working_set_bytes == 8 * 4);
}

BOOST_AUTO_TEST_CASE(replicated_parameters_are_whole_in_every_mode) {
  // e (10, replicated) and w (4, sharded) on 4 ranks, fp32 Adam: e adds 10 * 16 bytes and a ring
  // all-reduce of 2 * 3 blocks of ceil(10/4) = 3 elements to every mode, and never a gather.
  const ShardingPlan plan =
      FullSharding().make_plan({param("e", {10}, "E", DType::f32, true), param("w", {4}, "W")}, 4);
  const std::vector<PlanEstimate> every =
      estimate_every_mode(plan, {OptimizerKind::adam, Precision::fp32});
  const std::int64_t w_persistent[] = {4 * 16, 4 * 8 + 1 * 8, 4 * 4 + 1 * 12, 1 * 16};
  const std::int64_t w_gathers[] = {0, 3 * 1 * 4, 3 * 1 * 4, 2 * 3 * 1 * 4};
  const std::int64_t w_reduce[] = {2 * 3 * 1 * 4, 3 * 1 * 4, 3 * 1 * 4, 3 * 1 * 4};
  for (std::size_t m = 0; m < every.size(); ++m) {
    const RankEstimate& rank = every[m].ranks[2];
    BOOST_TEST(rank.persistent_bytes() == 10 * 16 + w_persistent[m]);
    BOOST_TEST(rank.forward_gather_send_bytes + rank.backward_gather_send_bytes == w_gathers[m]);
    BOOST_TEST(rank.gradient_send_bytes == 2 * 3 * 3 * 4 + w_reduce[m]);
    BOOST_TEST(every[m].largest_unit != "E");
  }
}

BOOST_AUTO_TEST_CASE(shard_groups_hold_what_a_group_sized_world_holds) {
  // World 4 in shard groups of G = 2: ranks 0, 1 | 2, 3, rank r at position r % 2, R = 2 copies.
  // A rank holds and sends within its group what rank r % 2 of a 2-rank world does, and adds the
  // ring all-reduce of its gradient piece with its copy: 2 ceil(piece / R) g bytes. Two
  // parameters: w (12 elements: pieces of 6) and v (5: pieces of 3 and 2), fp32 Adam.
  const std::vector<ParameterInfo> model = {param("w", {12}, "L"), param("v", {5}, "L")};
  const ShardingPlan world4 = FullSharding().make_plan(model, 4);
  const ShardingPlan world2 = FullSharding().make_plan(model, 2);
  for (ShardingMode mode : {ShardingMode::no_shard, ShardingMode::shard_optimizer,
                            ShardingMode::shard_grad_op, ShardingMode::full_shard}) {
    BOOST_TEST_CONTEXT("mode " << name_of(mode)) {
      const PlanEstimate grouped =
          estimate(world4, {OptimizerKind::adam, Precision::fp32, mode, 2});
      const PlanEstimate small = estimate(world2, {OptimizerKind::adam, Precision::fp32, mode});
      BOOST_TEST(grouped.options.shard_group_size == 2);
      BOOST_TEST(grouped.replicas() == 2);
      BOOST_REQUIRE(grouped.ranks.size() == 4u);
      for (int r = 0; r < 4; ++r) {
        RankEstimate want = small.ranks[r % 2];
        BOOST_TEST(want.replica_gradient_send_bytes == 0);
        // w: piece 6, 2 * 1 * 3 * 4 = 24; v: piece 3 (position 0) -> 2 * 1 * 2 * 4 = 16, piece 2
        // (position 1) -> 2 * 1 * 1 * 4 = 8. The same in every mode: each reduces to pieces first
        // (no_shard inside its all-reduce).
        want.replica_gradient_send_bytes = r % 2 == 0 ? 24 + 16 : 24 + 8;
        check_rank(grouped.ranks[r], want);
      }
      BOOST_TEST(grouped.gathered_working_set_bytes == small.gathered_working_set_bytes);
      BOOST_TEST(grouped.unsharded_persistent_bytes == small.unsharded_persistent_bytes);
    }
  }
  // G = the world size is one group, as 0 is.
  const PlanEstimate whole =
      estimate(world4, {OptimizerKind::adam, Precision::fp32, ShardingMode::full_shard, 4});
  BOOST_TEST(whole.replicas() == 1);
  BOOST_TEST(whole.ranks[3].send_bytes() ==
             estimate(world4, {OptimizerKind::adam, Precision::fp32}).ranks[3].send_bytes());
}

BOOST_AUTO_TEST_CASE(shard_groups_average_fp32_pieces_under_mixed_precision) {
  // The units widen a 16-bit gradient reduction into fp32 pieces and average those over the
  // replicas in fp32 (docs/modes.md), so the replica all-reduce moves 4 bytes per element while
  // the in-group gathers and reductions move 2. World 4 in groups of 2, w (12 elements) and v (5),
  // Adam: the elements of shard_groups_hold_what_a_group_sized_world_holds, at 2 or 4 bytes.
  const std::vector<ParameterInfo> model = {param("w", {12}, "L"), param("v", {5}, "L")};
  const ShardingPlan world4 = FullSharding().make_plan(model, 4);
  for (ShardingMode mode : {ShardingMode::no_shard, ShardingMode::shard_optimizer,
                            ShardingMode::shard_grad_op, ShardingMode::full_shard}) {
    BOOST_TEST_CONTEXT("mode " << name_of(mode)) {
      const PlanEstimate fp32 = estimate(world4, {OptimizerKind::adam, Precision::fp32, mode, 2});
      const PlanEstimate mixed = estimate(world4, {OptimizerKind::adam, Precision::mixed, mode, 2});
      for (int r = 0; r < 4; ++r) {
        BOOST_TEST(mixed.ranks[r].replica_gradient_send_bytes == (r % 2 == 0 ? 40 : 32));
        BOOST_TEST(mixed.ranks[r].replica_gradient_send_bytes ==
                   fp32.ranks[r].replica_gradient_send_bytes);
        BOOST_TEST(2 * mixed.ranks[r].gradient_send_bytes == fp32.ranks[r].gradient_send_bytes);
        BOOST_TEST(2 * mixed.ranks[r].forward_gather_send_bytes ==
                   fp32.ranks[r].forward_gather_send_bytes);
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(shard_groups_of_a_layer_wise_plan_put_the_owner_at_its_position) {
  // Units A, B, C, D of 8, 6, 4, 2 fp32 elements, one per rank of a 4-rank plan; in groups of 2
  // the owner's position is owner % 2: position 0 (ranks 0, 2) holds A and C (12 elements),
  // position 1 (ranks 1, 3) B and D (8). The owner all-reduces its whole gradient with its copy:
  // 2 ceil(numel / 2) * 4 bytes, so position 0 sends 2 * 4 * 4 + 2 * 2 * 4 = 48 and position
  // 1 2 * 3 * 4 + 2 * 1 * 4 = 32 (all-reducing every rank's block instead would give 48 for both).
  const ShardingPlan plan = LayerWiseSharding().make_plan(
      {param("a", {8}, "A"), param("b", {6}, "B"), param("c", {4}, "C"), param("d", {2}, "D")}, 4);
  for (const auto& [name, owner] : {std::pair{"a", 0}, {"b", 1}, {"c", 2}, {"d", 3}}) {
    BOOST_REQUIRE(plan.placement(name).owner_rank == owner);
  }
  const PlanEstimate e =
      estimate(plan, {OptimizerKind::sgd, Precision::fp32, ShardingMode::full_shard, 2});
  for (const RankEstimate& rank : e.ranks) {
    BOOST_TEST(rank.elements == (rank.rank % 2 == 0 ? 12 : 8));
    BOOST_TEST(rank.replica_gradient_send_bytes == (rank.rank % 2 == 0 ? 48 : 32));
  }
}

BOOST_AUTO_TEST_CASE(a_shard_group_size_must_divide_the_world) {
  const ShardingPlan plan = FullSharding().make_plan({param("w", {12}, "L")}, 4);
  for (int bad : {3, 8, -1}) {
    BOOST_CHECK_EXCEPTION(
        estimate(plan, {OptimizerKind::adam, Precision::fp32, ShardingMode::full_shard, bad}),
        Error, (MessageHas{{"shard group size " + std::to_string(bad), "world size 4"}}));
  }
}

BOOST_AUTO_TEST_CASE(zero_paper_figure_1) {
  // Psi = 7.5B parameters, N = 64, mixed-precision Adam (K = 12), as one fp16 parameter of 7.5e9
  // elements: 7.5e9 / 64 = 117,187,500 per rank exactly.
  //   baseline (2 + 2 + K) Psi          = 16 * 7.5e9             = 120 GB
  //   P_os     (2 + 2) Psi + K Psi / N  = 30e9 + 1.40625e9       = 31.4 GB
  //   P_os+g   2 Psi + (2 + K) Psi / N  = 15e9 + 1.640625e9      = 16.6 GB
  //   P_os+g+p (2 + 2 + K) Psi / N      = 16 * 117,187,500       = 1.9 GB
  // fsdp keeps fp32 master pieces and gradients: under P_os+g it keeps no 16-bit copy between
  // steps and fp32 gradient pieces, (4 + K) Psi / N = 1.9 GB, and holds every parameter whole in
  // 16 bits (2 Psi = 15 GB) from forward to backward; under P_os its fp32 whole gradients are the
  // paper's 2 + 2 bytes, and it holds the same 15 GB during the step.
  const std::int64_t psi = 7'500'000'000;
  const ShardingPlan plan = FullSharding().make_plan({param("w", {psi}, "L", DType::f16)}, 64);
  const std::vector<PlanEstimate> every =
      estimate_every_mode(plan, {OptimizerKind::adam, Precision::mixed});
  BOOST_TEST(every[0].fullest_rank().persistent_bytes() == 120'000'000'000);
  BOOST_TEST(every[1].fullest_rank().persistent_bytes() == 31'406'250'000);
  BOOST_TEST(every[2].fullest_rank().persistent_bytes() == 1'875'000'000);
  BOOST_TEST(every[3].fullest_rank().persistent_bytes() == 1'875'000'000);
  BOOST_TEST(every[0].whole_half_parameter_bytes == 0);
  BOOST_TEST(every[1].whole_half_parameter_bytes == 15'000'000'000);
  BOOST_TEST(every[2].whole_half_parameter_bytes == 15'000'000'000);
  BOOST_TEST(every[3].whole_half_parameter_bytes == 0);
  // The working sets, of the model as one unit: the 16-bit whole parameters, then the
  // reduction's 16-bit copy of the gradients in their place (2 Psi) and the piece in 16 bits and
  // fp32 (6 Psi / N); shard_grad_op reduces its 4-byte whole gradients from a transient buffer.
  const std::int64_t copies = 6 * (psi / 64);
  BOOST_TEST(every[1].gathered_working_set_bytes == 15'000'000'000 + copies);
  BOOST_TEST(every[2].gathered_working_set_bytes == 15'000'000'000 + 4 * psi + copies);
  // Communication: stages 0-2 move 2 Psi per step, stage 3 3 Psi ((N-1)/N of it per rank).
  BOOST_TEST(every[0].max_send_bytes() == 2 * 63 * (psi / 64) * 2);
  BOOST_TEST(every[1].max_send_bytes() == 2 * 63 * (psi / 64) * 2);
  BOOST_TEST(every[2].max_send_bytes() == 2 * 63 * (psi / 64) * 2);
  BOOST_TEST(every[3].max_send_bytes() == 3 * 63 * (psi / 64) * 2);

  // With 16-bit kept gradients (grad_dtype bf16) ZeRO-1 and ZeRO-2 hold exactly the paper's bytes
  // during the step (persistent + the 16-bit whole parameters): P_os 2 Psi of whole gradients +
  // K Psi / N, P_os+g (2 + K) Psi / N, each + 2 Psi. Stages 0 and 3 hold 2 Psi (2 Psi / N) less
  // than the paper: fsdp keeps no 16-bit copy of the parameters beside the fp32 masters.
  EstimateOptions half_gradients{OptimizerKind::adam, Precision::mixed};
  half_gradients.keeps_16_bit_gradients = true;
  const std::vector<PlanEstimate> paper = estimate_every_mode(plan, half_gradients);
  const auto during_the_step = [](const PlanEstimate& e) {
    return e.fullest_rank().persistent_bytes() + e.whole_half_parameter_bytes;
  };
  BOOST_TEST(during_the_step(paper[0]) == 105'000'000'000);
  BOOST_TEST(during_the_step(paper[1]) == 31'406'250'000);
  BOOST_TEST(during_the_step(paper[2]) == 16'640'625'000);
  BOOST_TEST(during_the_step(paper[3]) == 1'640'625'000);
  // What a backward writes is fp32 and transient in every mode, shard_optimizer's too.
  BOOST_TEST(paper[1].gathered_working_set_bytes == 15'000'000'000 + 4 * psi + copies);
  BOOST_TEST(paper[1].working_set_holds == "gradients");
}

// Byte counts that would overflow 64 bits are errors naming what overflowed, never negative
// sizes: a parameter of 2^60 elements (fp32 Adam state alone is 2^64 bytes), and the sum over
// 1024 ranks of a model each rank holds whole.
BOOST_AUTO_TEST_CASE(estimates_that_overflow_are_refused) {
  const ShardingPlan huge = FullSharding().make_plan(
      {param("w", {std::int64_t{1} << 30, std::int64_t{1} << 30}, "L")}, 4);
  BOOST_CHECK_EXCEPTION(estimate(huge, {}), Error,
                        (MessageHas{{"'w'", "1152921504606846976 elements", "overflow 64 bits"}}));
  const ShardingPlan wide = FullSharding().make_plan(
      {param("w", {std::int64_t{1} << 27, std::int64_t{1} << 30}, "L")}, 1024);
  EstimateOptions ddp;
  ddp.mode = ShardingMode::no_shard;
  BOOST_CHECK_EXCEPTION(estimate(wide, ddp), Error,
                        (MessageHas{{"the sum over 1024 ranks", "overflows 64 bits"}}));
  const ShardingPlan four = FullSharding().make_plan(
      {param("w", {std::int64_t{1} << 27, std::int64_t{1} << 30}, "L")}, 4);
  BOOST_TEST(estimate(four, {}).fullest_rank().persistent_bytes() == (std::int64_t{1} << 57) * 4);
}

BOOST_AUTO_TEST_CASE(names_parse) {
  BOOST_TEST((parse_optimizer("AdamW") == OptimizerKind::adamw));
  BOOST_TEST((parse_optimizer("momentum") == OptimizerKind::sgd_momentum));
  BOOST_TEST((parse_precision("bf16") == Precision::mixed));
  BOOST_CHECK_EXCEPTION(parse_optimizer("lamb"), Error, (MessageHas{{"'lamb'", "adamw"}}));
  BOOST_CHECK_EXCEPTION(parse_precision("fp8"), Error, (MessageHas{{"'fp8'", "mixed"}}));
  // What each mode keeps in pieces: one more kind of state per ZeRO stage.
  BOOST_TEST(sharded_state(ShardingMode::full_shard).parameters);
  BOOST_TEST(!sharded_state(ShardingMode::shard_grad_op).parameters);
  BOOST_TEST(sharded_state(ShardingMode::shard_grad_op).gradients);
  BOOST_TEST(!sharded_state(ShardingMode::shard_optimizer).gradients);
  BOOST_TEST(sharded_state(ShardingMode::shard_optimizer).optimizer_state);
  BOOST_TEST(!sharded_state(ShardingMode::no_shard).optimizer_state);
}

// Ranks with equal figures are kept once (runs), so an estimate at a million ranks holds a few
// entries per parameter, none per rank (fsdp-plan at 10^6 ranks took 49 s and 373 MB), and still
// reads like one estimate per rank: sampled ranks against shard_range, rank by rank.
BOOST_AUTO_TEST_CASE(estimates_do_not_grow_with_the_world_size) {
  const auto model = transformer_parameters(TransformerConfig::gpt2_small());
  const int world = 1000000;
  const ShardingPlan plan = FullSharding().make_plan(model, world);
  const PlanEstimate e = estimate(plan, {OptimizerKind::adam, Precision::fp32});
  BOOST_TEST(e.ranks.size() == static_cast<std::size_t>(world));
  BOOST_TEST(e.ranks.runs().size() <= 3 * model.size());
  std::int64_t counted = 0;
  for (const RankRun& run : e.ranks.runs()) {
    BOOST_TEST(run.first == counted);
    BOOST_TEST(run.estimate.rank == run.first);
    counted += run.count;
  }
  BOOST_TEST(counted == world);
  for (int rank : {0, 1, 767, 768, 769, 2303, 2304, 50256, 50257, 123457, world - 1}) {
    std::int64_t elements = 0, send = 0;
    for (const ParameterInfo& p : model) {
      elements += shard_range(p.numel(), world, rank).size;
      send += 2 * (world - 1) * ceil_div(p.numel(), std::int64_t{world}) * 4 +  // two gathers
              (world - 1) * ceil_div(p.numel(), std::int64_t{world}) * 4;       // reduce-scatter
    }
    const RankEstimate got = e.ranks.at(static_cast<std::size_t>(rank));
    BOOST_TEST(got.rank == rank);
    BOOST_TEST(got.elements == elements, "rank " << rank);
    BOOST_TEST(got.persistent_bytes() == elements * 16, "rank " << rank);
    BOOST_TEST(got.send_bytes() == send, "rank " << rank);
  }
  BOOST_TEST(e.all_ranks.elements == 124439808);  // every element held exactly once
  BOOST_TEST(e.all_ranks.persistent_bytes() == 16 * 124439808LL);
  BOOST_TEST(e.fullest_rank().rank == 0);
  BOOST_CHECK_EXCEPTION(e.ranks.at(static_cast<std::size_t>(world)), Error,
                        (MessageHas{{"rank 1000000 is outside the estimate's 1000000 ranks"}}));
  // The balance too: rank 0 holds a full piece of everything.
  std::int64_t first = 0;
  for (const ParameterInfo& p : model) {
    first += ceil_div(p.numel(), std::int64_t{world}) * 4;
  }
  BOOST_TEST(plan.imbalance() == static_cast<double>(first) * world / (124439808.0 * 4));

  // Shard groups repeat the first group's runs: 2^20 ranks in groups of 1024.
  const ShardingPlan grouped = FullSharding().make_plan(model, 1 << 20);
  const PlanEstimate g =
      estimate(grouped, {OptimizerKind::adam, Precision::mixed, ShardingMode::full_shard, 1024});
  BOOST_TEST(g.ranks.group_size() == 1024);
  BOOST_TEST(g.ranks.runs().size() <= 3 * model.size());
  const PlanEstimate one_group =
      estimate(FullSharding().make_plan(model, 1024), {OptimizerKind::adam, Precision::mixed});
  for (int rank : {0, 1, 1023, 1024, 5000, (1 << 20) - 1}) {
    RankEstimate want = one_group.ranks[static_cast<std::size_t>(rank % 1024)];
    const RankEstimate got = g.ranks[static_cast<std::size_t>(rank)];
    want.replica_gradient_send_bytes = got.replica_gradient_send_bytes;  // only groups have copies
    check_rank(got, want);
  }
  BOOST_TEST(g.all_ranks.persistent_bytes() == 1024 * one_group.all_ranks.persistent_bytes());
}
