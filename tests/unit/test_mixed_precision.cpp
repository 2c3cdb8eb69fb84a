// Mixed precision in the units: the gathers move 16-bit values and every rank computes with the
// same rounded parameters, the pieces stay fp32 master weights, gradients reduce in 16 bits, and
// training ends near fp32 training (bf16 within 2e-2 relative, fp16 within 2e-3, after 5 Adam
// steps of the tiny MLP), for every strategy, every sharding mode, and hybrid arrangements.
// Double models are refused.
#include <boost/test/unit_test.hpp>

#include "fsdp/comm/hybrid_groups.hpp"
#include "fsdp/core/half_conversion.hpp"
#include "fsdp/optim/adam.hpp"
#include "fsdp/shard/plan_agreement.hpp"
#include "fsdp/shard/sharding_strategy.hpp"
#include "sharded_training.hpp"

using namespace fsdp;
using namespace fsdp::test;

namespace {

float rounded(float x, DType dtype) {
  return dtype == DType::bf16 ? fsdp::half::widen(fsdp::half::narrow(x, bfloat16{}))
                              : fsdp::half::widen(fsdp::half::narrow(x, float16{}));
}

// Every whole parameter a gather produces is exactly a 16-bit value.
int unrounded_elements(ShardedModel<float>& model, DType dtype) {
  int wrong = 0;
  for (std::size_t u = 0; u < model.unit_count(); ++u) {
    ShardedUnit<float>& unit = model.unit(u);
    unit.gather();
    for (ShardedParameter<float>& p : unit.parameters()) {
      const auto full = on_host(p.full());
      for (std::size_t i = 0; i < full.size(); ++i) {
        wrong += rounded(full(i), dtype) == full(i) ? 0 : 1;
      }
    }
    unit.release();
  }
  return wrong;
}

// Pieces that are not all 16-bit values: the master weights kept fp32 precision.
bool masters_are_fp32(ShardedModel<float>& model, DType dtype) {
  int finer = 0;
  for (const ParameterInfo& info : model.plan().parameters()) {
    const auto piece = on_host(model.parameter(info.name).shard());
    for (std::size_t i = 0; i < piece.size(); ++i) {
      finer += rounded(piece(i), dtype) == piece(i) ? 0 : 1;
    }
  }
  model.group().all_reduce(Kokkos::DefaultHostExecutionSpace(), host_view(&finer, 1),
                           ReduceOp::sum);
  return finer > 0;
}

// grad_dtype bf16: every trained piece is kept in bfloat16, the gradient bytes are 2 per element
// of the pieces (no T copy kept besides), and grad_shard() refuses to hand a T view of them.
bool gradients_kept_in_bfloat16(ShardedModel<float>& model) {
  bool kept = true;
  std::int64_t elements = 0;
  for (std::size_t u = 0; u < model.unit_count(); ++u) {
    ShardedUnit<float>& unit = model.unit(u);
    for (ShardedParameter<float>& p : unit.parameters()) {
      kept = kept && (!p.trainable() || p.grad_piece().in_bfloat16());
      if (!unit.keeps_gradients()) {
        elements += static_cast<std::int64_t>(p.grad_piece().size());
      }
    }
    if (unit.keeps_gradients()) {
      elements += unit.gradient_layout().full_grad_numel;
    }
  }
  const MemoryReport& memory = model.memory();
  const std::int64_t bytes = memory.current_of(MemoryCategory::gradient_shards) +
                             memory.current_of(MemoryCategory::resident_gradients);
  BOOST_TEST(bytes >= 2 * elements);       // padding of the last pieces aside
  BOOST_TEST(bytes <= 2 * elements + 64);  // ... and nothing in 4 bytes
  try {
    (void)model.unit(0).parameters()[0].grad_shard();
    kept = false;
  } catch (const Error& e) {
    kept = kept && e.kind() == ErrorKind::state;
  }
  return kept;
}

}  // namespace

BOOST_AUTO_TEST_CASE(sixteen_bit_training_ends_near_fp32_training) {
  ProcessGroup world(MPI_COMM_WORLD);
  OptimizerSetup setup;
  setup.kind = "adam";
  setup.adam.lr = 0.05;
  const int steps = 5;
  struct Policy {
    DType param, reduce;
    double tolerance;
    DType grad = DType::f32;
  };
  const std::vector<Policy> policies = {{DType::bf16, DType::bf16, 2e-2},
                                        {DType::bf16, DType::f32, 2e-2},
                                        {DType::f32, DType::bf16, 2e-2},
                                        {DType::f16, DType::f16, 2e-3},
                                        {DType::bf16, DType::bf16, 2e-2, DType::bf16}};
  for (const int shards : {world.size(), world.size() % 2 == 0 ? world.size() / 2 : 1}) {
    HybridGroups groups = make_hybrid_groups(world, shards);
    for (const ShardingMode mode : {ShardingMode::full_shard, ShardingMode::shard_grad_op,
                                    ShardingMode::shard_optimizer, ShardingMode::no_shard})
      for (const Policy& policy : policies)
        for (const Strategy& strategy : strategies()) {
          ShardedModelOptions options;
          options.unit.mode = mode;
          options.unit.param_dtype = policy.param;
          options.unit.reduce_dtype = policy.reduce;
          options.unit.grad_dtype = policy.grad;
          if (shards < world.size()) {
            options.unit.replicas = groups.replicate;
          }
          auto maker = make_strategy(strategy.name, strategy.options);
          ShardedModel<float> model(
              groups.shard, agree_on_plan(*maker, tiny_mlp_parameters<float>(), groups.shard),
              options);
          init_parameters(model);
          Reference<float> reference;
          Adam<float> adam(setup.adam);
          // Kept bf16 gradients are clipped too: clip_grad_norm scales them in place.
          OptimizerSetup policy_setup = setup;
          policy_setup.clip = policy.grad == DType::bf16 ? 0.01 : 0.0;
          for (int s = 0; s < steps; ++s) {
            sharded_train_step<float>(model, world, policy_setup, [&] { adam.step(model); });
            reference.train_step(policy_setup);
          }
          const double difference = largest_relative_difference(model, reference, false);
          BOOST_TEST_CONTEXT(name_of(mode)
                             << " " << strategy.name << " params " << name_of(policy.param)
                             << " reduce " << name_of(policy.reduce) << " grads "
                             << name_of(policy.grad) << ", " << world.size() / shards << "x"
                             << shards) {
            BOOST_TEST_MESSAGE("largest relative difference to fp32 training " << difference);
            BOOST_TEST(difference <= policy.tolerance);
            BOOST_TEST(difference > 1e-6);  // it did compute in 16 bits
            if (policy.param != DType::f32) {
              BOOST_TEST(unrounded_elements(model, policy.param) == 0);
              BOOST_TEST(masters_are_fp32(model, policy.param));
            }
            if (policy.grad == DType::bf16) {
              BOOST_TEST(gradients_kept_in_bfloat16(model));
            }
          }
        }
  }
}

// Frozen parameters under bf16 gathers and reductions: gathered in 16 bits with the rest, never
// reduced or stepped (their fp32 pieces stay exactly the initial values), and the trainable ones
// end near fp32 training with the same parameters frozen; every mode, plain and hybrid.
BOOST_AUTO_TEST_CASE(frozen_parameters_in_sixteen_bits) {
  ProcessGroup world(MPI_COMM_WORLD);
  OptimizerSetup setup;
  setup.kind = "adam";
  setup.adam.lr = 0.05;
  setup.frozen = {"l0.w", "l2.gain"};
  for (const int shards : {world.size(), world.size() % 2 == 0 ? world.size() / 2 : 1}) {
    HybridGroups groups = make_hybrid_groups(world, shards);
    for (const ShardingMode mode : {ShardingMode::full_shard, ShardingMode::shard_grad_op,
                                    ShardingMode::shard_optimizer, ShardingMode::no_shard}) {
      ShardedModelOptions options;
      options.unit.mode = mode;
      options.unit.param_dtype = DType::bf16;
      options.unit.reduce_dtype = DType::bf16;
      if (shards < world.size()) {
        options.unit.replicas = groups.replicate;
      }
      ShardedModel<float> model(
          groups.shard,
          agree_on_plan(*make_strategy("full"), tiny_mlp_parameters<float>(setup), groups.shard),
          options);
      init_parameters(model);
      Reference<float> reference;
      Adam<float> adam(setup.adam);
      for (int s = 0; s < 4; ++s) {
        sharded_train_step<float>(model, world, setup, [&] { adam.step(model); });
        reference.train_step(setup);
      }
      BOOST_TEST_CONTEXT(name_of(mode) << ", " << world.size() / shards << "x" << shards) {
        BOOST_TEST(largest_relative_difference(model, reference, false) <= 2e-2);
        for (const std::string& name : setup.frozen) {
          ShardedParameter<float>& p = model.parameter(name);
          const auto piece = on_host(p.shard());
          const std::vector<float> initial = initial_values<float>(p.info());
          for (std::size_t i = 0; i < piece.size(); ++i) {
            BOOST_TEST(piece(i) == initial[static_cast<std::size_t>(p.shard_offset()) + i]);
          }
          BOOST_TEST(adam.state().names(name).empty());
        }
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(what_mixed_precision_does_not_support_is_refused) {
  ProcessGroup group(MPI_COMM_WORLD);
  auto refused = [&](auto make, const char* text) {
    try {
      make();
      BOOST_ERROR("no error; expected one containing: " << text);
    } catch (const Error& e) {
      BOOST_TEST(std::string(e.message()).find(text) != std::string::npos, e.message());
    }
  };
  ShardedModelOptions options;
  options.unit.param_dtype = DType::bf16;
  refused(
      [&] {
        ShardedModel<double> model(
            group, make_strategy("full")->make_plan(tiny_mlp_parameters<double>(), group.size()),
            options);
      },
      "keeps fp32 master weights: use a float model, not fp64");
  options = ShardedModelOptions{};
  options.unit.reduce_dtype = DType::i32;
  refused(
      [&] {
        ShardedModel<float> model(
            group, make_strategy("full")->make_plan(tiny_mlp_parameters<float>(), group.size()),
            options);
      },
      "mixed precision reduce_dtype int32 for a model of fp32");
  options = ShardedModelOptions{};
  options.unit.grad_dtype = DType::f16;
  refused(
      [&] {
        ShardedModel<float> model(
            group, make_strategy("full")->make_plan(tiny_mlp_parameters<float>(), group.size()),
            options);
      },
      "grad_dtype fp16 for a model of fp32: unscaling loss-scaled gradients would take them "
      "below float16's range");
  options.unit.grad_dtype = DType::bf16;
  refused(
      [&] {
        ShardedModel<double> model(
            group, make_strategy("full")->make_plan(tiny_mlp_parameters<double>(), group.size()),
            options);
      },
      "grad_dtype bf16 for a model of fp64; give bf16 (a float model) or fp32 for no cast");
}
