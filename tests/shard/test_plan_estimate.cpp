// Memory and traffic estimates against values computed by hand from the formulas in docs/plans.md.
#include <boost/test/unit_test.hpp>

#include "fsdp/shard/model_description.hpp"
#include "fsdp/shard/plan_estimate.hpp"
#include "fsdp/shard/sharding_strategy.hpp"
#include "plan_test_util.hpp"

using namespace fsdp;
using fsdp::test::MessageHas;
using fsdp::test::param;

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
  BOOST_TEST(mixed.gathered_working_set_bytes == 40);
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
  BOOST_TEST(e.gathered_working_set_bytes == (50257 + 1024) * 768 * 4);
}

BOOST_AUTO_TEST_CASE(names_parse) {
  BOOST_TEST((parse_optimizer("AdamW") == OptimizerKind::adamw));
  BOOST_TEST((parse_optimizer("momentum") == OptimizerKind::sgd_momentum));
  BOOST_TEST((parse_precision("bf16") == Precision::mixed));
  BOOST_CHECK_EXCEPTION(parse_optimizer("lamb"), Error, (MessageHas{{"'lamb'", "adamw"}}));
  BOOST_CHECK_EXCEPTION(parse_precision("fp8"), Error, (MessageHas{{"'fp8'", "mixed"}}));
}
