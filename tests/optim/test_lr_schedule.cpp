// Learning-rate schedules: each decay's closed form at the steps that define it, the checks on
// its options, and an optimizer that takes the scheduled rate at exactly the step it is meant
// for (SGD moves by lr * g, so the sum of the rates is exact); ranks that set different rates
// fail together at the next step.
#include <boost/test/unit_test.hpp>
#include <cmath>

#include "device_access.hpp"
#include "error_message.hpp"
#include "fsdp/optim/lr_schedule.hpp"
#include "fsdp/shard/sharding_strategy.hpp"

using namespace fsdp;
using namespace fsdp::test;

namespace {

LrScheduleOptions options_of(LrDecay decay, std::int64_t warmup, std::int64_t total = 0,
                             double min_lr = 0) {
  LrScheduleOptions options;
  options.decay = decay;
  options.warmup_steps = warmup;
  options.total_steps = total;
  options.min_lr = min_lr;
  return options;
}

ShardedModel<double> make_model(ProcessGroup& group) {
  std::vector<ParameterInfo> parameters = {{"w", {4, 3}, DType::f64, "l", false}};
  return ShardedModel<double>(group, make_strategy("full")->make_plan(parameters, group.size()));
}

// One backward whose reduced gradient is `value` in every element.
void backward(ShardedModel<double>& model, double value) {
  ShardedUnit<double>& unit = model.unit(0);
  unit.gather();
  for (ShardedParameter<double>& p : unit.parameters()) {
    auto grad = on_host(p.grad());
    for (std::size_t i = 0; i < grad.size(); ++i) {
      grad(i) = value;
    }
    to_view(p.grad(), grad);
  }
  unit.release();
  unit.reduce_scatter_grads();
}

std::vector<double> values_of(const DeviceView<double>& view) {
  const auto host = on_host(view);
  return std::vector<double>(host.data(), host.data() + host.size());
}

}  // namespace

BOOST_AUTO_TEST_CASE(warm_up_climbs_in_equal_parts_to_the_rate) {
  const LrSchedule schedule(0.4, options_of(LrDecay::constant, 4));
  BOOST_TEST(schedule.lr_at(0) == 0.1);
  BOOST_TEST(schedule.lr_at(1) == 0.2);
  BOOST_TEST(schedule.lr_at(3) == 0.4);
  BOOST_TEST(schedule.lr_at(4) == 0.4);
  BOOST_TEST(schedule.lr_at(1000000) == 0.4);
  BOOST_TEST(LrSchedule(0.4, options_of(LrDecay::constant, 0)).lr_at(0) == 0.4);
}

BOOST_AUTO_TEST_CASE(linear_and_cosine_decay_reach_the_floor_at_total_steps) {
  // Warm-up 2, decay over steps 2..12 (length 10) from 1 to 0.1.
  const LrSchedule linear(1.0, options_of(LrDecay::linear, 2, 12, 0.1));
  BOOST_TEST(linear.lr_at(1) == 1.0);
  BOOST_TEST(linear.lr_at(2) == 1.0);
  BOOST_TEST(linear.lr_at(7) == 0.1 + 0.9 * 0.5);
  BOOST_TEST(linear.lr_at(12) == 0.1);
  BOOST_TEST(linear.lr_at(50) == 0.1);

  const LrSchedule cosine(1.0, options_of(LrDecay::cosine, 2, 12, 0.1));
  BOOST_TEST(cosine.lr_at(2) == 1.0);
  BOOST_TEST(cosine.lr_at(7) == 0.1 + 0.9 * 0.5 * (1 + std::cos(M_PI * 0.5)));
  BOOST_TEST(std::abs(cosine.lr_at(7) - 0.55) < 1e-15);
  // PyTorch's CosineAnnealingLR in closed form: eta_min + (base - eta_min)(1 + cos(pi t/T)) / 2.
  for (int t = 0; t <= 10; ++t) {
    BOOST_TEST(cosine.lr_at(2 + t) == 0.1 + 0.9 * 0.5 * (1 + std::cos(M_PI * t / 10.0)));
  }
  BOOST_TEST(cosine.lr_at(12) == 0.1);
  BOOST_TEST(cosine.lr_at(13) == 0.1);
}

BOOST_AUTO_TEST_CASE(step_decay_multiplies_by_gamma_every_step_size_steps) {
  LrScheduleOptions options = options_of(LrDecay::step, 1);
  options.step_size = 3;
  options.gamma = 0.5;
  const LrSchedule schedule(0.8, options);
  BOOST_TEST(schedule.lr_at(0) == 0.8);  // the one warm-up step
  BOOST_TEST(schedule.lr_at(1) == 0.8);
  BOOST_TEST(schedule.lr_at(3) == 0.8);
  BOOST_TEST(schedule.lr_at(4) == 0.4);
  BOOST_TEST(schedule.lr_at(7) == 0.2);
  BOOST_TEST(schedule.describe() == "0.8 times 0.5 every 3 steps after 1 warm-up steps");
}

BOOST_AUTO_TEST_CASE(bad_options_are_refused_naming_what_would_be_right) {
  const auto refused = [](double lr, LrScheduleOptions options, const std::string& text) {
    BOOST_CHECK_EXCEPTION(LrSchedule(lr, options), Error, error_of(ErrorKind::usage, text));
  };
  refused(-1, options_of(LrDecay::constant, 0), "lr must be finite and >= 0, got -1");
  refused(NAN, options_of(LrDecay::constant, 0), "lr must be finite and >= 0, got nan");
  refused(1, options_of(LrDecay::constant, -2), "warmup_steps must be >= 0, got -2");
  refused(1, options_of(LrDecay::cosine, 10, 10),
          "cosine decay needs total_steps > warmup_steps (10), got 10");
  refused(1, options_of(LrDecay::linear, 0, 5, 2), "min_lr must lie in [0, lr] = [0, 1], got 2");
  LrScheduleOptions step = options_of(LrDecay::step, 0);
  step.step_size = 0;
  refused(1, step, "step decay needs step_size >= 1, got 0");
  step.step_size = 2;
  step.gamma = 0;
  refused(1, step, "step decay needs gamma > 0, got 0");
  BOOST_CHECK_EXCEPTION(LrSchedule(1, options_of(LrDecay::constant, 0)).lr_at(-1), Error,
                        error_of(ErrorKind::usage, "step must be >= 0, got -1"));
  BOOST_CHECK_EXCEPTION(
      parse_lr_decay("exponential"), Error,
      error_of(
          ErrorKind::usage,
          "unknown learning-rate decay 'exponential'; expected constant, linear, cosine or step"));
  BOOST_TEST(name_of(parse_lr_decay("cosine")) == std::string("cosine"));
}

BOOST_AUTO_TEST_CASE(the_optimizer_takes_the_scheduled_rate_of_each_step) {
  ProcessGroup group(MPI_COMM_WORLD);
  ShardedModel<double> model = make_model(group);
  OptimizerSettings settings;
  settings.lr = 123;  // replaced by the schedule before the first step
  Optimizer<double> sgd("sgd", settings);
  const LrSchedule schedule(0.5, options_of(LrDecay::cosine, 3, 9, 0.05));
  const std::vector<double> start = values_of(model.parameter("w").shard());
  double moved = 0;
  for (int step = 0; step < 12; ++step) {
    schedule.apply(sgd);
    BOOST_TEST(sgd.settings().lr == schedule.lr_at(step));
    backward(model, 0.25);  // a power of two: each step moves by lr / 4 exactly
    sgd.step(model);
    model.zero_grad();
    moved += schedule.lr_at(step) * 0.25;
  }
  const std::vector<double> end = values_of(model.parameter("w").shard());
  for (std::size_t i = 0; i < end.size(); ++i) {
    BOOST_TEST(std::abs(end[i] - (start[i] - moved)) <= 1e-15 * (1 + std::abs(start[i])));
  }

  // A checkpoint's step count puts the schedule back where it was.
  Optimizer<double> resumed("sgd", settings);
  resumed.set_step_count(7);
  schedule.apply(resumed);
  BOOST_TEST(resumed.settings().lr == schedule.lr_at(7));

  BOOST_CHECK_EXCEPTION(sgd.set_lr(-0.5), Error, message_has("SGD lr must be >= 0"));
  BOOST_CHECK_EXCEPTION(sgd.set_weight_decay(-1), Error,
                        message_has("SGD weight_decay must be >= 0"));
  BOOST_TEST(sgd.settings().lr == schedule.lr_at(11));  // a refused rate changes nothing
}

BOOST_AUTO_TEST_CASE(adamw_decays_by_the_rate_and_weight_decay_last_set) {
  ProcessGroup group(MPI_COMM_WORLD);
  OptimizerSettings settings;
  settings.weight_decay = 0.5;
  {
    ShardedModel<double> model = make_model(group);
    Optimizer<double> adamw("adamw", settings);
    adamw.set_lr(0);
    const std::vector<double> start = values_of(model.parameter("w").shard());
    backward(model, 1.0);
    adamw.step(model);  // lr 0: neither the update nor the decoupled decay moves anything
    BOOST_TEST(values_of(model.parameter("w").shard()) == start, boost::test_tools::per_element());
  }
  ShardedModel<double> model = make_model(group);
  Optimizer<double> adamw("adamw", settings);
  adamw.set_lr(0.1);
  adamw.set_weight_decay(0.25);
  const std::vector<double> start = values_of(model.parameter("w").shard());
  backward(model, 1.0);
  adamw.step(model);  // Adam's first step moves by lr * g / (|g| + eps)
  const std::vector<double> end = values_of(model.parameter("w").shard());
  for (std::size_t i = 0; i < end.size(); ++i) {
    const double expected = start[i] * (1 - 0.1 * 0.25) - 0.1 / (1 + 1e-8);
    BOOST_TEST(std::abs(end[i] - expected) <= 1e-15 * (1 + std::abs(expected)));
  }
}

BOOST_AUTO_TEST_CASE(ranks_that_set_different_rates_fail_together_at_the_next_step) {
  ProcessGroup group(MPI_COMM_WORLD);
  if (group.size() < 2) {
    return;  // needs two ranks that disagree
  }
  ShardedModel<double> model = make_model(group);
  Optimizer<double> adam("adam", OptimizerSettings{});
  backward(model, 1.0);
  adam.step(model);                              // agreed
  adam.set_lr(group.rank() == 1 ? 2e-3 : 1e-3);  // rank 0 keeps its rate, and checks again
  backward(model, 1.0);
  BOOST_CHECK_EXCEPTION(adam.step(model), Error, error_of(ErrorKind::mismatch, "lr"));
}
