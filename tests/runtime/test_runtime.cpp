// Forward and backward scopes with prefetch: training through them matches unsharded training for
// several prefetch limits and for every optimizer by name, never holds more units than the limit,
// prefetches when allowed, turns misuse into clear errors of the right kind that change nothing,
// and hands a failed gather to the caller with the units still usable.
#include <boost/test/unit_test.hpp>
#include <chrono>
#include <optional>

#include "../unit/reference_training.hpp"
#include "error_message.hpp"
#include "fsdp/core/half_conversion.hpp"
#include "fsdp/optim/adam.hpp"
#include "fsdp/optim/optimizer.hpp"
#include "fsdp/runtime/runtime.hpp"
#include "fsdp/shard/plan_agreement.hpp"
#include "fsdp/shard/plan_estimate.hpp"

using namespace fsdp;
using namespace fsdp::test;

namespace {

const std::vector<std::string> kOrder = {"l0", "l1", "l2"};

template <class T>
void init_from_reference(ShardedModel<T>& model) {
  for (const ParameterInfo& p : model.plan().parameters()) {
    model.init_from_full(p.name, to_device(initial_values<T>(p)).data());
  }
}

template <class T>
int units_not_sharded(ShardedModel<T>& model) {
  int count = 0;
  for (std::size_t u = 0; u < model.unit_count(); ++u) {
    count += model.unit(u).state() != UnitState::sharded ? 1 : 0;
  }
  return count;
}

// One training step through the scopes, layer by layer; returns the most units that were
// gathered or gathering at once.
template <class T>
int scoped_step(Runtime<T>& runtime, ShardedModel<T>& model) {
  const int n = model.group().size();
  const int local = kBatch / n;
  LayeredMlp<T> mlp(model.group().rank() * local, local, local);
  int most = 0;
  for (std::size_t k = 0; k < kOrder.size(); ++k) {
    auto scope = runtime.forward(kOrder[k]);
    most = std::max(most, units_not_sharded(model));
    const std::string l = kOrder[k];
    // The layers run on the host, on host copies of the gathered parameters.
    const auto w = on_host(scope.full(l + ".w"));
    const auto b = on_host(scope.full(l + ".b"));
    const auto gain = k == 2 ? on_host(scope.full("l2.gain")) : decltype(w)();
    mlp.forward(static_cast<int>(k), w.data(), b.data(), k == 2 ? gain.data() : nullptr);
    runtime.progress();
  }
  for (std::size_t k = kOrder.size(); k-- > 0;) {
    auto scope = runtime.backward(kOrder[k]);
    most = std::max(most, units_not_sharded(model));
    const std::string l = kOrder[k];
    const bool last = k == 2;
    const auto w = on_host(scope.full(l + ".w"));
    const auto gain = last ? on_host(scope.full("l2.gain")) : decltype(w)();
    const auto grad_w = on_host(scope.grad(l + ".w"));
    const auto grad_b = on_host(scope.grad(l + ".b"));
    const auto grad_gain = last ? on_host(scope.grad("l2.gain")) : decltype(grad_w)();
    mlp.backward(static_cast<int>(k), w.data(), last ? gain.data() : nullptr, grad_w.data(),
                 grad_b.data(), last ? grad_gain.data() : nullptr);
    to_view(scope.grad(l + ".w"), grad_w);
    to_view(scope.grad(l + ".b"), grad_b);
    if (last) {
      to_view(scope.grad("l2.gain"), grad_gain);
    }
  }
  runtime.finish_step();
  return most;
}

template <class T = double>
ShardedModel<T> make_model(const Strategy& strategy,
                           ProcessGroup group = ProcessGroup(MPI_COMM_WORLD),
                           ShardingMode mode = ShardingMode::full_shard,
                           DType param_dtype = DType::f32) {
  auto maker = make_strategy(strategy.name, strategy.options);
  ShardedModelOptions options;
  options.unit.mode = mode;
  options.unit.param_dtype = param_dtype;
  options.unit.reduce_dtype = param_dtype;
  ShardedModel<T> model(group, agree_on_plan(*maker, tiny_mlp_parameters<T>(), group), options);
  init_from_reference(model);
  return model;
}

}  // namespace

BOOST_AUTO_TEST_CASE(scopes_with_prefetch_match_unsharded_training) {
  OptimizerSetup setup;
  setup.kind = "adam";
  setup.adam.lr = 0.05;
  struct Case {
    int limit;
    bool prefetch;
    std::set<std::string> keep;
  };
  const std::vector<Case> cases = {
      {1, true, {}}, {2, true, {}}, {3, true, {}}, {2, false, {}}, {3, true, {"l0"}}};
  for (const Strategy& strategy : strategies()) {
    for (const Case& c : cases) {
      ShardedModel<double> model = make_model(strategy);
      RuntimeOptions options;
      options.max_gathered_units = c.limit;
      options.prefetch = c.prefetch;
      options.keep_gathered_until_backward = c.keep;
      Runtime<double> runtime(model, kOrder, options);
      Adam<double> adam(setup.adam);
      Reference<double> reference;
      for (int step = 0; step < 4; ++step) {
        const int most = scoped_step(runtime, model);
        BOOST_TEST(most <= std::max(c.limit, 1 + static_cast<int>(c.keep.size())),
                   "at most " << c.limit << " units gathered, saw " << most);
        adam.step(model);
        model.zero_grad();
        reference.train_step(setup);
        for (std::size_t u = 0; u < model.unit_count(); ++u) {
          BOOST_TEST((model.unit(u).state() == UnitState::sharded));  // finish_step released
        }
      }
      const double difference = largest_relative_difference(model, reference);
      BOOST_TEST(difference <= 1e-6, strategy.name << " limit " << c.limit << " prefetch "
                                                   << c.prefetch << ": " << difference);
      const RuntimeStats& stats = runtime.stats();
      BOOST_TEST(stats.scopes == 4 * 6);
      if (c.prefetch && c.limit >= 2) {
        BOOST_TEST(stats.prefetched > 0);
        BOOST_TEST(stats.ready_on_entry > 0);
      }
      if (!c.prefetch) {
        BOOST_TEST(stats.prefetched == 0);
      }
    }
  }
}

// Closing a backward scope starts its unit's gradient reduction and returns; at most
// RuntimeOptions::max_reductions_in_flight are in flight at once. The runtime's count (a reduction
// counts until the runtime waits for it, so it is the same on every rank and independent of
// timing) reaches the limit and never passes it, finish_step leaves none in flight, and training
// matches unsharded training at every limit (0: each reduction is waited for at once).
BOOST_AUTO_TEST_CASE(reductions_in_flight_stay_within_their_limit) {
  OptimizerSetup setup;
  setup.kind = "adam";
  setup.adam.lr = 0.05;
  const int steps = 3;
  for (const Strategy& strategy : strategies()) {
    for (int limit : {0, 1, 2, 3}) {
      ShardedModel<double> model = make_model(strategy);
      RuntimeOptions options;
      options.max_reductions_in_flight = limit;
      Runtime<double> runtime(model, kOrder, options);
      Adam<double> adam(setup.adam);
      Reference<double> reference;
      for (int step = 0; step < steps; ++step) {
        scoped_step(runtime, model);
        BOOST_TEST(model.reductions_in_flight() == 0u);  // finish_step waited for them
        BOOST_TEST(model.has_grads());
        adam.step(model);
        model.zero_grad();
        reference.train_step(setup);
      }
      const RuntimeStats& stats = runtime.stats();
      BOOST_TEST(stats.reductions == steps * 3);
      BOOST_TEST(stats.most_reductions_in_flight == std::min(limit, 3),
                 strategy.name << " limit " << limit);
      BOOST_TEST(stats.incomplete_at_finish <= steps * std::min(limit, 3));
      const double difference = largest_relative_difference(model, reference);
      BOOST_TEST(difference <= 1e-6, strategy.name << " limit " << limit << ": " << difference);
    }
  }
  RuntimeOptions negative;
  negative.max_reductions_in_flight = -1;
  ShardedModel<double> model = make_model(strategies().front());
  BOOST_CHECK_EXCEPTION(Runtime<double>(model, kOrder, negative), Error,
                        error_of(ErrorKind::usage, "max_reductions_in_flight must be >= 0"));
}

// set_overlap changes the limits from the next step on (the C API's and Fortran's way to them):
// the reductions in flight follow the new limit, and a call inside a step, a value out of range or
// ranks that disagree are refused on every rank, leaving the limits as they were.
BOOST_AUTO_TEST_CASE(set_overlap_changes_the_limits_between_steps) {
  ShardedModel<double> model = make_model(strategies().front());
  Runtime<double> runtime(model, kOrder);
  for (int limit : {0, 1, 3}) {  // rising: the stats keep the most in flight over the steps
    runtime.set_overlap(2, limit);
    BOOST_TEST(runtime.options().max_gathered_units_backward == 2);
    BOOST_TEST(runtime.options().max_reductions_in_flight == limit);
    scoped_step(runtime, model);
    BOOST_TEST(runtime.stats().most_reductions_in_flight == limit, "limit " << limit);
    model.zero_grad();
  }
  runtime.begin_forward("l0");
  BOOST_CHECK_EXCEPTION(runtime.set_overlap(0, 1), Error,
                        error_of(ErrorKind::order, "the forward scope of 'l0' is open"));
  runtime.end_forward("l0");
  for (const std::string unit : {"l1", "l2"}) {
    runtime.begin_forward(unit);
    runtime.end_forward(unit);
  }
  runtime.finish_step();  // an evaluation step
  BOOST_CHECK_EXCEPTION(runtime.set_overlap(0, -1), Error,
                        error_of(ErrorKind::usage, "max_reductions_in_flight must be >= 0"));
  BOOST_CHECK_EXCEPTION(runtime.set_overlap(-2, 1), Error,
                        error_of(ErrorKind::usage, "max_gathered_units_backward must be >= 1"));
  if (model.group().size() > 1) {
    BOOST_CHECK_EXCEPTION(runtime.set_overlap(0, model.group().rank() == 1 ? 1 : 2), Error,
                          error_of(ErrorKind::mismatch, "max_reductions_in_flight"));
  }
  BOOST_TEST(runtime.options().max_reductions_in_flight == 3);
  BOOST_TEST(runtime.options().max_gathered_units_backward == 2);
}

// A reduction in flight that fails (rank 0 reduces l0 while the other ranks reduce l1, whose
// pieces have another size; collective checks on) raises nothing while it is polled, and raises
// at the wait on every rank; the model then reduces and trains as before.
// The backward's prefetch depth is its own (RuntimeOptions::max_gathered_units_backward): 1 unit
// at a time in the forward, and 3 in the backward when it says so (decisions that depend on the
// calls only, so the counts are exact).
// last_step() holds the last step's figures alone.
BOOST_AUTO_TEST_CASE(the_backward_prefetches_as_deep_as_it_is_told_and_each_step_is_reported) {
  OptimizerSetup setup;
  setup.kind = "adam";
  setup.adam.lr = 0.05;
  for (const int backward : {0, 3}) {
    ShardedModel<double> model = make_model(strategies().front());
    RuntimeOptions options;
    options.max_gathered_units = 1;
    options.max_gathered_units_backward = backward;
    Runtime<double> runtime(model, kOrder, options);
    BOOST_TEST(runtime.last_step().scopes == 0);
    Adam<double> adam(setup.adam);
    Reference<double> reference;
    for (int step = 0; step < 2; ++step) {
      const int most = scoped_step(runtime, model);
      // One unit at a time in the forward; the backward's first scope (the last unit, kept
      // gathered) starts the other two when it may hold 3 (unit states, not timing).
      BOOST_TEST(most == std::max(1, backward));
      const RuntimeStats& last = runtime.last_step();
      BOOST_TEST(last.scopes == 6);
      BOOST_TEST(last.reductions == 3);
      BOOST_TEST(last.ready_on_entry <= last.scopes);
      BOOST_TEST(last.incomplete_at_finish <= 2);
      adam.step(model);
      model.zero_grad();
      reference.train_step(setup);
    }
    BOOST_TEST(runtime.stats().scopes == 12);
    BOOST_TEST(largest_relative_difference(model, reference) <= 1e-6);
  }
  RuntimeOptions negative;
  negative.max_gathered_units_backward = -1;
  ShardedModel<double> model = make_model(strategies().front());
  BOOST_CHECK_EXCEPTION(Runtime<double>(model, kOrder, negative), Error,
                        error_of(ErrorKind::usage, "max_gathered_units_backward must be >= 1"));
}

namespace {

// The tiny MLP over a group that checks collectives' signatures (a minute's timeout), for ranks
// made to disagree: rank 0 uses unit l0 where the others use l1, whose pieces have another size.
// Empty on one rank, where no rank can disagree.
std::optional<ShardedModel<double>> model_for_disagreeing_ranks() {
  if (ProcessGroup(MPI_COMM_WORLD).size() < 2) {
    BOOST_TEST_MESSAGE("ranks that disagree need 2 ranks or more");
    return std::nullopt;
  }
  CollectiveOptions checked;
  checked.check_arguments = true;
  checked.timeout_s = 60;
  return make_model(strategies()[0], ProcessGroup(MPI_COMM_WORLD, checked));
}

std::string disagreeing_unit(ShardedModel<double>& model) {
  return model.group().rank() == 0 ? "l0" : "l1";
}

bool ranks_disagree(const Error& error) {
  return error.kind() == ErrorKind::mismatch && message_has("ranks disagree on collective")(error);
}

}  // namespace

BOOST_AUTO_TEST_CASE(a_failed_reduction_reaches_every_rank_at_the_wait) {
  std::optional<ShardedModel<double>> disagreeing = model_for_disagreeing_ranks();
  if (!disagreeing) {
    return;
  }
  ShardedModel<double>& model = *disagreeing;
  const std::string mine = disagreeing_unit(model);
  model.reduce_scatter_grads_async(model.unit(mine));
  BOOST_TEST(model.reductions_in_flight() == 1u);
  for (int poll = 0; poll < 100; ++poll) {
    model.progress_reductions();
  }
  BOOST_CHECK_EXCEPTION(model.wait_for_gradients(), Error, ranks_disagree);
  BOOST_TEST(model.reductions_in_flight() == 0u);
  BOOST_TEST(!model.unit(mine).reducing());
  BOOST_TEST(!model.unit(mine).has_grads());
  Runtime<double> runtime(model, kOrder);
  scoped_step(runtime, model);
  BOOST_TEST(model.has_grads());
}

// Every sharding mode trains through the same scopes, in fp64 (within 1e-12 of unsharded
// training) and in bf16 mixed precision over fp32 pieces (within 2e-2 of fp32 training). Modes
// that keep whole parameters from forward to backward gather each unit once per step (after the
// optimizer changed the pieces) and hold every unit at once (bf16: widened copies, given back at
// finish_step); the others gather twice but for the last unit, which stays gathered into its
// backward, and hold at most the prefetch limit.
template <class T>
void train_every_mode_through_the_scopes(DType param_dtype, double tolerance) {
  OptimizerSetup setup;
  setup.kind = "adam";
  setup.adam.lr = 0.05;
  const int steps = 4;
  const bool mixed = param_dtype != DType::f32;
  for (const Strategy& strategy : strategies()) {
    for (const ShardingMode mode : {ShardingMode::full_shard, ShardingMode::shard_grad_op,
                                    ShardingMode::shard_optimizer, ShardingMode::no_shard}) {
      ShardedModel<T> model =
          make_model<T>(strategy, ProcessGroup(MPI_COMM_WORLD), mode, param_dtype);
      Runtime<T> runtime(model, kOrder);
      Adam<T> adam(setup.adam);
      Reference<T> reference;
      int most = 0;
      for (int step = 0; step < steps; ++step) {
        most = std::max(most, scoped_step(runtime, model));
        adam.step(model);
        model.zero_grad();
        reference.train_step(setup);
        BOOST_TEST(units_not_sharded(model) == 0);  // finish_step released every unit
      }
      const double difference = largest_relative_difference(model, reference, !mixed);
      const bool resident =
          mode == ShardingMode::shard_grad_op || mode == ShardingMode::shard_optimizer;
      BOOST_TEST_CONTEXT(name_of(mode) << " " << strategy.name << " " << name_of(param_dtype)) {
        BOOST_TEST(difference <= tolerance);
        if (mixed) {
          BOOST_TEST(difference > 1e-6);  // it did compute in 16 bits
        }
        BOOST_TEST(runtime.stats().gathers == steps * (resident ? 3 : 5));
        BOOST_TEST(most == (resident ? 3 : 2));
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(every_sharding_mode_trains_through_the_scopes) {
  train_every_mode_through_the_scopes<double>(DType::f32, 1e-12);
}

BOOST_AUTO_TEST_CASE(every_sharding_mode_trains_in_bf16_through_the_scopes) {
  train_every_mode_through_the_scopes<float>(DType::bf16, 2e-2);
}

// Under bf16 a scope hands the model the gathered 16-bit parameter (half()) and, from full(), its
// float copy: exactly those values widened, counted as gathered parameters while the scope is
// open and freed when it closes, so that what stays gathered between scopes (every unit, in
// shard_grad_op) is 2 bytes per element. half() of a unit that gathers in fp32 is refused.
BOOST_AUTO_TEST_CASE(bf16_scopes_hand_16_bit_parameters_and_free_their_float_copies) {
  ShardedModel<float> model = make_model<float>(strategies().front(), ProcessGroup(MPI_COMM_WORLD),
                                                ShardingMode::shard_grad_op, DType::bf16);
  RuntimeOptions no_prefetch;  // only the scopes' units gathered, so the bytes are theirs
  no_prefetch.prefetch = false;
  Runtime<float> runtime(model, kOrder, no_prefetch);
  const auto gathered = [&] {
    return model.memory().current_of(MemoryCategory::gathered_parameters);
  };
  std::int64_t half_bytes = 0;  // of the units gathered so far
  for (const std::string& l : kOrder) {
    auto scope = runtime.forward(l);
    std::int64_t elements = 0;
    for (const ShardedParameter<float>& p : scope.unit().parameters()) {
      elements += p.numel();
    }
    half_bytes += 2 * elements;
    BOOST_TEST(gathered() == half_bytes);
    const auto half =
        Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), scope.half(l + ".w"));
    const auto full =
        Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), scope.full(l + ".w"));
    BOOST_TEST(gathered() == half_bytes + 4 * static_cast<std::int64_t>(full.size()));
    BOOST_REQUIRE(half.size() == full.size());
    for (std::size_t i = 0; i < full.size(); ++i) {
      BOOST_TEST(full(i) == half::from_bfloat16_bits(half(i)));
    }
    scope.close();
    BOOST_TEST(gathered() == half_bytes);  // the float copy went, the 16-bit parameters stay
  }
  for (std::size_t k = kOrder.size(); k-- > 0;) {
    runtime.backward(kOrder[k]).close();
  }
  runtime.finish_step();
  BOOST_TEST(gathered() == 0);

  ShardedModel<float> fp32 = make_model<float>(strategies().front());
  Runtime<float> fp32_runtime(fp32, kOrder);
  auto scope = fp32_runtime.forward("l0");
  BOOST_CHECK_EXCEPTION(scope.half("l0.w"), Error, [](const Error& e) {
    return e.kind() == ErrorKind::state &&
           std::string(e.what()).find("gathers its parameters in fp32") != std::string::npos;
  });
}

// shard_optimizer keeps each rank's averaged gradient piece inside the whole gradients: a second
// reduction before zero_grad would mix averaged and local values, so it is refused.
BOOST_AUTO_TEST_CASE(shard_optimizer_reduces_once_per_step) {
  ShardedModel<double> model =
      make_model(strategies().front(), ProcessGroup(MPI_COMM_WORLD), ShardingMode::shard_optimizer);
  ShardedUnit<double>& unit = model.unit(0);
  unit.gather();
  unit.reduce_scatter_grads();
  BOOST_CHECK_EXCEPTION(unit.reduce_scatter_grads(), Error, [](const Error& e) {
    return e.kind() == ErrorKind::state &&
           std::string(e.what()).find("twice before zero_grad in mode shard_optimizer") !=
               std::string::npos;
  });
  model.zero_grad();
  unit.reduce_scatter_grads();  // allowed again
  unit.release();
}

// Gradient accumulation: two steps without gradient sync and a third with it leave in every
// gradient piece the average over the ranks of three steps' gradients, reduced once; until then
// every unit holds its whole gradients (counted as full_gradients, except in shard_optimizer,
// which keeps them anyway), and zero_grad drops gradients that were never reduced.
BOOST_AUTO_TEST_CASE(steps_without_gradient_sync_accumulate_and_reduce_once) {
  const auto pieces_of = [](ShardedModel<double>& model) {
    std::vector<double> values;
    for (std::size_t u = 0; u < model.unit_count(); ++u) {
      for (ShardedParameter<double>& p : model.unit(u).parameters()) {
        const auto grad = on_host(p.grad_shard());
        values.insert(values.end(), grad.data(), grad.data() + grad.size());
      }
    }
    return values;
  };
  const auto whole_gradient_bytes = [](ShardedModel<double>& model) {
    return model.memory().current_of(MemoryCategory::full_gradients);
  };
  for (const Strategy& strategy : strategies()) {
    for (const ShardingMode mode : {ShardingMode::full_shard, ShardingMode::shard_grad_op,
                                    ShardingMode::shard_optimizer, ShardingMode::no_shard}) {
      BOOST_TEST_CONTEXT(name_of(mode) << " " << strategy.name) {
        ShardedModel<double> once = make_model(strategy, ProcessGroup(MPI_COMM_WORLD), mode);
        Runtime<double> once_runtime(once, kOrder);
        scoped_step(once_runtime, once);
        const std::vector<double> one_step = pieces_of(once);

        ShardedModel<double> model = make_model(strategy, ProcessGroup(MPI_COMM_WORLD), mode);
        Runtime<double> runtime(model, kOrder);
        runtime.set_requires_gradient_sync(false);
        BOOST_TEST(!runtime.requires_gradient_sync());
        scoped_step(runtime, model);
        scoped_step(runtime, model);
        const bool resident = mode == ShardingMode::shard_optimizer;
        BOOST_TEST((whole_gradient_bytes(model) > 0) == !resident);
        // The estimate's whole gradients: the measured ones without the pieces' padding and
        // the replicated parameters' (kept whole, so not in the estimate's working set).
        EstimateOptions estimate_options;
        estimate_options.mode = mode;
        estimate_options.accumulates_whole_gradients = true;
        const std::int64_t estimated =
            estimate(model.plan(), estimate_options).accumulated_gradient_bytes;
        BOOST_TEST(estimated <= whole_gradient_bytes(model));
        BOOST_TEST(estimated >= whole_gradient_bytes(model) * 3 / 4);
        for (std::size_t u = 0; u < model.unit_count(); ++u) {
          BOOST_TEST(!model.unit(u).has_grads());  // nothing reduced yet
        }
        runtime.set_requires_gradient_sync(true);
        scoped_step(runtime, model);
        BOOST_TEST(whole_gradient_bytes(model) == 0);
        BOOST_TEST(model.unit(0).has_grads());
        const std::vector<double> accumulated = pieces_of(model);
        BOOST_TEST_REQUIRE(accumulated.size() == one_step.size());
        for (std::size_t i = 0; i < accumulated.size(); ++i) {
          BOOST_TEST(
              std::abs(accumulated[i] - 3 * one_step[i]) <= 1e-14 * (1 + std::abs(3 * one_step[i])),
              "element " << i << ": " << accumulated[i] << " against 3 x " << one_step[i]);
        }

        // Unreduced gradients that the caller gives up are dropped, not carried into the next.
        model.zero_grad();
        runtime.set_requires_gradient_sync(false);
        scoped_step(runtime, model);
        model.zero_grad();
        BOOST_TEST(whole_gradient_bytes(model) == 0);
        runtime.set_requires_gradient_sync(true);
        scoped_step(runtime, model);
        const std::vector<double> fresh = pieces_of(model);
        for (std::size_t i = 0; i < fresh.size(); ++i) {
          BOOST_TEST(std::abs(fresh[i] - one_step[i]) <= 1e-14 * (1 + std::abs(one_step[i])));
        }
      }
    }
  }
}

// grad_dtype bf16: the same accumulation with the kept gradients in bfloat16. shard_optimizer
// folds each backward's fp32 gradients into its kept bfloat16 whole gradients when the scope
// closes, so between steps it holds no fp32 whole gradients (2 bytes per element where fp32
// keeps 4); the other modes keep theirs to the reducing step, as in fp32. The pieces come to three
// steps' average within bfloat16's rounding of each addition.
BOOST_AUTO_TEST_CASE(bf16_gradients_accumulate_in_every_mode) {
  const auto pieces_of = [](ShardedModel<float>& model) {
    std::vector<double> values;
    for (std::size_t u = 0; u < model.unit_count(); ++u) {
      for (ShardedParameter<float>& p : model.unit(u).parameters()) {
        BOOST_TEST_REQUIRE(p.grad_piece().in_bfloat16());
        const std::vector<float> piece = values_of(p.grad_piece());
        values.insert(values.end(), piece.begin(), piece.end());
      }
    }
    return values;
  };
  for (const ShardingMode mode : {ShardingMode::full_shard, ShardingMode::shard_grad_op,
                                  ShardingMode::shard_optimizer, ShardingMode::no_shard}) {
    BOOST_TEST_CONTEXT(name_of(mode)) {
      const auto make = [&] {
        auto maker = make_strategy("full");
        ProcessGroup group(MPI_COMM_WORLD);
        ShardedModelOptions options;
        options.unit.mode = mode;
        options.unit.grad_dtype = DType::bf16;
        ShardedModel<float> model(group, agree_on_plan(*maker, tiny_mlp_parameters<float>(), group),
                                  options);
        init_from_reference(model);
        return model;
      };
      ShardedModel<float> once = make();
      Runtime<float> once_runtime(once, kOrder);
      scoped_step(once_runtime, once);
      const std::vector<double> one_step = pieces_of(once);

      ShardedModel<float> model = make();
      Runtime<float> runtime(model, kOrder);
      runtime.set_requires_gradient_sync(false);
      scoped_step(runtime, model);
      scoped_step(runtime, model);
      const bool resident = mode == ShardingMode::shard_optimizer;
      BOOST_TEST((model.memory().current_of(MemoryCategory::full_gradients) > 0) == !resident);
      runtime.set_requires_gradient_sync(true);
      scoped_step(runtime, model);
      BOOST_TEST(model.memory().current_of(MemoryCategory::full_gradients) == 0);
      const std::vector<double> accumulated = pieces_of(model);
      BOOST_TEST_REQUIRE(accumulated.size() == one_step.size());
      // Each rank rounds its own sums before the average: an element whose ranks' gradients
      // cancel carries the rounding of the larger sums, up to 3 x 2^-9 of the largest.
      double largest = 0;
      for (const double g : one_step) {
        largest = std::max(largest, std::abs(3 * g));
      }
      for (std::size_t i = 0; i < accumulated.size(); ++i) {
        BOOST_TEST(std::abs(accumulated[i] - 3 * one_step[i]) <=
                       0x1p-7 * std::abs(3 * one_step[i]) + 0x1p-7 * largest,
                   "element " << i << ": " << accumulated[i] << " against 3 x " << one_step[i]);
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(gradient_sync_changes_between_steps_only_and_alike_on_every_rank) {
  ShardedModel<double> model = make_model(strategies().front());
  Runtime<double> runtime(model, kOrder);
  runtime.begin_forward("l0");
  BOOST_CHECK_EXCEPTION(runtime.set_requires_gradient_sync(false), Error,
                        error_of(ErrorKind::order, "the forward scope of 'l0' is open"));
  runtime.end_forward("l0");
  BOOST_CHECK_EXCEPTION(runtime.set_requires_gradient_sync(false), Error,
                        error_of(ErrorKind::order, "1 scopes done); call it between steps"));
  for (const std::string unit : {"l1", "l2"}) {
    runtime.begin_forward(unit);
    runtime.end_forward(unit);
  }
  runtime.finish_step();  // an evaluation step
  BOOST_TEST(runtime.requires_gradient_sync());
  if (model.group().size() > 1) {
    BOOST_CHECK_EXCEPTION(runtime.set_requires_gradient_sync(model.group().rank() != 1), Error,
                          error_of(ErrorKind::mismatch, "requires_gradient_sync"));
    BOOST_TEST(runtime.requires_gradient_sync());
  }
  runtime.set_requires_gradient_sync(false);
  BOOST_TEST(!runtime.requires_gradient_sync());
}

BOOST_AUTO_TEST_CASE(evaluation_steps_run_forward_only) {
  ShardedModel<double> model = make_model(strategies()[0]);
  Runtime<double> runtime(model, kOrder);
  for (const std::string& unit : kOrder) {
    auto scope = runtime.forward(unit);
    BOOST_CHECK_EXCEPTION(scope.grad(unit + ".b"), Error, [](const Error& e) {
      return std::string(e.what()).find("gradients are written in backward scopes") !=
             std::string::npos;
    });
  }
  runtime.finish_step();
  BOOST_TEST(units_not_sharded(model) == 0);
}

BOOST_AUTO_TEST_CASE(begin_end_calls_for_c_and_fortran) {
  ShardedModel<double> model = make_model(strategies()[1]);
  Runtime<double> runtime(model, kOrder);
  for (const std::string& unit : kOrder) {
    BOOST_TEST(runtime.begin_forward(unit).name() == unit);
    runtime.end_forward(unit);
  }
  for (auto it = kOrder.rbegin(); it != kOrder.rend(); ++it) {
    runtime.begin_backward(*it);
    runtime.end_backward(*it);
  }
  runtime.finish_step();
  BOOST_TEST(model.has_grads());
}

// The units asked for are gathering or gathered right after the call (the others untouched), and
// their whole parameters arrive; release_multiple shards them again.
void check_gather_and_release_multiple(Runtime<double>& runtime, ShardedModel<double>& model) {
  const std::int64_t gathers = runtime.stats().gathers;
  runtime.gather_multiple_async({"l0", "l1", "l0"});
  BOOST_TEST(runtime.stats().gathers == gathers + 2);
  BOOST_TEST((model.unit("l2").state() == UnitState::sharded));
  runtime.progress();
  for (const char* name : {"l0", "l1"}) {
    ShardedUnit<double>& unit = model.unit(name);
    BOOST_TEST((unit.state() != UnitState::sharded), name << " is not gathering after the call");
    if (unit.state() == UnitState::gathering) {
      unit.wait_gather();
    }
    for (const ParameterInfo& p : model.plan().parameters()) {
      if (p.unit() == name) {
        const auto full = on_host(unit.parameter(p.name).full());
        const std::vector<double> expected = initial_values<double>(p);
        BOOST_TEST(std::vector<double>(full.data(), full.data() + full.size()) == expected,
                   boost::test_tools::per_element());
      }
    }
  }
  runtime.gather_multiple_async({"l0"});  // already gathered: nothing to start
  BOOST_TEST(runtime.stats().gathers == gathers + 2);
  runtime.release_multiple({"l0", "l1"});
  BOOST_TEST(units_not_sharded(model) == 0);
}

BOOST_AUTO_TEST_CASE(gather_multiple_async_gathers_and_release_multiple_releases) {
  ShardedModel<double> model = make_model(strategies()[0]);
  Runtime<double> runtime(model, kOrder);
  runtime.gather_multiple_async({});
  BOOST_TEST(units_not_sharded(model) == 0);
  check_gather_and_release_multiple(runtime, model);
  BOOST_CHECK_EXCEPTION(runtime.gather_multiple_async({"l0", "l9"}), Error,
                        error_of(ErrorKind::unknown_name, "unknown unit 'l9'"));
  BOOST_TEST(units_not_sharded(model) == 0);  // checked every name before starting any gather
  runtime.gather_multiple_async({"l1"});
  BOOST_CHECK_EXCEPTION(runtime.release_multiple({"l0", "l1"}), Error,
                        error_of(ErrorKind::state, "while it is gathering"));
  model.unit("l1").wait_gather();
  runtime.release_multiple({"l1"});
  BOOST_TEST(units_not_sharded(model) == 0);
}

// Polls the runtime until a gather fails (at most a minute): the failure reaches the caller
// through progress() too, not only through a wait.
void progress_until_it_fails(Runtime<double>& runtime) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < deadline) {
    runtime.progress();
  }
  BOOST_FAIL("progress() did not raise the refused gather within a minute");
}

// A gather that fails inside the runtime: rank 0 asks for l0 while the other ranks ask for l1,
// whose pieces have another size. With collective checks on, every rank's all_gather is refused
// before it starts. The check runs while the caller goes on, so the error reaches every caller
// when it waits for the gather or polls it; the units stay sharded, and the same runtime gathers,
// releases and trains afterwards.
BOOST_AUTO_TEST_CASE(a_failed_gather_reaches_the_caller_and_leaves_the_units_usable) {
  std::optional<ShardedModel<double>> disagreeing = model_for_disagreeing_ranks();
  if (!disagreeing) {
    return;
  }
  ShardedModel<double>& model = *disagreeing;
  Runtime<double> runtime(model, kOrder);
  const std::string mine = disagreeing_unit(model);
  const auto disagreement = ranks_disagree;
  runtime.gather_multiple_async({mine});
  BOOST_CHECK_EXCEPTION(model.unit(mine).wait_gather(), Error, disagreement);
  BOOST_TEST(units_not_sharded(model) == 0);
  runtime.gather_multiple_async({mine});
  BOOST_CHECK_EXCEPTION(progress_until_it_fails(runtime), Error, disagreement);
  BOOST_TEST(units_not_sharded(model) == 0);
  BOOST_TEST(runtime.stats().gathers == 2);
  check_gather_and_release_multiple(runtime, model);
  scoped_step(runtime, model);
  BOOST_TEST(model.has_grads());
  BOOST_TEST(units_not_sharded(model) == 0);
}

// A call refused for its order or its names leaves everything as it was (units, statistics,
// phase), and the expected call still works.
BOOST_AUTO_TEST_CASE(a_refused_call_changes_nothing) {
  ShardedModel<double> model = make_model(strategies()[0]);
  Runtime<double> runtime(model, kOrder);
  const auto refused = [&](auto call, ErrorKind kind, const std::string& text) {
    std::vector<UnitState> states;
    for (std::size_t u = 0; u < model.unit_count(); ++u) {
      states.push_back(model.unit(u).state());
    }
    const RuntimeStats before = runtime.stats();
    BOOST_CHECK_EXCEPTION(call(), Error, error_of(kind, text));
    for (std::size_t u = 0; u < model.unit_count(); ++u) {
      BOOST_TEST((model.unit(u).state() == states[u]), "unit " << u << " changed state");
    }
    BOOST_TEST(runtime.stats().scopes == before.scopes);
    BOOST_TEST(runtime.stats().gathers == before.gathers);
  };
  refused([&] { runtime.end_forward("l0"); }, ErrorKind::order, "no scope is open");
  refused([&] { runtime.begin_backward("l2"); }, ErrorKind::order, "after 0 of 3 forward");
  refused([&] { runtime.finish_step(); }, ErrorKind::order, "after 0 of 3 forward");
  refused([&] { runtime.begin_forward("l9"); }, ErrorKind::unknown_name, "unknown unit 'l9'");
  refused([&] { runtime.full("l0.w"); }, ErrorKind::state, "with no scope open");
  runtime.begin_forward("l0");
  refused([&] { runtime.begin_forward("l1"); }, ErrorKind::order,
          "while the forward scope of 'l0' is open");
  refused([&] { runtime.end_forward("l1"); }, ErrorKind::order,
          "the forward scope of 'l0' is open");
  refused([&] { runtime.grad("l0.w"); }, ErrorKind::state, "gradients are written in backward");
  refused([&] { runtime.full("l1.w"); }, ErrorKind::state, "open its own unit's scope");
  refused([&] { runtime.full("l7.w"); }, ErrorKind::unknown_name, "no parameter 'l7.w'");
  refused([&] { runtime.release_multiple({"l0"}); }, ErrorKind::state, "is open");
  BOOST_TEST(runtime.full("l0.w").size() == 35u);
  runtime.end_forward("l0");
  runtime.begin_forward("l1");
  runtime.end_forward("l1");
  runtime.begin_forward("l2");
  runtime.end_forward("l2");
  refused([&] { runtime.begin_forward("l0"); }, ErrorKind::order,
          "every forward scope already ran");
  // Refused at the turn from forward to backward: still in forward, so an evaluation step ends.
  refused([&] { runtime.begin_backward("l0"); }, ErrorKind::order, "expected 'l2'");
  runtime.finish_step();
  BOOST_TEST(units_not_sharded(model) == 0);
  scoped_step(runtime, model);
  BOOST_TEST(model.has_grads());
}

// Every optimizer by name trains like its rule written out in the reference, with settings that
// differ from the defaults; an unknown name lists the known ones.
BOOST_AUTO_TEST_CASE(optimizers_by_name_match_the_reference_rules) {
  OptimizerSettings settings;
  settings.lr = 0.05;
  settings.weight_decay = 0.02;
  settings.momentum = 0.8;
  settings.nesterov = true;
  settings.beta1 = 0.8;
  settings.beta2 = 0.99;
  settings.eps = 1e-6;
  OptimizerSetup setup;
  setup.sgd = SgdOptions{settings.lr, settings.momentum, 0.0, true, settings.weight_decay};
  setup.adam.lr = settings.lr;
  setup.adam.beta1 = settings.beta1;
  setup.adam.beta2 = settings.beta2;
  setup.adam.eps = settings.eps;
  setup.adam.weight_decay = settings.weight_decay;
  BOOST_TEST(optimizer_names() == (std::vector<std::string>{"sgd", "adam", "adamw"}),
             boost::test_tools::per_element());
  const std::map<std::string, OptimizerKind> kinds = {{"sgd", OptimizerKind::sgd_momentum},
                                                      {"adam", OptimizerKind::adam},
                                                      {"adamw", OptimizerKind::adamw}};
  for (const std::string& name : optimizer_names()) {
    setup.kind = name;
    ShardedModel<double> model = make_model(strategies()[0]);
    Runtime<double> runtime(model, kOrder);
    Optimizer<double> optimizer(name, settings);
    BOOST_TEST(optimizer.name() == name);
    BOOST_TEST((optimizer.kind() == kinds.at(name)));
    Reference<double> reference;
    for (int step = 0; step < 3; ++step) {
      scoped_step(runtime, model);
      optimizer.step(model);
      model.zero_grad();
      reference.train_step(setup);
    }
    const double difference = largest_relative_difference(model, reference);
    BOOST_TEST(difference <= 1e-9, name << ": " << difference);
  }
  OptimizerSettings plain;
  BOOST_TEST((Optimizer<double>("sgd", plain).kind() == OptimizerKind::sgd));
  BOOST_CHECK_EXCEPTION(
      Optimizer<double>("lamb", plain), Error,
      error_of(ErrorKind::usage, "unknown optimizer 'lamb'; use sgd, adam or adamw"));
  plain.lr = -1;
  BOOST_CHECK_EXCEPTION(Optimizer<float>("adamw", plain), Error, message_has("lr must be >= 0"));
}

// Every rank's parameter pieces, unit by unit, on the host.
template <class T>
std::vector<std::vector<T>> pieces_of(ShardedModel<T>& model) {
  std::vector<std::vector<T>> pieces;
  for (std::size_t u = 0; u < model.unit_count(); ++u) {
    for (ShardedParameter<T>& p : model.unit(u).parameters()) {
      const auto shard = on_host(p.shard());
      pieces.emplace_back(shard.data(), shard.data() + shard.size());
    }
  }
  return pieces;
}

// The optimizer in backward (Runtime::set_optimizer_in_backward) steps each unit as the runtime
// waits for its reduction: bit for bit the step of the whole model after finish_step, for every
// rule, mode and limit on the reductions in flight; the units it steps before finish_step are
// those the limit makes the backward wait for (all of them at 0); the rule counts one step per
// step. Evaluation steps and steps without gradient sync take no step. A call inside a step and
// ranks that disagree are refused on every rank.
BOOST_AUTO_TEST_CASE(the_optimizer_in_backward_steps_each_unit_bit_for_bit_as_after_the_step) {
  OptimizerSettings settings;
  settings.lr = 0.05;
  settings.momentum = 0.8;
  settings.weight_decay = 0.01;
  const int steps = 3;
  const int units = static_cast<int>(kOrder.size());
  for (const std::string& name : optimizer_names()) {
    for (const ShardingMode mode : {ShardingMode::full_shard, ShardingMode::shard_grad_op,
                                    ShardingMode::shard_optimizer, ShardingMode::no_shard}) {
      for (const int limit : {0, 1, 2, 3}) {
        ShardedModel<double> after =
            make_model(strategies().front(), ProcessGroup(MPI_COMM_WORLD), mode);
        ShardedModel<double> in_backward =
            make_model(strategies().front(), ProcessGroup(MPI_COMM_WORLD), mode);
        RuntimeOptions options;
        options.max_reductions_in_flight = limit;
        Runtime<double> runtime_after(after, kOrder, options);
        Runtime<double> runtime(in_backward, kOrder, options);
        Optimizer<double> optimizer_after(name, settings);
        Optimizer<double> optimizer(name, settings);
        runtime.set_optimizer_in_backward(&optimizer);
        BOOST_TEST(runtime.optimizer_in_backward());
        for (int step = 0; step < steps; ++step) {
          scoped_step(runtime_after, after);
          optimizer_after.step(after);
          after.zero_grad();
          scoped_step(runtime, in_backward);
          in_backward.zero_grad();
        }
        BOOST_TEST_CONTEXT(name << " " << name_of(mode) << " limit " << limit) {
          BOOST_TEST((pieces_of(in_backward) == pieces_of(after)));
          BOOST_TEST(optimizer.step_count() == steps);
          BOOST_TEST(runtime.stats().updated_in_backward ==
                     steps * (limit == 0 ? units : std::max(0, units - limit)));
        }
      }
    }
  }
  // No step without gradients reduced: an evaluation step, then a step without gradient sync.
  ShardedModel<double> model = make_model(strategies().front());
  Runtime<double> runtime(model, kOrder);
  Optimizer<double> optimizer("adam", settings);
  runtime.set_optimizer_in_backward(&optimizer);
  const auto before = pieces_of(model);
  for (const std::string& unit : kOrder) {
    runtime.begin_forward(unit);
    runtime.end_forward(unit);
  }
  runtime.finish_step();
  runtime.set_requires_gradient_sync(false);
  scoped_step(runtime, model);
  BOOST_TEST(optimizer.step_count() == 0);
  BOOST_TEST((pieces_of(model) == before));
  runtime.set_requires_gradient_sync(true);
  scoped_step(runtime, model);
  BOOST_TEST(optimizer.step_count() == 1);
  BOOST_TEST(!(pieces_of(model) == before));
  model.zero_grad();
  runtime.begin_forward("l0");
  BOOST_CHECK_EXCEPTION(runtime.set_optimizer_in_backward(nullptr), Error,
                        error_of(ErrorKind::order, "the forward scope of 'l0' is open"));
  runtime.end_forward("l0");
  for (const std::string unit : {"l1", "l2"}) {
    runtime.begin_forward(unit);
    runtime.end_forward(unit);
  }
  runtime.finish_step();
  if (model.group().size() > 1) {
    BOOST_CHECK_EXCEPTION(
        runtime.set_optimizer_in_backward(model.group().rank() == 1 ? nullptr : &optimizer), Error,
        error_of(ErrorKind::mismatch, "optimizer_in_backward"));
  }
  BOOST_TEST(runtime.optimizer_in_backward());
  runtime.set_optimizer_in_backward(nullptr);
  BOOST_TEST(!runtime.optimizer_in_backward());
}

BOOST_AUTO_TEST_CASE(misuse_is_a_clear_error) {
  ShardedModel<double> model = make_model(strategies()[0]);
  BOOST_CHECK_EXCEPTION(Runtime<double>(model, {"l0", "l1", "l9"}), Error,
                        error_of(ErrorKind::unknown_name, "names unit 'l9', which the model"));
  BOOST_CHECK_EXCEPTION(Runtime<double>(model, {"l0", "l1", "l1"}), Error,
                        message_has("'l1' appears twice"));
  BOOST_CHECK_EXCEPTION(Runtime<double>(model, {"l0", "l2"}), Error,
                        message_has("leaves out unit(s) l1"));

  Runtime<double> runtime(model, kOrder);
  BOOST_CHECK_EXCEPTION(runtime.begin_forward("l1"), Error,
                        message_has("opened out of order: expected 'l0'"));
  runtime.begin_forward("l0");
  BOOST_CHECK_EXCEPTION(runtime.begin_forward("l1"), Error,
                        error_of(ErrorKind::order, "while the forward scope of 'l0' is open"));
  BOOST_CHECK_EXCEPTION(runtime.finish_step(), Error, message_has("scope of 'l0' still open"));
  runtime.end_forward("l0");
  BOOST_CHECK_EXCEPTION(runtime.begin_backward("l0"), Error,
                        message_has("after 1 of 3 forward scopes"));
  BOOST_CHECK_EXCEPTION(runtime.finish_step(), Error, message_has("after 1 of 3 forward"));
  runtime.begin_forward("l1");
  runtime.end_forward("l1");
  runtime.begin_forward("l2");
  runtime.end_forward("l2");
  BOOST_CHECK_EXCEPTION(runtime.begin_backward("l0"), Error,
                        message_has("expected 'l2'; backward runs the forward order"));
  runtime.begin_backward("l2");
  runtime.end_backward("l2");
  BOOST_CHECK_EXCEPTION(runtime.finish_step(), Error, message_has("after 1 of 3 backward"));

  // A scope left by an exception: the step is lost, and the next call says so.
  try {
    auto scope = runtime.backward("l1");
    throw std::runtime_error("user code failed");
  } catch (const std::runtime_error&) {
  }
  BOOST_CHECK_EXCEPTION(
      runtime.begin_backward("l0"), Error,
      error_of(ErrorKind::state, "backward scope of 'l1' was left by an exception"));
  BOOST_CHECK_EXCEPTION(runtime.finish_step(), Error,
                        error_of(ErrorKind::state, "cannot continue this step"));
  RuntimeOptions bad;
  bad.max_gathered_units = 0;
  BOOST_CHECK_EXCEPTION(Runtime<double>(model, kOrder, bad), Error,
                        message_has("max_gathered_units must be >= 1"));
}
