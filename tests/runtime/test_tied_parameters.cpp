// Tied parameters (RuntimeOptions::tied_parameters): a parameter used by a later unit besides its
// own is one parameter, gathered once per step, read by both scopes, and its gradient is the sum
// of both uses, reduced once, in every sharding mode and strategy, with and without prefetch.
#include <boost/test/unit_test.hpp>
#include <cmath>

#include "../device_access.hpp"
#include "error_message.hpp"
#include "fsdp/runtime/runtime.hpp"
#include "fsdp/shard/plan_agreement.hpp"
#include "fsdp/shard/sharding_strategy.hpp"

using namespace fsdp;
using namespace fsdp::test;

namespace {

// embed.w is used by unit "embed" and by unit "head", as a language model's token embedding and
// output head are.
const std::vector<std::string> kOrder = {"embed", "block", "head"};

std::vector<ParameterInfo> parameters() {
  return {{"embed.w", {7, 3}, DType::f64, "embed", false},
          {"embed.b", {3}, DType::f64, "embed", false},
          {"block.w", {5}, DType::f64, "block", false},
          {"head.w", {4}, DType::f64, "head", false}};
}

double initial(std::int64_t i) {
  return 0.5 + 0.25 * static_cast<double>(i);
}

ShardedModel<double> make_model(const std::string& strategy, ShardingMode mode) {
  ProcessGroup group(MPI_COMM_WORLD);
  auto maker = make_strategy(strategy, {});
  ShardedModelOptions options;
  options.unit.mode = mode;
  ShardedModel<double> model(group, agree_on_plan(*maker, parameters(), group), options);
  for (const ParameterInfo& p : model.plan().parameters()) {
    std::vector<double> values(static_cast<std::size_t>(p.numel()));
    for (std::size_t i = 0; i < values.size(); ++i) {
      values[i] = initial(static_cast<std::int64_t>(i));
    }
    model.init_from_full(p.name, to_device(values).data());
  }
  return model;
}

void add(const ShardedParameter<double>::View& grad, double value) {
  auto host = on_host(grad);
  for (std::size_t i = 0; i < host.extent(0); ++i) {
    host(i) += value;
  }
  to_view(grad, host);
}

bool holds_initial_values(const ShardedParameter<double>::View& full) {
  const auto host = on_host(full);
  for (std::size_t i = 0; i < host.extent(0); ++i) {
    if (host(i) != initial(static_cast<std::int64_t>(i))) {
      return false;
    }
  }
  return true;
}

}  // namespace

BOOST_AUTO_TEST_CASE(a_tied_parameter_is_gathered_once_and_reduced_once_with_both_uses) {
  const int rank = ProcessGroup(MPI_COMM_WORLD).rank();
  const int ranks = ProcessGroup(MPI_COMM_WORLD).size();
  for (const std::string strategy : {"full", "layerwise"}) {
    for (const ShardingMode mode : {ShardingMode::full_shard, ShardingMode::shard_grad_op,
                                    ShardingMode::shard_optimizer, ShardingMode::no_shard}) {
      for (const int limit : {1, 2, 3}) {
        ShardedModel<double> model = make_model(strategy, mode);
        RuntimeOptions options;
        options.max_gathered_units = limit;
        options.tied_parameters = {{"embed.w", {"head"}}};
        Runtime<double> runtime(model, kOrder, options);
        const std::string what = strategy + " " + name_of(mode) + " limit " + std::to_string(limit);
        const int steps = 2;
        for (int step = 0; step < steps; ++step) {
          {
            auto scope = runtime.forward("embed");
            BOOST_TEST(holds_initial_values(scope.full("embed.w")), what);
          }
          runtime.forward("block").close();
          {
            auto scope = runtime.forward("head");
            BOOST_TEST(holds_initial_values(scope.full("embed.w")), what);
          }
          {
            // Each use adds its own amount: the reduced gradient must hold their sum.
            auto scope = runtime.backward("head");
            BOOST_TEST(holds_initial_values(scope.full("embed.w")), what);
            add(scope.grad("embed.w"), 1.0 * (rank + 1));
            add(scope.grad("head.w"), 1.0);
          }
          {
            auto scope = runtime.backward("block");
            add(scope.grad("block.w"), 1.0);
          }
          {
            auto scope = runtime.backward("embed");
            add(scope.grad("embed.w"), 10.0 * (rank + 1));
            add(scope.grad("embed.b"), 1.0);
          }
          runtime.finish_step();
          // The mean over the ranks of 11 (rank + 1).
          const double expected = 11.0 * (ranks + 1) / 2.0;
          const auto piece = on_host(model.unit("embed").parameter("embed.w").grad_shard());
          for (std::size_t i = 0; i < piece.extent(0); ++i) {
            BOOST_TEST(std::abs(piece(i) - expected) <= 1e-12, what << ": " << piece(i));
          }
          model.zero_grad();
        }
        if (mode == ShardingMode::full_shard && ranks > 1) {
          BOOST_TEST(model.unit("embed").gather_count() == steps, what);  // once per step
        }
        for (std::size_t u = 0; u < model.unit_count(); ++u) {
          BOOST_TEST((model.unit(u).state() == UnitState::sharded), what);
        }
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(tied_parameters_are_checked_when_the_runtime_is_made) {
  ShardedModel<double> model = make_model("full", ShardingMode::full_shard);
  const auto refused = [&](std::map<std::string, std::set<std::string>> tied, ErrorKind kind,
                           const std::string& words) {
    RuntimeOptions options;
    options.tied_parameters = std::move(tied);
    BOOST_CHECK_EXCEPTION(Runtime<double>(model, kOrder, options), Error, [&](const Error& e) {
      BOOST_TEST_MESSAGE(e.what());
      return e.kind() == kind && std::string(e.what()).find(words) != std::string::npos;
    });
  };
  refused({{"head.w", {"embed"}}}, ErrorKind::usage, "runs before it");
  refused({{"embed.w", {"embed"}}}, ErrorKind::usage, "owns it");
  refused({{"nothing.w", {"head"}}}, ErrorKind::unknown_name, "'nothing.w'");
  refused({{"embed.w", {"nothing"}}}, ErrorKind::unknown_name, "'nothing'");
}

BOOST_AUTO_TEST_CASE(an_untied_use_of_another_units_parameter_is_refused) {
  ShardedModel<double> model = make_model("full", ShardingMode::full_shard);
  RuntimeOptions options;
  options.tied_parameters = {{"embed.w", {"head"}}};
  Runtime<double> runtime(model, kOrder, options);
  runtime.forward("embed").close();
  auto scope = runtime.forward("block");
  BOOST_CHECK_EXCEPTION(scope.full("embed.w"), Error, [](const Error& e) {
    return e.kind() == ErrorKind::state &&
           std::string(e.what()).find("RuntimeOptions::tied_parameters") != std::string::npos;
  });
}
