// Ranks that were given different settings fail together, on every rank, with a message naming
// the first setting that differs: the model, a unit, the runtime, the optimizers, the sampler and
// the collectives themselves (their signature check is on by default in every build), and a
// process group whose ranks disagree on checking collectives. Every failure leaves the ranks in
// step: the same group works afterwards, and the test exits alike on every rank.
#include <boost/test/unit_test.hpp>
#include <cstdlib>
#include <string>
#include <vector>

#include "error_message.hpp"
#include "fsdp/comm/broadcast_string.hpp"
#include "fsdp/comm/configuration_agreement.hpp"
#include "fsdp/comm/hybrid_groups.hpp"
#include "fsdp/data/distributed_sampler.hpp"
#include "fsdp/optim/optimizer.hpp"
#include "fsdp/runtime/runtime.hpp"
#include "fsdp/shard/sharding_strategy.hpp"
#include "pointer_collectives.hpp"

using namespace fsdp;
using fsdp::test::error_of;

namespace {

ProcessGroup world() {
  return ProcessGroup(MPI_COMM_WORLD);
}

// The message every rank got is rank 0's, to the letter.
bool same_on_every_rank(ProcessGroup& group, const std::string& text) {
  std::string first = text;
  broadcast_string(group, first, 0);
  int same = first == text ? 1 : 0;
  detail::PointerCollectives(group).all_reduce(&same, 1, ReduceOp::min);
  return same == 1;
}

// Runs call on every rank and checks that every rank throws a mismatch whose message contains
// expected (the same message on every rank), and that the group is still in step afterwards.
template <class Call>
void fails_on_every_rank(ProcessGroup& group, Call&& call, const std::string& expected) {
  std::string message;
  try {
    call();
    BOOST_ERROR("rank " << group.rank() << " was not told that the ranks disagree");
  } catch (const Error& error) {
    BOOST_CHECK(error_of(ErrorKind::mismatch, expected)(error));
    message = error.what();
  }
  BOOST_TEST(same_on_every_rank(group, message), "rank " << group.rank() << ": " << message);
  int in_step = 1;
  detail::PointerCollectives(group).all_reduce(&in_step, 1, ReduceOp::sum);
  BOOST_TEST(in_step == group.size());
}

std::vector<ParameterInfo> parameters() {
  return {{"a.w", {8, 4}, DType::f64, "a"},
          {"a.b", {8}, DType::f64, "a"},
          {"b.w", {4, 4}, DType::f64, "b"}};
}

int last_rank(const ProcessGroup& group) {
  return group.size() - 1;
}

std::string last_text(const ProcessGroup& group) {
  return std::to_string(last_rank(group));
}

}  // namespace

BOOST_AUTO_TEST_CASE(a_configuration_names_the_first_setting_that_differs) {
  ProcessGroup group = world();
  const bool last = group.rank() == last_rank(group);
  Configuration same("test settings");
  same.number("lr", 0.001).integer("steps", 7).flag("on", true).text("name", "x");
  BOOST_CHECK_NO_THROW(require_same_configuration(same, group));
  if (group.size() < 2) {
    return;
  }
  Configuration lr("optimizer settings");
  lr.text("optimizer", "adam").number("lr", last ? 0.01 : 0.001).number("eps", 1e-8);
  fails_on_every_rank(
      group, [&] { require_same_configuration(lr, group); },
      "ranks disagree on the optimizer settings: lr is 0.001 on rank 0 but 0.01 on rank " +
          last_text(group) + "; every rank must pass the same optimizer settings");
  // Numbers are compared exactly: 0.1 and the next double differ, and both are shown in full.
  Configuration close("settings");
  close.number("lr", last ? 0.1 + 1.4e-17 : 0.1);
  fails_on_every_rank(
      group, [&] { require_same_configuration(close, group); },
      "lr is 0.1 on rank 0 but 0.10000000000000002 on rank " + last_text(group));
  // A setting only some ranks have; the lowest setting index wins over the lowest rank.
  Configuration longer("settings");
  longer.integer("a", group.rank() == 1 ? 2 : 1);
  if (last) {
    longer.integer("b", 1);
  }
  fails_on_every_rank(
      group, [&] { require_same_configuration(longer, group); },
      "a is 1 on rank 0 but 2 on rank 1");
  Configuration missing("settings");
  missing.integer("a", 1);
  if (!last) {
    missing.integer("b", 1);
  }
  fails_on_every_rank(
      group, [&] { require_same_configuration(missing, group); },
      "rank 0 has b = 1, which rank " + last_text(group) + " does not have");
  // A long value is quoted only in part.
  Configuration long_value("settings");
  long_value.text("order", std::string(500, last ? 'y' : 'x'));
  fails_on_every_rank(
      group, [&] { require_same_configuration(long_value, group); }, "... (500 bytes)");
}

BOOST_AUTO_TEST_CASE(collective_signatures_are_checked_by_default) {
  // The test environment leaves FSDP_CHECK_COLLECTIVES unset, as a user's Release job does.
  BOOST_REQUIRE(std::getenv("FSDP_CHECK_COLLECTIVES") == nullptr);
  BOOST_TEST(CollectiveOptions::from_environment().check_arguments);
  ProcessGroup group = world();
  if (group.size() < 2) {
    return;
  }
  // Different counts (a different --batch-size on one rank): MPI_ERR_TRUNCATE or worse without
  // the check; with it, every rank is told before any byte moves.
  const std::size_t count = group.rank() == last_rank(group) ? 6 : 4;
  std::vector<float> send(count, 1.0f), recv(count * static_cast<std::size_t>(group.size()));
  fails_on_every_rank(
      group, [&] { detail::PointerCollectives(group).all_gather(send.data(), recv.data(), count); },
      "rank " + last_text(group) + " called all_gather(count=6, dtype=fp32)");
  // A collective that only some ranks start (prefetch on one rank, not on the other) meets
  // another one on the rest: the same.
  std::vector<double> data(8, 1.0);
  fails_on_every_rank(
      group,
      [&] {
        if (group.rank() == last_rank(group)) {
          detail::PointerCollectives(group).broadcast(data.data(), data.size(), 0);
        } else {
          detail::PointerCollectives(group).all_reduce(data.data(), data.size(), ReduceOp::sum);
        }
      },
      "called broadcast(count=8, dtype=fp64, root=0)");
}

BOOST_AUTO_TEST_CASE(collective_checks_can_be_turned_off_but_not_on_some_ranks_only) {
  setenv("FSDP_CHECK_COLLECTIVES", "0", 1);
  BOOST_TEST(!CollectiveOptions::from_environment().check_arguments);
  unsetenv("FSDP_CHECK_COLLECTIVES");
  ProcessGroup group = world();
  if (group.size() < 2) {
    return;
  }
  // The last rank would skip the signature exchange that the others wait in: the group says so
  // when it is made.
  CollectiveOptions options;
  options.check_arguments = group.rank() != last_rank(group);
  fails_on_every_rank(
      group, [&] { ProcessGroup mixed(MPI_COMM_WORLD, options); },
      "ranks disagree on checking collectives: rank 0 checks every collective's signature but "
      "rank " +
          last_text(group) + " does not");
}

BOOST_AUTO_TEST_CASE(a_model_of_another_layout_fails_on_every_rank) {
  ProcessGroup group = world();
  if (group.size() < 2) {
    return;
  }
  const bool last = group.rank() == last_rank(group);
  // Plans made on each rank with another strategy: the same parameters, placed differently.
  const ShardingPlan full = FullSharding().make_plan(parameters(), group.size());
  const ShardingPlan layer_wise = LayerWiseSharding().make_plan(parameters(), group.size());
  fails_on_every_rank(
      group, [&] { ShardedModel<double> model(group, last ? layer_wise : full); },
      "ranks disagree on the model: strategy is full on rank 0 but layerwise on rank " +
          last_text(group));
  // A parameter of another shape.
  std::vector<ParameterInfo> other = parameters();
  if (last) {
    other[1].shape = {9};
  }
  const ShardingPlan wider = FullSharding().make_plan(other, group.size());
  fails_on_every_rank(
      group, [&] { ShardedModel<double> model(group, wider); },
      "parameter #1 is 'a.b' [8] fp64 layer 'a', sharded on rank 0 but 'a.b' [9] fp64 layer 'a', "
      "sharded on rank " +
          last_text(group));
  // Another mode.
  ShardedModelOptions options;
  options.unit.mode = last ? ShardingMode::shard_grad_op : ShardingMode::full_shard;
  fails_on_every_rank(
      group, [&] { ShardedModel<double> model(group, full, options); },
      "mode is full_shard on rank 0 but shard_grad_op on rank " + last_text(group));
  // The pool's capacity is each rank's own: no disagreement.
  ShardedModelOptions pool;
  pool.pool_capacity_bytes = last ? 0 : -1;
  BOOST_CHECK_NO_THROW(ShardedModel<double>(group, full, pool));
}

BOOST_AUTO_TEST_CASE(a_unit_of_another_name_fails_on_every_rank) {
  ProcessGroup group = world();
  if (group.size() < 2) {
    return;
  }
  const ShardingPlan plan = FullSharding().make_plan(parameters(), group.size());
  auto tracker = std::make_shared<MemoryTracker>();
  auto pool = std::make_shared<BufferPool<double>>(tracker, 0);
  const std::string name = group.rank() == last_rank(group) ? "b" : "a";
  fails_on_every_rank(
      group,
      [&] {
        ShardedUnit<double> unit(name, group, plan, {0, 1}, tracker, pool);
      },
      "ranks disagree on the unit: name is a on rank 0 but b on rank " + last_text(group));
}

BOOST_AUTO_TEST_CASE(a_runtime_with_other_options_fails_on_every_rank) {
  ProcessGroup group = world();
  if (group.size() < 2) {
    return;
  }
  const bool last = group.rank() == last_rank(group);
  ShardedModel<double> model(group, FullSharding().make_plan(parameters(), group.size()));
  // --no-prefetch on one rank: its gathers would meet the others' prefetched ones in MPI.
  RuntimeOptions options;
  options.prefetch = !last;
  fails_on_every_rank(
      group,
      [&] {
        Runtime<double> runtime(model, {"a", "b"}, options);
      },
      "ranks disagree on the runtime options: prefetch is true on rank 0 but false on rank " +
          last_text(group));
  const std::vector<std::string> order =
      last ? std::vector<std::string>{"b", "a"} : std::vector<std::string>{"a", "b"};
  fails_on_every_rank(
      group, [&] { Runtime<double> runtime(model, order); },
      "execution order[0] is a on rank 0 but b on rank " + last_text(group));
  BOOST_CHECK_NO_THROW(Runtime<double>(model, {"a", "b"}));
}

BOOST_AUTO_TEST_CASE(optimizers_with_other_settings_fail_on_every_rank) {
  ProcessGroup group = world();
  if (group.size() < 2) {
    return;
  }
  const bool last = group.rank() == last_rank(group);
  ShardedModel<double> model(group, FullSharding().make_plan(parameters(), group.size()));
  // A different learning rate on one rank: before the first step changes anything.
  OptimizerSettings settings;
  settings.lr = last ? 0.01 : 0.001;
  Optimizer<double> adam("adam", settings);
  fails_on_every_rank(
      group, [&] { adam.step(model); },
      "ranks disagree on the optimizer settings: lr is 0.001 on rank 0 but 0.01 on rank " +
          last_text(group));
  Optimizer<double> mixed(last ? "sgd" : "adamw", OptimizerSettings{});
  fails_on_every_rank(
      group, [&] { mixed.agree_with_ranks(model); },
      "optimizer is adamw on rank 0 but sgd on rank " + last_text(group));
  SgdOptions sgd;
  sgd.momentum = last ? 0.9 : 0.0;
  Sgd<double> momentum(sgd);
  fails_on_every_rank(
      group, [&] { momentum.step(model); },
      "momentum is 0 on rank 0 but 0.9 on rank " + last_text(group));
  // The same settings agree, once: the step then refuses to run without gradients, on every
  // rank alike.
  Optimizer<double> agreed("adam", OptimizerSettings{});
  BOOST_CHECK_EXCEPTION(agreed.step(model), Error, error_of(ErrorKind::usage, "no gradient"));
}

BOOST_AUTO_TEST_CASE(a_sampler_with_another_seed_fails_on_every_rank) {
  ProcessGroup group = world();
  if (group.size() < 2) {
    return;
  }
  SamplerOptions options;
  options.seed = group.rank() == last_rank(group) ? 43 : 42;
  fails_on_every_rank(
      group, [&] { DistributedSampler sampler(group, 1000, options); },
      "ranks disagree on the sampler options: seed is 42 on rank 0 but 43 on rank " +
          last_text(group));
}

// Hybrid sharding at 4 ranks (2 replicas x 2 shards): shard groups that agree inside but not with
// each other are caught too, on every rank of the model.
BOOST_AUTO_TEST_CASE(hybrid_shard_groups_that_disagree_fail_on_every_rank) {
  ProcessGroup group = world();
  if (group.size() != 4) {
    return;
  }
  HybridGroups groups = make_hybrid_groups(group, 2);
  const ShardingPlan plan = FullSharding().make_plan(parameters(), 2);
  ShardedModelOptions options;
  options.unit.replicas = groups.replicate;
  options.unit.mode = group.rank() >= 2 ? ShardingMode::shard_grad_op : ShardingMode::full_shard;
  fails_on_every_rank(
      group, [&] { ShardedModel<double> model(groups.shard, plan, options); },
      "ranks disagree on the model: mode is full_shard on replica 0 but shard_grad_op on "
      "replica 1");
  // Inside one shard group (world rank 3 alone): found there, and told to every rank.
  options.unit.mode = ShardingMode::full_shard;
  options.unit.direct_gather_bytes = group.rank() == 3 ? 1024 : 262144;
  fails_on_every_rank(
      group, [&] { ShardedModel<double> model(groups.shard, plan, options); },
      "direct_gather_bytes is 262144 on rank 0 but 1024 on rank 1");
  options.unit.direct_gather_bytes = 262144;
  ShardedModel<double> model(groups.shard, plan, options);
  RuntimeOptions runtime;
  runtime.max_gathered_units = group.rank() == 0 ? 1 : 2;
  fails_on_every_rank(
      group,
      [&] {
        Runtime<double> scopes(model, {"a", "b"}, runtime);
      },
      "max_gathered_units is 1 on rank 0 but 2 on rank 1");
}
