// The unit's state machine, its misuse errors, and its memory accounting.
#include <boost/test/unit_test.hpp>
#include <numeric>

#include "device_access.hpp"
#include "device_kind_backend.hpp"
#include "error_message.hpp"
#include "fsdp/optim/adam.hpp"
#include "fsdp/optim/sgd.hpp"
#include "fsdp/shard/sharding_strategy.hpp"
#include "fsdp/unit/sharded_model.hpp"
#include "tiny_mlp.hpp"

using namespace fsdp;
using namespace fsdp::test;

namespace {

ShardedModel<double> make_model(const char* strategy = "full") {
  ProcessGroup group(MPI_COMM_WORLD);
  return ShardedModel<double>(
      group, make_strategy(strategy)->make_plan(tiny_mlp_parameters<double>(), group.size()));
}

}  // namespace

BOOST_AUTO_TEST_CASE(gather_and_release_free_the_full_parameters) {
  ShardedModel<double> model = make_model();
  ShardedUnit<double>& unit = model.unit("l0");
  BOOST_TEST((unit.state() == UnitState::sharded));
  const std::int64_t held = model.memory().total_current;

  unit.gather();
  BOOST_TEST((unit.state() == UnitState::gathered));
  BOOST_TEST(unit.parameter("l0.w").full().size() == 35u);
  // The full parameters, plus the padding of those gathered in place (< N elements each).
  const std::int64_t gathered = model.memory().current_of(MemoryCategory::gathered_parameters);
  BOOST_TEST(gathered >= unit.full_bytes());
  BOOST_TEST(gathered <= unit.full_bytes() + 2 * model.group().size() * 8);

  unit.release();
  BOOST_TEST((unit.state() == UnitState::sharded));
  BOOST_TEST(model.memory().current_of(MemoryCategory::gathered_parameters) == 0);
  // Released buffers wait in the pool for the next gather, within its capacity.
  const std::int64_t idle = model.memory().current_of(MemoryCategory::pool_idle);
  BOOST_TEST(idle == model.pool().idle_bytes());
  BOOST_TEST(idle <= model.pool().capacity_bytes());
  BOOST_TEST(model.memory().total_current == held + idle);
  const std::int64_t peak = model.memory().total_peak;
  unit.gather();  // served from the pool: no new memory
  unit.release();
  BOOST_TEST(model.memory().total_peak == peak);
  model.pool().set_capacity(0);
  BOOST_TEST(model.memory().total_current == held);
  BOOST_TEST(model.memory().current_of(MemoryCategory::gathered_parameters) == 0);
  BOOST_TEST(unit.gather_count() == 2);
  BOOST_TEST(unit.release_count() == 2);
  unit.release();  // releasing a sharded unit changes nothing
  BOOST_TEST(unit.release_count() == 2);
}

BOOST_AUTO_TEST_CASE(async_gather_completes_through_test) {
  ShardedModel<double> model = make_model("layerwise");
  for (std::size_t u = 0; u < model.unit_count(); ++u) {
    model.unit(u).gather_async();
  }
  for (std::size_t u = 0; u < model.unit_count(); ++u) {
    while (!model.unit(u).test_gather()) {
    }
    BOOST_TEST((model.unit(u).state() == UnitState::gathered));
    model.unit(u).release();
  }
}

BOOST_AUTO_TEST_CASE(parameter_memory_is_one_nth_plus_padding) {
  ShardedModel<double> model = make_model();
  ProcessGroup& group = model.group();
  std::int64_t sharded_bytes = 0;
  std::int64_t replicated_bytes = 0;
  for (const ParameterInfo& p : model.plan().parameters()) {
    (p.always_gather ? replicated_bytes : sharded_bytes) += p.bytes();
  }
  std::int64_t mine = model.memory().current_of(MemoryCategory::parameter_shards);
  std::int64_t all = mine;
  group.all_reduce(Kokkos::DefaultHostExecutionSpace(), host_view(&all, 1));
  const std::int64_t padding_bound = 7 * (group.size() - 1) * 8;  // < N per sharded parameter
  BOOST_TEST(all >= sharded_bytes + group.size() * replicated_bytes);
  BOOST_TEST(all <= sharded_bytes + group.size() * replicated_bytes + padding_bound);
  BOOST_TEST(model.memory().current_of(MemoryCategory::gradient_shards) == mine);
  BOOST_TEST(model.memory().current_of(MemoryCategory::optimizer_state) == 0);
}

BOOST_AUTO_TEST_CASE(misuse_is_a_clear_error) {
  ShardedModel<double> model = make_model();
  ShardedUnit<double>& unit = model.unit("l1");
  ShardedParameter<double>& w = unit.parameter("l1.w");

  BOOST_CHECK_EXCEPTION(w.full(), Error, message_has("while unit 'l1' is sharded"));
  BOOST_CHECK_EXCEPTION(w.grad(), Error, message_has("gradients are written while the unit"));
  BOOST_CHECK_EXCEPTION(unit.wait_gather(), Error, message_has("it must be gathering"));

  unit.gather_async();
  BOOST_CHECK_EXCEPTION(unit.release(), Error,
                        message_has("release of unit 'l1' while it is "
                                    "gathering"));
  BOOST_CHECK_EXCEPTION(unit.gather(), Error, message_has("gather of unit 'l1' while it is"));
  unit.wait_gather();
  BOOST_CHECK_EXCEPTION(unit.gather(), Error,
                        message_has("while it is gathered; it must be sharded (release it"));

  Kokkos::View<double**, Kokkos::LayoutRight, MemorySpace> wrong("wrong", 7, 3);
  BOOST_CHECK_EXCEPTION(w.accumulate_grad(wrong), Error,
                        message_has("has shape [7, 3]; it must have the parameter's shape"));
  Kokkos::View<double**, Kokkos::LayoutRight, MemorySpace> right("right", 3, 7);
  Kokkos::deep_copy(right, 1.0);
  w.accumulate_grad(right);
  w.accumulate_grad(right);
  BOOST_TEST(on_host(w.grad())(20) == 2.0);
  BOOST_CHECK_EXCEPTION(unit.parameter("l9.w"), Error, message_has("it has l1.w, l1.b"));
  unit.release();

  Adam<double> adam(AdamOptions{});
  BOOST_CHECK_EXCEPTION(adam.step(model), Error,
                        message_has("Adam step with no gradient for unit 'l0'"));
  BOOST_CHECK_EXCEPTION(model.unit("l7"), Error, message_has("its units are l0, l1, l2"));
}

BOOST_AUTO_TEST_CASE(plans_that_do_not_fit_are_rejected) {
  ProcessGroup group(MPI_COMM_WORLD);
  auto wrong_size =
      make_strategy("full")->make_plan(tiny_mlp_parameters<double>(), group.size() + 1);
  BOOST_CHECK_EXCEPTION(ShardedModel<double>(group, wrong_size), Error,
                        message_has("was made for " + std::to_string(group.size() + 1) + " ranks"));
  auto fp32 = make_strategy("full")->make_plan(tiny_mlp_parameters<float>(), group.size());
  BOOST_CHECK_EXCEPTION(ShardedModel<double>(group, fp32), Error,
                        message_has("cannot train in a model of fp64"));
  BOOST_CHECK_EXCEPTION(Sgd<double>(SgdOptions{0.1, 0.0, 0.0, true, 0.0}), Error,
                        message_has("nesterov needs momentum > 0"));
  AdamOptions bad;
  bad.beta2 = 1.0;
  BOOST_CHECK_EXCEPTION(Adam<double>{bad}, Error, message_has("betas must lie in [0, 1)"));
}

BOOST_AUTO_TEST_CASE(a_model_refuses_a_group_that_cannot_move_its_buffers) {
  // A group whose backend moves device memory only (NCCL), under a model whose buffers are in
  // host memory (this build's Kokkos): refused when the model is made, saying what to do.
  ProcessGroup device_group(
      std::make_shared<DeviceKindBackend>(ProcessGroup(MPI_COMM_WORLD).backend()));
  const auto plan =
      make_strategy("full")->make_plan(tiny_mlp_parameters<double>(), device_group.size());
  if (!kHostAccessible) {
    BOOST_TEST(ShardedModel<double>(device_group, plan).unit_count() > 0);
    return;
  }
  BOOST_CHECK_EXCEPTION(ShardedModel<double>(device_group, plan), Error,
                        message_has("moves device memory only; make the group with "
                                    "ProcessGroup(comm) (MPI)"));
}

BOOST_AUTO_TEST_CASE(optimizer_state_counts_and_empty_pieces_are_skipped) {
  ShardedModel<double> model = make_model();
  for (std::size_t u = 0; u < model.unit_count(); ++u) {
    model.unit(u).reduce_scatter_grads();  // zeros: every rank may call it without writing
  }
  Adam<double> adam(AdamOptions{});
  adam.step(model);
  // Two moments per element of every real piece; padding has no optimizer state.
  std::int64_t padding = 0;
  for (std::size_t u = 0; u < model.unit_count(); ++u) {
    for (auto& p : model.unit(u).parameters()) {
      if (p.placement() == Placement::sharded) {
        padding += model.plan().padded_shard_numel(p.name()) - p.shard_size();
      }
    }
  }
  const std::int64_t grad_bytes = model.memory().current_of(MemoryCategory::gradient_shards);
  BOOST_TEST(model.memory().current_of(MemoryCategory::optimizer_state) ==
             2 * (grad_bytes - padding * 8));
  BOOST_TEST(adam.step_count() == 1);
}
