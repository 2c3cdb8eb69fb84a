// Forward and backward scopes with prefetch: training through them matches unsharded training for
// several prefetch limits, never holds more units than the limit, prefetches when allowed, and
// turns misuse into clear errors.
#include <boost/test/unit_test.hpp>

#include "../unit/reference_training.hpp"
#include "error_message.hpp"
#include "fsdp/optim/adam.hpp"
#include "fsdp/runtime/runtime.hpp"
#include "fsdp/shard/plan_agreement.hpp"

using namespace fsdp;
using namespace fsdp::test;

namespace {

const std::vector<std::string> kOrder = {"l0", "l1", "l2"};

template <class T>
void init_from_reference(ShardedModel<T>& model) {
  for (const ParameterInfo& p : model.plan().parameters()) {
    model.init_from_full(p.name, initial_values<T>(p).data());
  }
}

int units_not_sharded(ShardedModel<double>& model) {
  int count = 0;
  for (std::size_t u = 0; u < model.unit_count(); ++u) {
    count += model.unit(u).state() != UnitState::sharded ? 1 : 0;
  }
  return count;
}

// One training step through the scopes, layer by layer; returns the most units that were
// gathered or gathering at once.
int scoped_step(Runtime<double>& runtime, ShardedModel<double>& model) {
  const int n = model.group().size();
  const int local = kBatch / n;
  LayeredMlp<double> mlp(model.group().rank() * local, local, local);
  int most = 0;
  for (std::size_t k = 0; k < kOrder.size(); ++k) {
    auto scope = runtime.forward(kOrder[k]);
    most = std::max(most, units_not_sharded(model));
    const std::string l = kOrder[k];
    mlp.forward(static_cast<int>(k), scope.full(l + ".w").data(), scope.full(l + ".b").data(),
                k == 2 ? scope.full("l2.gain").data() : nullptr);
    runtime.progress();
  }
  for (std::size_t k = kOrder.size(); k-- > 0;) {
    auto scope = runtime.backward(kOrder[k]);
    most = std::max(most, units_not_sharded(model));
    const std::string l = kOrder[k];
    const bool last = k == 2;
    mlp.backward(static_cast<int>(k), scope.full(l + ".w").data(),
                 last ? scope.full("l2.gain").data() : nullptr, scope.grad(l + ".w").data(),
                 scope.grad(l + ".b").data(), last ? scope.grad("l2.gain").data() : nullptr);
  }
  runtime.finish_step();
  return most;
}

ShardedModel<double> make_model(const Strategy& strategy) {
  ProcessGroup group(MPI_COMM_WORLD);
  auto maker = make_strategy(strategy.name, strategy.options);
  ShardedModel<double> model(group, agree_on_plan(*maker, tiny_mlp_parameters<double>(), group));
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
  runtime.gather_multiple_async({"l0", "l1"});
  runtime.progress();
  for (const char* unit : {"l0", "l1"}) {
    if (model.unit(unit).state() == UnitState::gathering) {
      model.unit(unit).wait_gather();
    }
  }
  runtime.release_multiple({"l0", "l1"});
  BOOST_TEST(units_not_sharded(model) == 0);
}

BOOST_AUTO_TEST_CASE(misuse_is_a_clear_error) {
  ShardedModel<double> model = make_model(strategies()[0]);
  BOOST_CHECK_EXCEPTION(Runtime<double>(model, {"l0", "l1", "l9"}), Error,
                        message_has("no unit 'l9'"));
  BOOST_CHECK_EXCEPTION(Runtime<double>(model, {"l0", "l1", "l1"}), Error,
                        message_has("'l1' appears twice"));
  BOOST_CHECK_EXCEPTION(Runtime<double>(model, {"l0", "l2"}), Error,
                        message_has("leaves out unit(s) l1"));

  Runtime<double> runtime(model, kOrder);
  BOOST_CHECK_EXCEPTION(runtime.begin_forward("l1"), Error,
                        message_has("opened out of order: expected 'l0'"));
  runtime.begin_forward("l0");
  BOOST_CHECK_EXCEPTION(runtime.begin_forward("l1"), Error,
                        message_has("while the scope of 'l0' is still open"));
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
  BOOST_CHECK_EXCEPTION(runtime.begin_backward("l0"), Error,
                        message_has("backward scope of 'l1' was left by an exception"));
  RuntimeOptions bad;
  bad.max_gathered_units = 0;
  BOOST_CHECK_EXCEPTION(Runtime<double>(model, kOrder, bad), Error,
                        message_has("max_gathered_units must be >= 1"));
}
