// The solver's training step, memory per device, budgets and 2-D meshes: figures worked out by
// hand (docs/solver.md has the same examples), the exact solver against enumeration, the
// heuristic against the exact solver, the classic layouts, parameter outcomes, the executable
// plan, and the solution format.
#include <boost/test/unit_test.hpp>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "error_message.hpp"
#include "fsdp/io/plan_file.hpp"
#include "fsdp/solver/exact_solver.hpp"
#include "fsdp/solver/fsdp_plan.hpp"
#include "fsdp/solver/generators.hpp"
#include "fsdp/solver/graph.hpp"
#include "fsdp/solver/simple_solver.hpp"

using namespace fsdp;
using namespace fsdp::solver;

namespace {

// Round figures for the examples by hand.
Machine hand_machine() {
  Machine m;
  m.devices = 4;
  m.flops_per_s = 1e12;
  m.link_bytes_per_s = 1e9;
  m.collective_latency_s = 1e-6;
  m.memory_bytes_per_s = 1e11;
  return m;
}

Machine mesh_2d(int rows, int columns, double bandwidth0 = 450e9, double bandwidth1 = 50e9) {
  Machine m;
  m.set_mesh({MeshAxis{rows, bandwidth0, 5e-6}, MeshAxis{columns, bandwidth1, 10e-6}});
  return m;
}

StepOptions training(std::int64_t budget = 0) {
  StepOptions options;
  options.step = StepKind::training;
  options.memory_budget_bytes = budget;
  return options;
}

// x (64, 32) -> matmul w1 (32, 16) -> relu -> matmul w2 (16, 8) -> out, fp32.
Graph two_layers() {
  return Graph({fp32_node("x", "input", {}, {64, 32}), fp32_node("w1", "parameter", {}, {32, 16}),
                fp32_node("h", "matmul", {"x", "w1"}), fp32_node("a", "relu", {"h"}),
                fp32_node("w2", "parameter", {}, {16, 8}), fp32_node("y", "matmul", {"a", "w2"}),
                fp32_node("out", "output", {"y"})});
}

// The index of the strategy of node `id` whose output is laid out as `layout` (1-D text).
int strategy_with(const Graph& graph, const std::vector<std::vector<Strategy>>& strategies,
                  const std::string& id, const std::string& layout) {
  const int v = graph.index_of(id);
  const auto& list = strategies[static_cast<std::size_t>(v)];
  for (std::size_t s = 0; s < list.size(); ++s) {
    if (list[s].output.to_string(graph.node(v).rank()) == layout) {
      return static_cast<int>(s);
    }
  }
  BOOST_FAIL("node " << id << " has no strategy with output " << layout);
  return -1;
}

// Data parallel (rows of x cut, every op on its rows), weights replicated or stored row-sharded.
Solution two_layers_data_parallel(bool fsdp) {
  const Graph graph = two_layers();
  const Machine m = hand_machine();
  const auto strategies = all_strategies(graph, m);
  std::vector<int> choice;
  for (const char* id : {"x", "w1", "h", "a", "w2", "y", "out"}) {
    const bool weight = id[0] == 'w';
    choice.push_back(strategy_with(graph, strategies, id, weight && !fsdp ? "[R,R]" : "[S,R]"));
  }
  return evaluate(graph, strategies, choice, m, "by hand", training());
}

}  // namespace

BOOST_AUTO_TEST_CASE(training_step_by_hand) {
  // docs/solver.md, "Worked example: a training step". 4 devices, 1e12 FLOP/s, 1e9 B/s, 1 us per
  // collective, 1e11 B/s of memory, fp32 Adam (4 + 4 + 8 bytes per parameter element).
  const Solution dp = two_layers_data_parallel(false);
  // h: 2 x 64 x 32 x 16 = 65,536 FLOPs, 16,384 per device: 16.384 ns; its backward computes dW1
  // only (x needs no gradient): once more. y: 4,096 per device, backward dA and dW2: twice.
  BOOST_TEST(dp.node("h").compute_s == 16384 / 1e12);
  BOOST_TEST(dp.node("h").backward_compute_s == 16384 / 1e12);
  BOOST_TEST(dp.node("y").backward_compute_s == 2 * 4096 / 1e12);
  BOOST_TEST(dp.node("a").backward_compute_s == 256 / 1e12);
  // Gradient sync: the batch split leaves each weight's gradient a partial sum: an all-reduce of
  // w1's 2,048 bytes (2 x 3/4 x 2,048 = 3,072 sent) and of w2's 512.
  BOOST_TEST(dp.node("w1").gradient_sync_s == 3072 / 1e9 + 1e-6);
  BOOST_TEST(dp.node("w2").gradient_sync_s == 768 / 1e9 + 1e-6);
  const InputTransfer& dw1 = dp.node("h").gradient_transfers.at(0);
  BOOST_TEST(dw1.producer == "w1");
  BOOST_TEST(int(dw1.transfer.collective) == int(LayoutCollective::all_reduce));
  BOOST_TEST(dw1.from.to_string(2) == "[R,R]+P");
  // Optimizer: 512 and 128 elements, 2 (4 + 8) + 4 = 28 bytes touched each, at 1e11 B/s.
  BOOST_TEST(dp.node("w1").optimizer_s == 512 * 28 / 1e11);
  BOOST_TEST(dp.node("w2").optimizer_s == 128 * 28 / 1e11);
  BOOST_TEST(dp.backward_communication_s == 0.0);
  BOOST_TEST(dp.total_s == 6.064768e-6, boost::test_tools::tolerance(1e-12));

  // Memory on one device: x's rows 2,048 B, w1 512 x 16 = 8,192 B, w2 128 x 16 = 2,048 B; the
  // activations h and a 1,024 B each, y 512 B.
  BOOST_TEST(dp.memory.input_bytes == 2048);
  BOOST_TEST(dp.memory.parameter_bytes == (512 + 128) * 4);
  BOOST_TEST(dp.memory.gradient_bytes == (512 + 128) * 4);
  BOOST_TEST(dp.memory.optimizer_bytes == (512 + 128) * 8);
  BOOST_TEST(dp.node("h").memory.activation_bytes == 1024);
  BOOST_TEST(dp.node("y").memory.activation_bytes == 512);
  // Forward: 12,288 persistent + the activations made so far.
  BOOST_TEST(dp.node("h").memory.forward_bytes == 12288 + 1024);
  BOOST_TEST(dp.node("a").memory.forward_bytes == 12288 + 2048);
  BOOST_TEST(dp.node("y").memory.forward_bytes == 12288 + 2560);
  BOOST_TEST(dp.node("out").memory.forward_bytes == 12288 + 2560);
  // Backward of y: h and a still held (a is read here, h by relu's backward), y's gradient and
  // a's (in flight), and w2's full-size partial gradient before its all-reduce: the peak.
  BOOST_TEST(dp.node("y").memory.backward_bytes == 12288 + 2048 + 512 + 1024 + 512);
  BOOST_TEST(dp.node("a").memory.backward_bytes == 12288 + 1024 + 1024 + 1024);
  BOOST_TEST(dp.node("h").memory.backward_bytes == 12288 + 1024 + 2048);
  BOOST_TEST(dp.memory.peak_bytes == 16384);
  BOOST_TEST(dp.memory.peak_node == "y");
  BOOST_TEST(dp.memory.peak_phase == "backward");

  // FSDP: weights stored row-sharded, gathered for use. w1 once (the first layer's backward
  // computes no input gradient, so it does not read w1), w2 twice; reduce-scatters of the
  // gradients (3/4 x 2,048 = 1,536 bytes for w1).
  const Solution fsdp = two_layers_data_parallel(true);
  BOOST_TEST(fsdp.node("h").resharding_s == 1536 / 1e9 + 1e-6);
  BOOST_TEST(fsdp.node("h").backward_communication_s == 0.0);
  BOOST_TEST(fsdp.node("y").resharding_s == 384 / 1e9 + 1e-6);
  BOOST_TEST(fsdp.node("y").backward_communication_s == 384 / 1e9 + 1e-6);
  BOOST_TEST(fsdp.node("w1").gradient_sync_s == 1536 / 1e9 + 1e-6);
  BOOST_TEST(int(fsdp.node("h").gradient_transfers.at(0).transfer.collective) ==
             int(LayoutCollective::reduce_scatter));
  // A quarter of the state, the gathered weight held while h runs.
  BOOST_TEST(fsdp.node("w1").memory.state_bytes == 2048);
  BOOST_TEST(fsdp.node("h").memory.forward_bytes == 4608 + 1024 + 2048);
  BOOST_TEST(fsdp.memory.peak_bytes == 9216);
  BOOST_TEST(fsdp.parameters.at(0).summary() == "FSDP dim 0 along axis 0");
  BOOST_TEST(dp.parameters.at(0).summary() == "replicated");

  // The forward pass alone: no backward, no gradients, no optimizer state; activations freed
  // after their last consumer.
  const Graph graph = two_layers();
  const auto strategies = all_strategies(graph, hand_machine());
  std::vector<int> choice;
  for (const char* id : {"x", "w1", "h", "a", "w2", "y", "out"}) {
    choice.push_back(strategy_with(graph, strategies, id, id[0] == 'w' ? "[R,R]" : "[S,R]"));
  }
  const Solution forward = evaluate(graph, strategies, choice, hand_machine(), "by hand");
  BOOST_TEST(forward.total_s == forward.compute_s);
  BOOST_TEST(forward.memory.gradient_bytes == 0);
  BOOST_TEST(forward.memory.optimizer_bytes == 0);
  // At y's forward: x, w1, w2 (4,608 bytes), a and y; h was freed after relu, its last consumer.
  BOOST_TEST(forward.node("y").memory.forward_bytes == 4608 + 1024 + 512);
}

BOOST_AUTO_TEST_CASE(two_axis_conversions_by_hand) {
  // 2 x 4 devices: axis 0 at 1e9 B/s and 1 us, axis 1 at 1e8 B/s and 2 us; an 8,192-byte tensor.
  Machine m;
  m.set_mesh({MeshAxis{2, 1e9, 1e-6}, MeshAxis{4, 1e8, 2e-6}});
  using S = ShardingSpec;
  S cut_both;  // rows along axis 0, columns along axis 1
  cut_both.axes = {S::AxisUse{S::Kind::sharded, 0}, S::AxisUse{S::Kind::sharded, 1}};
  // Gather along axis 1 first (3/4 x 4,096 while axis 0 still cuts: 30.72 us + 2 us), then along
  // axis 0 (1/2 x 8,192: 4.096 us + 1 us); the other order costs 65.46 us.
  const Conversion gather = convert(cut_both, S::replicated(), 8192, m);
  BOOST_TEST(gather.steps[0].axis == 1);
  BOOST_TEST(gather.steps[0].traffic_bytes == 3072.0);
  BOOST_TEST(gather.steps[1].axis == 0);
  BOOST_TEST(gather.seconds() == 3.072e-5 + 2e-6 + 4.096e-6 + 1e-6,
             boost::test_tools::tolerance(1e-12));
  // A partial sum along axis 1: all-reduce along axis 1, 2 x 3/4 x 8,192 bytes.
  const Conversion reduce = convert(S::partial(1), S::replicated(), 8192, m);
  BOOST_TEST(int(reduce.steps[0].collective) == int(LayoutCollective::all_reduce));
  BOOST_TEST(reduce.seconds() == 12288 / 1e8 + 2e-6, boost::test_tools::tolerance(1e-12));
  // Partial along both axes to whole: hierarchical (reduce-scatter along axis 0, all-reduce of
  // the halves along axis 1, all-gather along axis 0) beats an all-reduce along each axis.
  S both_partial;
  both_partial.axes = {S::AxisUse{S::Kind::partial, -1}, S::AxisUse{S::Kind::partial, -1}};
  const Conversion hierarchical = convert(both_partial, S::replicated(), 8192, m);
  BOOST_TEST(int(hierarchical.steps[0].collective) == int(LayoutCollective::reduce_scatter));
  BOOST_TEST(int(hierarchical.steps[1].collective) == int(LayoutCollective::all_reduce));
  BOOST_TEST(hierarchical.steps[1].buffer_bytes == 4096.0);
  BOOST_TEST(int(hierarchical.steps[2].collective) == int(LayoutCollective::all_gather));
  BOOST_TEST(hierarchical.seconds() == 4096 / 1e9 + 1e-6 + 6144 / 1e8 + 2e-6 + 4096 / 1e9 + 1e-6,
             boost::test_tools::tolerance(1e-12));
}

BOOST_AUTO_TEST_CASE(sharding_spec_two_axes) {
  using S = ShardingSpec;
  S spec;
  spec.axes = {S::AxisUse{S::Kind::sharded, 0}, S::AxisUse{S::Kind::sharded, 2}};
  BOOST_TEST(spec.to_string(3, 2) == "[S0,R,S1]");
  BOOST_TEST((S::parse("[S0,R,S1]", 3) == spec));
  S both;
  both.axes = {S::AxisUse{S::Kind::sharded, 1}, S::AxisUse{S::Kind::sharded, 1}};
  BOOST_TEST(both.to_string(2, 2) == "[R,S01]");
  BOOST_TEST((S::parse("[R,S01]", 2) == both));
  BOOST_TEST(S::partial(1).to_string(2, 2) == "[R,R]+P1");
  BOOST_TEST(S::partial(1).to_string(2) == "[R,R]+P1");  // axis 1 is always named
  BOOST_TEST(S::sharded(0).to_string(2, 2) == "[S0,R]");
  BOOST_TEST(S::sharded(0).to_string(2) == "[S,R]");  // the 1-D form, as before
  BOOST_TEST((S::parse("[S,R]+P1", 2).axis(1).kind == S::Kind::partial));
  BOOST_CHECK_THROW(S::parse("[S1,S1]", 2), Error);  // an axis cuts one dimension
  BOOST_CHECK_THROW(S::parse("[S0,R]+P0", 2), Error);
  BOOST_CHECK_THROW(S::parse("[S2,R]", 2), Error);
}

BOOST_AUTO_TEST_CASE(two_axis_strategies) {
  const Graph graph({fp32_node("x", "input", {}, {64, 32}),
                     fp32_node("w", "parameter", {}, {32, 16}),
                     fp32_node("h", "matmul", {"x", "w"}), fp32_node("out", "output", {"h"})});
  const auto strategies = strategies_for(graph, graph.index_of("h"), mesh_2d(2, 4));
  const auto find = [&](const std::string& layout) -> const Strategy* {
    for (const Strategy& s : strategies) {
      if (s.output.to_string(2, 2) == layout) {
        return &s;
      }
    }
    return nullptr;
  };
  // Data parallel along axis 0, tensor parallel along axis 1.
  const Strategy* dp_tp = find("[S0,S1]");
  BOOST_TEST_REQUIRE(dp_tp != nullptr);
  BOOST_TEST(dp_tp->inputs[0].to_string(2, 2) == "[S0,R]");
  BOOST_TEST(dp_tp->inputs[1].to_string(2, 2) == "[R,S1]");
  BOOST_TEST(dp_tp->flops_per_device == 2.0 * 64 * 32 * 16 / 8);
  BOOST_TEST(describe(*dp_tp, graph.node(graph.index_of("h"))) ==
             "a0 split batch dim 0, a1 split output features (N)");
  // Rows cut along both axes: 64 rows >= 8 blocks.
  BOOST_TEST(find("[S01,R]") != nullptr);
  // A contraction split along axis 1 leaves a partial sum along that axis.
  BOOST_TEST(find("[S0,R]+P1") != nullptr);
  BOOST_TEST(strategies.back().output.is_replicated());
  // 4 rows cannot be cut into 8 blocks; the contraction (32) and the columns (16) can.
  const Graph narrow({fp32_node("x", "input", {}, {4, 32}),
                      fp32_node("w", "parameter", {}, {32, 16}),
                      fp32_node("h", "matmul", {"x", "w"}), fp32_node("out", "output", {"h"})});
  for (const Strategy& s : strategies_for(narrow, narrow.index_of("h"), mesh_2d(2, 4))) {
    BOOST_TEST(s.output.to_string(2, 2) != "[S01,R]");
  }
}

BOOST_AUTO_TEST_CASE(classic_layouts_on_a_two_axis_mesh) {
  // An MLP with many rows on 2 x 4 devices. With the slow link on axis 0 (between nodes) and
  // the fast one on axis 1 (inside a node), the optimum is data parallel along axis 0 and
  // tensor parallel (Megatron's column then row split) along axis 1; with the links swapped,
  // the axes swap.
  ModelShape shape;
  shape.batch = 64;
  shape.sequence = 512;
  shape.hidden = 2048;
  shape.ffn = 8192;
  shape.heads = 16;
  const Graph graph = mlp_block(shape);
  for (const bool slow_axis_0 : {true, false}) {
    const Machine m = slow_axis_0 ? mesh_2d(2, 4, 50e9, 450e9) : mesh_2d(2, 4, 450e9, 50e9);
    const Solution exact = ExactSolver(m, training()).solve(graph);
    const Solution simple = SimpleSolver(m, training()).solve(graph);
    BOOST_TEST_INFO("slow link on axis " << (slow_axis_0 ? 0 : 1));
    BOOST_TEST(simple.total_s == exact.total_s, boost::test_tools::tolerance(1e-12));
    const int data = slow_axis_0 ? 0 : 1, tensor = 1 - data;
    const std::string up = exact.node("mlp_up").strategy;
    BOOST_TEST(up == (slow_axis_0 ? "a0 split batch dim 0, a1 split output features (N)"
                                  : "a0 split output features (N), a1 split batch dim 0"));
    BOOST_TEST(exact.node("mlp_down").strategy ==
               (slow_axis_0 ? "a0 split batch dim 0, a1 split contracting (K)"
                            : "a0 split contracting (K), a1 split batch dim 0"));
    // w2 is split by rows for the contraction; w1 by columns, and stored cut along the data
    // axis too (FSDP): the first layer's backward does not read it, so a gather and a
    // reduce-scatter cost what the all-reduce of a replicated copy would, and the optimizer
    // updates half of it.
    const ParameterOutcome& w1 = exact.parameters.at(0);
    const ParameterOutcome& w2 = exact.parameters.at(1);
    BOOST_TEST(w2.summary() == "tensor-parallel dim 0 along axis " + std::to_string(tensor));
    BOOST_TEST(int(w1.uses[static_cast<std::size_t>(tensor)]) ==
               int(ParameterUse::tensor_parallel));
    BOOST_TEST(int(w1.uses[static_cast<std::size_t>(data)]) == int(ParameterUse::fsdp));
    BOOST_TEST(w1.layout.axis(tensor).dim == 1);
  }
}

BOOST_AUTO_TEST_CASE(fsdp_along_the_data_axis) {
  // Many rows on a 2 x 4 mesh whose axis 1 is slow: data parallel along axis 0 beats splitting
  // the weights (and an all-reduce of the gradients along axis 1). The middle layer's weight
  // stays replicated (its backward reads it again: storing it cut would cost a second gather);
  // the first layer's is stored cut along the data axis and gathered (FSDP): a gather and a
  // reduce-scatter cost what its all-reduce would, and the optimizer updates half of it. A
  // budget that does not hold it so cuts it along both axes.
  const Graph graph({fp32_node("x", "input", {}, {16384, 4096}),
                     fp32_node("w1", "parameter", {}, {4096, 4096}),
                     fp32_node("h", "matmul", {"x", "w1"}), fp32_node("a", "gelu", {"h"}),
                     fp32_node("w2", "parameter", {}, {4096, 4096}),
                     fp32_node("y", "matmul", {"a", "w2"}), fp32_node("out", "output", {"y"})});
  const Machine m = mesh_2d(2, 4);
  for (const std::int64_t budget : {std::int64_t{0}, std::int64_t{1000} << 20}) {
    const Solution exact = ExactSolver(m, training(budget)).solve(graph);
    const Solution simple = SimpleSolver(m, training(budget)).solve(graph);
    BOOST_TEST_INFO("budget " << budget);
    BOOST_TEST(exact.fits_budget);
    BOOST_TEST(simple.fits_budget);
    BOOST_TEST(simple.total_s == exact.total_s, boost::test_tools::tolerance(1e-12));
    BOOST_TEST(exact.node("h").strategy == "split batch dim 0");
    BOOST_TEST(exact.parameters.at(1).summary() == "replicated");
    BOOST_TEST(exact.parameters.at(0).summary() ==
               (budget == 0 ? "FSDP dim 0 along axis 0" : "FSDP dim 0 along axes 0 and 1"));
  }
}

BOOST_AUTO_TEST_CASE(budgets_are_honoured_or_the_smallest_peak_is_said) {
  ModelShape shape;
  shape.batch = 4;
  shape.sequence = 256;
  shape.hidden = 1024;
  shape.ffn = 4096;
  shape.heads = 16;
  const Graph graph = transformer_layer(shape);
  Machine m;
  m.devices = 8;
  const Solution fastest = ExactSolver(m, training()).solve(graph);
  StepOptions smallest_options = training(1);
  const Solution smallest = ExactSolver(m, smallest_options).solve(graph);
  BOOST_TEST(!smallest.fits_budget);
  BOOST_TEST(smallest.memory.peak_bytes < fastest.memory.peak_bytes);
  for (const double f : {0.25, 0.5, 0.75}) {
    const std::int64_t budget =
        smallest.memory.peak_bytes +
        static_cast<std::int64_t>(
            f * static_cast<double>(fastest.memory.peak_bytes - smallest.memory.peak_bytes));
    const Solution exact = ExactSolver(m, training(budget)).solve(graph);
    const Solution simple = SimpleSolver(m, training(budget)).solve(graph);
    BOOST_TEST_INFO("budget " << budget);
    BOOST_TEST(exact.fits_budget);
    BOOST_TEST(simple.fits_budget);
    BOOST_TEST(exact.memory.peak_bytes <= budget);
    BOOST_TEST(simple.memory.peak_bytes <= budget);
    BOOST_TEST(simple.total_s <= exact.total_s * 1.05);
    BOOST_TEST(simple.total_s >= exact.total_s * (1 - 1e-9));
  }
  // Below the smallest peak: no plan fits; each solver returns its smallest.
  const Solution none = SimpleSolver(m, training(smallest.memory.peak_bytes - 1)).solve(graph);
  BOOST_TEST(!none.fits_budget);
  BOOST_TEST(none.memory.peak_bytes >= smallest.memory.peak_bytes);
  BOOST_TEST(none.options.memory_budget_bytes == smallest.memory.peak_bytes - 1);
}

BOOST_AUTO_TEST_CASE(heuristic_against_optimum_with_budgets) {
  // Every reference graph of up to 12 nodes on its 1-D mesh and on a 2 x (N/2) mesh, planned for
  // a training step without a budget and with budgets at a quarter, half and three quarters of
  // the way from the smallest peak to the fastest plan's: every plan fits and is within 5% of
  // the optimum (docs/solver.md, "Plan quality"; fsdp-bench solver reports 300 random graphs).
  int cases = 0, over = 0, unfit = 0;
  double worst = 1;
  for (const NamedGraph& g : reference_graphs(60)) {
    for (const bool two_d : {false, true}) {
      Machine m;
      m.devices = g.devices;
      if (two_d) {
        m.set_mesh({MeshAxis{2, 450e9, 5e-6}, MeshAxis{g.devices / 2, 50e9, 10e-6}});
      }
      const Solution fastest = ExactSolver(m, training()).solve(g.graph);
      const Solution smallest = ExactSolver(m, training(1)).solve(g.graph);
      for (const double f : {-1.0, 0.25, 0.5, 0.75}) {
        const std::int64_t budget =
            f < 0 ? 0
                  : smallest.memory.peak_bytes +
                        static_cast<std::int64_t>(f *
                                                  static_cast<double>(fastest.memory.peak_bytes -
                                                                      smallest.memory.peak_bytes));
        const Solution exact = ExactSolver(m, training(budget)).solve(g.graph);
        const Solution simple = SimpleSolver(m, training(budget)).solve(g.graph);
        ++cases;
        BOOST_TEST_INFO(g.name << " on " << m.mesh_text() << ", budget " << budget);
        BOOST_TEST(exact.fits_budget);
        unfit += !simple.fits_budget;
        const double ratio = simple.total_s / exact.total_s;
        BOOST_TEST(ratio >= 1 - 1e-9);
        worst = std::max(worst, ratio);
        if (ratio > 1.05) {
          ++over;
          std::printf("over 5%%: %s on %s, budget %lld: %.4f\n", g.name.c_str(),
                      m.mesh_text().c_str(), static_cast<long long>(budget), ratio);
        }
      }
    }
  }
  std::printf("training, budgets: %d cases, %d over 1.05, %d not fitting, worst %.4f\n", cases,
              over, unfit, worst);
  BOOST_TEST(unfit == 0);
  BOOST_TEST(over == 0);
}

BOOST_AUTO_TEST_CASE(budget_search_reaches_plans_no_weighting_of_memory_prefers) {
  // The random graphs of fsdp-bench solver's report on which the budget search of earlier
  // versions ended 6% to 92% above the optimum, on the mesh where it did (1-D, or 2 x N/2 with
  // axis 0 at 450 GB/s and axis 1 at 50 GB/s), at each budget of the report. #65 on 1-D: the
  // optimum splits the output features of a chain that every weighting of memory prefers
  // data-parallel; #215 on 2-D: the optimum is tensor-parallel along the fast axis where the
  // multipliers chose the slow one (which saves more bytes). The exact neighbourhoods and the
  // recombination with the axes swapped reach them (docs/solver.md, "Memory budget").
  const std::vector<int> one_d = {53, 65, 89, 148, 169, 193, 248, 276};
  const std::vector<int> two_d = {8, 19, 32, 58, 146, 197, 215, 235, 248, 253, 263, 276, 289, 299};
  const std::vector<NamedGraph> graphs = reference_graphs(300);
  const auto graph_named = [&](int index) -> const NamedGraph& {
    const std::string name = "random #" + std::to_string(index);
    for (const NamedGraph& g : graphs) {
      if (g.name == name) {
        return g;
      }
    }
    BOOST_FAIL("no reference graph " << name);
    return graphs.front();
  };
  for (const bool mesh : {false, true}) {
    for (const int index : mesh ? two_d : one_d) {
      const NamedGraph& g = graph_named(index);
      Machine m;
      m.devices = g.devices;
      if (mesh) {
        m.set_mesh({MeshAxis{2, 450e9, 5e-6}, MeshAxis{g.devices / 2, 50e9, 10e-6}});
      }
      const std::int64_t fastest = ExactSolver(m, training()).solve(g.graph).memory.peak_bytes;
      const std::int64_t smallest = ExactSolver(m, training(1)).solve(g.graph).memory.peak_bytes;
      for (const double f : {0.25, 0.5, 0.75}) {
        const std::int64_t budget =
            smallest + static_cast<std::int64_t>(f * static_cast<double>(fastest - smallest));
        const Solution exact = ExactSolver(m, training(budget)).solve(g.graph);
        const Solution simple = SimpleSolver(m, training(budget)).solve(g.graph);
        BOOST_TEST_INFO(g.name << " on " << m.mesh_text() << ", budget " << budget);
        BOOST_TEST(simple.fits_budget);
        BOOST_TEST(simple.total_s <= 1.05 * exact.total_s);
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(chains_are_relaid_over_both_mesh_axes) {
  // Random graph #85 of fsdp-bench solver --larger (14 nodes) on a 2x4 mesh, a training step
  // without a budget: the refinement alone cuts every tensor along axis 1 only ([R,S1], [S1,R]),
  // 2.0x the optimum, which cuts the same dimensions along both axes ([R,S01], [S01,R]) and only
  // a change of every node at once reaches; the exact search over each node's layouts with the
  // axes swapped or spread over both finds it.
  const Graph graph = random_graph(std::uint64_t{85} * 31 + 5, 13 + 85 % 28);
  Machine m;
  m.devices = 8;
  m.set_mesh({MeshAxis{2, 450e9, 5e-6}, MeshAxis{4, 50e9, 10e-6}});
  const double optimum = ExactSolver(m, std::size_t{1} << 16, training()).solve(graph).total_s;
  SimpleSolver simple(m, training());
  const Solution plan = simple.solve(graph);
  BOOST_TEST(plan.total_s <= 1.05 * optimum);
  BOOST_TEST(simple.stats().relaid == 1);
}

BOOST_AUTO_TEST_CASE(executable_plan_states_what_fsdp_cannot_run) {
  // x (4096, 64) -> matmul w (64, 64) -> out on 2 x 4 devices, rows cut along axis 0.
  const Graph graph({fp32_node("x", "input", {}, {4096, 64}),
                     fp32_node("w", "parameter", {}, {64, 64}),
                     fp32_node("h", "matmul", {"x", "w"}), fp32_node("out", "output", {"h"})});
  const Machine m = mesh_2d(2, 4);
  const auto strategies = all_strategies(graph, m);
  const auto plan_with = [&](const std::string& weight, const std::string& product) {
    const auto pick = [&](const std::string& id, const std::string& layout) {
      const auto& list = strategies[static_cast<std::size_t>(graph.index_of(id))];
      for (std::size_t s = 0; s < list.size(); ++s) {
        if (list[s].output.to_string(2, 2) == layout) {
          return static_cast<int>(s);
        }
      }
      BOOST_FAIL("no strategy of " << id << " makes " << layout);
      return -1;
    };
    const std::vector<int> choice = {pick("x", "[S0,R]"), pick("w", weight), pick("h", product),
                                     pick("out", product)};
    return executable_plan(graph, evaluate(graph, strategies, choice, m, "by hand", training()));
  };
  const auto all_notes = [](const ExecutablePlan& p) {
    std::string text;
    for (const std::string& note : p.notes) {
      text += note + "\n";
    }
    return text;
  };
  // FSDP along axis 1 (stored [S1,R], gathered for the rows-split matmul): hybrid sharding over
  // axis 1's 4 consecutive ranks, which fsdp runs as it is.
  const ExecutablePlan hybrid = plan_with("[S1,R]", "[S0,R]");
  BOOST_TEST(hybrid.world_size == 8);
  BOOST_TEST(hybrid.shard_group_size == 4);
  BOOST_TEST(hybrid.plan.world_size() == 4);
  BOOST_TEST(hybrid.plan.strategy() == "solver");
  BOOST_TEST(int(hybrid.plan.placement("w").placement) == int(Placement::sharded));
  BOOST_TEST(hybrid.plan.parameter("w").shape == (std::vector<std::int64_t>{64, 64}));
  BOOST_TEST(hybrid.notes.empty(), all_notes(hybrid));
  // The plan survives a plan file.
  const std::string path = "test_solver_training_plan.json";
  save_plan(path, hybrid.plan);
  BOOST_TEST((load_plan(path) == hybrid.plan));
  std::remove(path.c_str());
  // Data parallel with a replicated weight: nothing to say.
  const ExecutablePlan replicated = plan_with("[R,R]", "[S0,R]");
  BOOST_TEST(int(replicated.plan.placement("w").placement) == int(Placement::replicated));
  BOOST_TEST(replicated.shard_group_size == 8);
  BOOST_TEST(replicated.notes.empty());
  // FSDP along axis 0 only: fsdp's shard groups are consecutive ranks, so all 8 shard it.
  const ExecutablePlan strided = plan_with("[S0,R]", "[S0,R]");
  BOOST_TEST(strided.shard_group_size == 8);
  BOOST_TEST(all_notes(strided).find("along mesh axis 0 only") != std::string::npos);
  BOOST_TEST(all_notes(strided).find("--mesh 4x2") != std::string::npos);
  // Tensor parallel along axis 1 (columns of w and of h): not run by fsdp.
  const ExecutablePlan tensor = plan_with("[R,S1]", "[S0,S1]");
  const std::string notes = all_notes(tensor);
  BOOST_TEST(notes.find("1 parameter is split for tensor parallelism, which fsdp does not run "
                        "('w': dimension 1 along mesh axis 1)") != std::string::npos);
  BOOST_TEST(notes.find("1 computed nodes are laid out other than by rows of the batch (such as "
                        "'h' a0 split batch dim 0, a1 split output features (N))") !=
             std::string::npos);
  BOOST_TEST(int(tensor.plan.placement("w").placement) == int(Placement::sharded));

  const Graph no_parameters({fp32_node("x", "input", {}, {8}), fp32_node("y", "relu", {"x"}),
                             fp32_node("out", "output", {"y"})});
  BOOST_CHECK_EXCEPTION(executable_plan(no_parameters, SimpleSolver(m).solve(no_parameters)), Error,
                        test::message_has("the graph has no parameter node"));
}

BOOST_AUTO_TEST_CASE(solution_format_versions) {
  ModelShape shape;
  shape.hidden = 256;
  shape.heads = 4;
  shape.ffn = 1024;
  shape.sequence = 64;
  const Graph graph = transformer_layer(shape);
  const Solution solution = SimpleSolver(mesh_2d(2, 4), training(1)).solve(graph);
  const std::string text = solution.to_json();
  BOOST_TEST(text.find("\"format_version\":2") != std::string::npos);
  const Solution read = Solution::from_json(text);
  BOOST_TEST(read.to_json() == text);
  BOOST_TEST(read.machine.axis_count() == 2);
  BOOST_TEST(read.machine.axis(1).link_bytes_per_s == 50e9);
  BOOST_TEST(read.options.training());
  BOOST_TEST(!read.fits_budget);
  BOOST_TEST(read.memory.peak_bytes == solution.memory.peak_bytes);
  BOOST_TEST(read.parameters.size() == solution.parameters.size());
  BOOST_TEST(read.node("mlp_up").memory.backward_bytes ==
             solution.node("mlp_up").memory.backward_bytes);
  // Version 1 (no format_version): a forward plan on a 1-D mesh.
  const std::string version_1 = R"({"solver": "simple",
    "machine": {"devices": 4, "flops_per_s": 1e12, "link_bytes_per_s": 1e9,
                "collective_latency_s": 1e-6},
    "totals": {"compute_s": 1.0, "communication_s": 0.0, "resharding_s": 0.0, "total_s": 1.0},
    "nodes": [{"id": "x", "op": "input", "shape": [4], "strategy": "sharded dim 0",
               "inputs": [], "output": {"kind": "sharded", "dim": 0}, "output_layout": "[S]",
               "flops_per_device": 0.0, "compute_s": 0.0, "communication_s": 0.0,
               "resharding_s": 0.0, "total_s": 0.0, "transfers": []}]})";
  const Solution old = Solution::from_json(version_1);
  BOOST_TEST(old.machine.devices == 4);
  BOOST_TEST(!old.options.training());
  BOOST_TEST(old.node("x").output_spec.dim() == 0);
  BOOST_TEST(Solution::from_json(old.to_json()).to_json() == old.to_json());
  BOOST_CHECK_EXCEPTION(Solution::from_json(R"({"format_version": 3})"), Error,
                        test::message_has("format_version 3; this fsdp reads versions 1 and 2"));
}

BOOST_AUTO_TEST_CASE(sizes_that_overflow_are_refused) {
  // 2 x 2^50 x 2^20 FLOPs: more than 2^63.
  const auto flops = [] {
    return Graph({fp32_node("x", "input", {}, {std::int64_t{1} << 30, std::int64_t{1} << 20}),
                  fp32_node("w", "parameter", {}, {std::int64_t{1} << 20, std::int64_t{1} << 20}),
                  fp32_node("h", "matmul", {"x", "w"})});
  };
  BOOST_CHECK_EXCEPTION(flops(), Error,
                        test::message_has("graph node 'h' (matmul): its FLOPs overflow 64 bits"));
  // 2^59 fp64 elements: 2^62 bytes fit, but with a gradient and Adam's state (32 bytes each) a
  // training step's state does not.
  NodeDecl w = fp32_node("w", "parameter", {}, {std::int64_t{1} << 30, std::int64_t{1} << 29});
  w.dtype = DType::f64;
  const Graph big({w, fp32_node("out", "output", {"w"})});
  BOOST_CHECK_NO_THROW(SimpleSolver(Machine()).solve(big));  // forward: the values alone fit
  Machine one;
  one.devices = 1;
  BOOST_CHECK_EXCEPTION(SimpleSolver(one, training()).solve(big), Error,
                        test::message_has("the state of 'w' overflows 64 bits"));
}
