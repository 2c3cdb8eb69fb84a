// Every rank ends with rank 0's plan, or every rank gets the same error: at 1 to 4 ranks.
#include <boost/test/unit_test.hpp>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "fsdp/io/plan_file.hpp"
#include "fsdp/shard/model_description.hpp"
#include "fsdp/shard/plan_agreement.hpp"
#include "plan_test_util.hpp"

using namespace fsdp;
using fsdp::test::MessageHas;
using fsdp::test::param;
using fsdp::test::small_model;

namespace {

ProcessGroup world() {
  return ProcessGroup(MPI_COMM_WORLD);
}

std::vector<std::unique_ptr<ShardingStrategy>> all_strategies() {
  std::vector<std::unique_ptr<ShardingStrategy>> strategies;
  strategies.push_back(make_strategy("full"));
  strategies.push_back(make_strategy("layerwise"));
  // Patterns that match layers of both models tested (GPT-2's h.0, h.10, ... and l0, l1).
  strategies.push_back(make_strategy("hybrid", {{"*0"}, {"*1"}}));
  return strategies;
}

// The same message on every rank: rank 0's broadcast text compared locally, then a min-reduce.
bool same_on_every_rank(const std::string& text, ProcessGroup& group) {
  std::int64_t length = static_cast<std::int64_t>(text.size());
  group.broadcast(Kokkos::DefaultHostExecutionSpace(), host_view(&length, 1), 0);
  std::vector<std::int64_t> words((static_cast<std::size_t>(length) + 7) / 8, 0);
  if (group.rank() == 0) {
    std::memcpy(words.data(), text.data(), text.size());
  }
  group.broadcast(Kokkos::DefaultHostExecutionSpace(), host_view(words.data(), words.size()), 0);
  const std::string root(reinterpret_cast<const char*>(words.data()),
                         static_cast<std::size_t>(length));
  std::int32_t same = root == text ? 1 : 0;
  group.all_reduce(Kokkos::DefaultHostExecutionSpace(), host_view(&same, 1), ReduceOp::min);
  return same == 1;
}

}  // namespace

BOOST_AUTO_TEST_CASE(every_rank_gets_rank_0s_plan) {
  ProcessGroup group = world();
  const auto gpt2 = transformer_parameters(TransformerConfig::gpt2_small());
  for (const auto& strategy : all_strategies()) {
    for (const auto* model : {&gpt2}) {
      const ShardingPlan agreed = agree_on_plan(*strategy, *model, group);
      BOOST_TEST(agreed.world_size() == group.size());
      BOOST_TEST(agreed.strategy() == strategy->name());
      // Computed locally, every rank reaches the same plan too (no process-dependent input).
      BOOST_TEST((agreed == strategy->make_plan(*model, group.size())));
      BOOST_TEST(same_on_every_rank(plan_to_json(agreed), group));
    }
    const ShardingPlan small = agree_on_plan(*strategy, small_model(), group);
    BOOST_TEST(same_on_every_rank(plan_to_json(small), group));
  }
}

BOOST_AUTO_TEST_CASE(a_different_parameter_list_fails_on_every_rank) {
  ProcessGroup group = world();
  if (group.size() < 2) {
    BOOST_TEST_MESSAGE("needs 2 ranks for a mismatch between ranks");
    return;
  }
  const int last = group.size() - 1;
  // The last rank has a different shape for parameter #3.
  auto model = small_model();
  if (group.rank() == last) {
    model[3].shape = {5, 4};
  }
  const std::string rank_label = "rank " + std::to_string(last) + " has 'l1.w' [5, 4]";
  for (const auto& strategy : all_strategies()) {
    BOOST_CHECK_EXCEPTION(agree_on_plan(*strategy, model, group), Error,
                          (MessageHas{{"parameter #3", "rank 0 has 'l1.w' [5, 5]", rank_label}}));
  }
  // Rank 1 misses the last parameter and the last rank renamed #1: the lowest index wins, on
  // every rank alike.
  model = small_model();
  if (group.rank() == 1) {
    model.pop_back();
  }
  if (group.rank() == last && last != 1) {
    model[1].name = "l0.weight";
  }
  const std::string expected = last != 1 ? "'l0.weight'" : "'scale'";
  try {
    agree_on_plan(FullSharding(), model, group);
    BOOST_ERROR("agree_on_plan accepted different parameter lists");
  } catch (const Error& error) {
    BOOST_TEST(std::string(error.what()).find(expected) != std::string::npos);
    BOOST_TEST(same_on_every_rank(error.what(), group));
  }
}

BOOST_AUTO_TEST_CASE(a_failure_on_rank_0_fails_every_rank) {
  ProcessGroup group = world();
  // Invalid everywhere: rank 0 fails to make the plan and tells the others.
  auto model = small_model();
  model[2].shape = {0};
  BOOST_CHECK_EXCEPTION(agree_on_plan(FullSharding(), model, group), Error,
                        (MessageHas{{"could not make", "'l0.b'", "dimension 0 is 0"}}));
  // Invalid only on rank 0: the same.
  model = small_model();
  if (group.rank() == 0) {
    model.push_back(model[0]);
  }
  // (Named "rank 0" where there are others; in a group of one, "could not make".)
  BOOST_CHECK_EXCEPTION(
      agree_on_plan(LayerWiseSharding(), model, group), Error,
      (MessageHas{{group.size() > 1 ? "rank 0 could not" : "could not", "'emb'", "twice"}}));
  // Invalid only on another rank: rank 0's plan is fine, the comparison names that rank.
  if (group.size() > 1) {
    model = small_model();
    if (group.rank() == 1) {
      model[0].dtype = static_cast<DType>(99);
    }
    BOOST_CHECK_EXCEPTION(agree_on_plan(FullSharding(), model, group), Error,
                          (MessageHas{{"rank 1 has 'emb'", "dtype#99"}}));
  }
  // A plan for another world size.
  BOOST_CHECK_EXCEPTION(
      agree_on_plan([&] { return FullSharding().make_plan(small_model(), group.size() + 1); },
                    small_model(), group),
      Error, (MessageHas{{"world size " + std::to_string(group.size() + 1)}}));
}

BOOST_AUTO_TEST_CASE(plan_files_collectively) {
  ProcessGroup group = world();
  // One temporary directory, made by rank 0 and named to all.
  std::string directory;
  if (group.rank() == 0) {
    std::string pattern = (std::filesystem::temp_directory_path() / "fsdp-agree-XXXXXX").string();
    BOOST_REQUIRE(mkdtemp(pattern.data()) != nullptr);
    directory = pattern;
  }
  std::vector<std::int64_t> words(64, 0);
  std::memcpy(words.data(), directory.data(), directory.size());
  group.broadcast(Kokkos::DefaultHostExecutionSpace(), host_view(words.data(), words.size()), 0);
  directory = reinterpret_cast<const char*>(words.data());

  const ShardingPlan plan = agree_on_plan(LayerWiseSharding(), small_model(), group);
  for (const auto& name : {"/plan.h5", "/plan.json"}) {
    const std::string path = directory + name;
    save_plan(path, plan, group);
    const ShardingPlan loaded = load_plan(path, small_model(), group);
    BOOST_TEST((loaded == plan));
    // Saved for this world size; the job with one more rank is told so, on every rank.
    if (group.rank() == 0) {
      save_plan(directory + "/wrong_" + (name + 1),
                FullSharding().make_plan(small_model(), group.size() + 1));
    }
    group.barrier();
    BOOST_CHECK_EXCEPTION(load_plan(directory + "/wrong_" + (name + 1), small_model(), group),
                          Error,
                          (MessageHas{{"world size " + std::to_string(group.size() + 1),
                                       std::to_string(group.size()) + " ranks"}}));
  }
  BOOST_CHECK_EXCEPTION(load_plan(directory + "/missing.h5", small_model(), group), Error,
                        (MessageHas{{"could not make the sharding plan", "missing.h5"}}));
  BOOST_CHECK_EXCEPTION(save_plan(directory + "/nodir/plan.h5", plan, group), Error,
                        (MessageHas{{"could not save", "cannot create a temporary"}}));
  group.barrier();
  if (group.rank() == 0) {
    std::filesystem::remove_all(directory);
  }
}
