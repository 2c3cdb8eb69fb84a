// Dynamic loss scaling: unscaling divides exactly, an overflow on one rank makes every rank skip
// the step and back off, the scale grows after exactly growth_interval clean steps, and a
// training loop with a forced overflow skips exactly that step.
#include <boost/test/unit_test.hpp>
#include <limits>

#include "device_access.hpp"
#include "fsdp/optim/loss_scaler.hpp"
#include "fsdp/optim/optimizer.hpp"
#include "fsdp/shard/sharding_strategy.hpp"

using namespace fsdp;
using namespace fsdp::test;

namespace {

// grad_dtype bf16 keeps the gradient pieces in bfloat16, which the scaler unscales in place.
ShardedModel<float> make_model(ProcessGroup& group, DType grad_dtype = DType::f32) {
  std::vector<ParameterInfo> parameters = {{"w", {5, 3}, DType::f32, "l", false},
                                           {"b", {3}, DType::f32, "l", false}};
  ShardedModelOptions options;
  options.unit.grad_dtype = grad_dtype;
  return ShardedModel<float>(group, make_strategy("full")->make_plan(parameters, group.size()),
                             options);
}

// One backward: every rank adds value to every gradient element; rank `poisoned` (if >= 0) puts
// `poison` into element 0 of w. The reduced pieces hold value (the average), and the poison
// wherever element 0 of w lands.
void backward(ShardedModel<float>& model, float value, int poisoned = -1, float poison = 0) {
  ShardedUnit<float>& unit = model.unit(0);
  unit.gather();
  for (ShardedParameter<float>& p : unit.parameters()) {
    auto grad = on_host(p.grad());
    for (std::size_t i = 0; i < grad.size(); ++i) {
      grad(i) = value;
    }
    if (p.name() == "w" && model.group().rank() == poisoned) {
      grad(0) = poison;
    }
    to_view(p.grad(), grad);
  }
  unit.release();
  unit.reduce_scatter_grads();
}

}  // namespace

BOOST_AUTO_TEST_CASE(unscaling_divides_exactly_and_finds_nothing_in_finite_gradients) {
  ProcessGroup group(MPI_COMM_WORLD);
  for (const DType grad_dtype : {DType::f32, DType::bf16}) {
    ShardedModel<float> model = make_model(group, grad_dtype);
    LossScaler scaler;
    backward(model, static_cast<float>(scaler.scale() * 0.375));
    BOOST_TEST(!scaler.unscale_and_check(model));
    for (ShardedParameter<float>& p : model.unit(0).parameters()) {
      BOOST_TEST(p.grad_piece().in_bfloat16() == (grad_dtype == DType::bf16));
      for (float g : values_of(p.grad_piece())) {
        BOOST_TEST(g == 0.375f);  // a power-of-two scale divides exactly
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(an_overflow_on_one_rank_skips_the_step_on_every_rank) {
  ProcessGroup group(MPI_COMM_WORLD);
  const int last = group.size() - 1;
  for (const float poison :
       {std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
        std::numeric_limits<float>::quiet_NaN()})
    for (const DType grad_dtype : {DType::f32, DType::bf16}) {
      ShardedModel<float> model = make_model(group, grad_dtype);
      LossScaler scaler;
      backward(model, 1.0f, last, poison);
      const bool found = scaler.unscale_and_check(model);
      BOOST_TEST(found, "rank " << last << " put " << poison << " into a gradient");
      scaler.update(found);
      BOOST_TEST(scaler.scale() == 32768.0);
      BOOST_TEST(scaler.state().skipped_steps == 1);
    }
}

BOOST_AUTO_TEST_CASE(the_scale_grows_after_exactly_growth_interval_clean_steps) {
  LossScalerOptions options;
  options.init_scale = 8;
  options.growth_interval = 3;
  LossScaler scaler(options);
  scaler.update(false);
  scaler.update(false);
  BOOST_TEST(scaler.scale() == 8.0);
  scaler.update(false);
  BOOST_TEST(scaler.scale() == 16.0);
  BOOST_TEST(scaler.state().clean_steps == 0);
  scaler.update(false);
  scaler.update(true);  // the clean run starts again
  BOOST_TEST(scaler.scale() == 8.0);
  scaler.update(false);
  scaler.update(false);
  BOOST_TEST(scaler.scale() == 8.0);
  scaler.update(false);
  BOOST_TEST(scaler.scale() == 16.0);
  BOOST_TEST((scaler.state() == LossScalerState{16.0, 0, 1}));

  options.dynamic = false;
  LossScaler fixed(options);
  fixed.update(true);
  fixed.update(false);
  fixed.update(false);
  fixed.update(false);
  BOOST_TEST(fixed.scale() == 8.0);
  BOOST_TEST(fixed.state().skipped_steps == 1);
}

BOOST_AUTO_TEST_CASE(a_training_loop_skips_exactly_the_step_that_overflowed) {
  ProcessGroup group(MPI_COMM_WORLD);
  ShardedModel<float> model = make_model(group);
  OptimizerSettings settings;
  settings.lr = 0.5;
  Optimizer<float> sgd("sgd", settings);
  LossScalerOptions options;
  options.init_scale = 1024;
  LossScaler scaler(options);
  const int overflowing = 2;
  const auto piece_of_w = [&] {
    const auto host = on_host(model.parameter("w").shard());
    return std::vector<float>(host.data(), host.data() + host.size());
  };
  for (int step = 0; step < 5; ++step) {
    const std::vector<float> before = piece_of_w();
    backward(model, static_cast<float>(scaler.scale() * 0.25),
             step == overflowing ? group.size() - 1 : -1, std::numeric_limits<float>::infinity());
    const bool found = scaler.unscale_and_check(model);
    BOOST_TEST(found == (step == overflowing), "step " << step);
    if (!found) {
      sgd.step(model);
    }
    scaler.update(found);
    model.zero_grad();
    const std::vector<float> after = piece_of_w();
    for (std::size_t i = 0; i < after.size(); ++i) {
      // SGD with lr 0.5 on a gradient of 0.25: every clean step moves each element by -0.125.
      BOOST_TEST(after[i] == before[i] - (found ? 0.0f : 0.125f), "step " << step);
    }
  }
  BOOST_TEST(sgd.step_count() == 4);
  BOOST_TEST(scaler.state().skipped_steps == 1);
  BOOST_TEST(scaler.scale() == 512.0);
}

BOOST_AUTO_TEST_CASE(bad_options_and_states_are_refused) {
  auto refused = [](LossScalerOptions options, const char* text) {
    BOOST_CHECK_EXCEPTION(LossScaler{options}, Error, [&](const Error& e) {
      return std::string(e.message()).find(text) != std::string::npos;
    });
  };
  LossScalerOptions o;
  o.init_scale = 0;
  refused(o, "init_scale must be a positive finite number, got 0");
  o = {};
  o.init_scale = std::numeric_limits<double>::infinity();
  refused(o, "init_scale must be a positive finite number");
  o = {};
  o.growth_factor = 1;
  refused(o, "growth_factor must be > 1");
  o = {};
  o.backoff_factor = 1;
  refused(o, "backoff_factor must be in (0, 1)");
  o = {};
  o.growth_interval = 0;
  refused(o, "growth_interval must be >= 1");
  LossScaler scaler;
  BOOST_CHECK_THROW(scaler.set_state(LossScalerState{-1.0, 0, 0}), Error);
  scaler.set_state(LossScalerState{4.0, 7, 2});
  BOOST_TEST(scaler.scale() == 4.0);
}

// As a checkpoint's object: its state comes back exactly (a scale of any bits), and a state that is
// not one (text, a missing or unknown field, a count that is not an integer, a scale <= 0) is
// refused by check_state_dict with a message naming it, leaving the scaler as it was.
BOOST_AUTO_TEST_CASE(its_state_goes_into_a_checkpoint_and_back_exactly) {
  LossScaler saved;
  saved.set_state(LossScalerState{65536.0 / 3.0, 1234, 5});
  LossScaler loaded;
  const std::string state = saved.state_dict();
  BOOST_CHECK_NO_THROW(loaded.check_state_dict(state));
  loaded.load_state_dict(state);
  BOOST_TEST((loaded.state() == saved.state()));
  const auto refused = [&](const std::string& text, const char* message) {
    BOOST_CHECK_EXCEPTION(loaded.check_state_dict(text), Error, [&](const Error& e) {
      return e.kind() == ErrorKind::mismatch &&
             std::string(e.message()).find(message) != std::string::npos;
    });
  };
  refused("{", "the loss scaler's state is not valid JSON");
  refused("[1, 2]", "must be a JSON object");
  refused(R"({"scale": 2.0, "clean_steps": 1})", "has no field \"skipped_steps\"");
  refused(R"({"scale": 2.0, "clean_steps": 1, "skipped_steps": 0, "growth": 2})",
          "unknown field \"growth\"");
  refused(R"({"scale": 2.0, "clean_steps": 1.5, "skipped_steps": 0})",
          "clean_steps must be an integer");
  refused(R"({"scale": "2", "clean_steps": 1, "skipped_steps": 0})", "scale must be a number");
  refused(R"({"scale": -2.0, "clean_steps": 1, "skipped_steps": 0})",
          "needs a positive finite scale");
  BOOST_TEST((loaded.state() == saved.state()));
}
