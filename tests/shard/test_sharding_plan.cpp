// Strategies and plans on one process: shard arithmetic, LayerWise balance and determinism,
// Hybrid patterns, the factory, invalid input, model descriptions and presets.
#include <algorithm>
#include <boost/test/unit_test.hpp>
#include <map>
#include <numeric>

#include "fsdp/shard/model_description.hpp"
#include "fsdp/shard/shard_range.hpp"
#include "fsdp/shard/sharding_strategy.hpp"
#include "plan_test_util.hpp"

using namespace fsdp;
using fsdp::test::MessageHas;
using fsdp::test::param;
using fsdp::test::small_model;

namespace {

// The pieces of every non-replicated parameter cover [0, numel) in order, exactly once, and
// assignment(name, rank) agrees with them.
void check_coverage(const ShardingPlan& plan) {
  for (const ParameterInfo& p : plan.parameters()) {
    const auto pieces = plan.assignments(p.name);
    const ParameterPlacement& where = plan.placement(p.name);
    if (where.placement == Placement::replicated) {
      BOOST_TEST(pieces.empty());
      BOOST_TEST(plan.always_gathered().count(p.name) == 1u);
      for (int r = 0; r < plan.world_size(); ++r) {
        const auto local = plan.assignment(p.name, r);
        BOOST_REQUIRE(local.has_value());
        BOOST_TEST(local->start == 0);
        BOOST_TEST(local->size == p.numel());
      }
      continue;
    }
    std::int64_t next = 0;
    for (std::size_t k = 0; k < pieces.size(); ++k) {
      BOOST_TEST(pieces[k].start == next);  // no gap, no overlap
      BOOST_TEST(pieces[k].size >= 0);
      BOOST_TEST(pieces[k].shard_index == static_cast<int>(k));
      next = pieces[k].end();
    }
    BOOST_TEST(next == p.numel());  // padding never visible: the pieces end at numel exactly
    std::int64_t held = 0;
    for (int r = 0; r < plan.world_size(); ++r) {
      if (const auto local = plan.assignment(p.name, r)) {
        BOOST_TEST(local->owner_rank == r);
        held += local->size;
      }
    }
    BOOST_TEST(held == p.numel());
  }
}

}  // namespace

BOOST_AUTO_TEST_CASE(full_sharding_covers_every_element_once) {
  const std::vector<int> world_sizes = {1, 2, 3, 4, 5, 7, 8, 16, 35, 100};
  for (int n : world_sizes) {
    const ShardingPlan plan = FullSharding().make_plan(small_model(), n);
    BOOST_TEST(plan.strategy() == "full");
    BOOST_TEST(plan.total_shards() == n);
    check_coverage(plan);
    for (const ParameterInfo& p : plan.parameters()) {
      if (p.always_gather) {
        continue;
      }
      const std::int64_t shard = (p.numel() + n - 1) / n;
      BOOST_TEST(plan.padded_shard_numel(p.name) == shard);
      const auto pieces = plan.assignments(p.name);
      BOOST_TEST(pieces.size() == static_cast<std::size_t>(n));
      for (int r = 0; r < n; ++r) {
        // Full pieces first, then at most one short one, then empty ones.
        const std::int64_t expected =
            std::max<std::int64_t>(0, std::min<std::int64_t>(shard, p.numel() - r * shard));
        BOOST_TEST(pieces[r].size == expected);
        BOOST_TEST(pieces[r].owner_rank == r);
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(full_sharding_of_ten_elements_on_four_ranks) {
  const ShardingPlan plan = FullSharding().make_plan({param("w", {10})}, 4);
  const auto pieces = plan.assignments("w");
  const std::vector<std::int64_t> starts = {0, 3, 6, 9}, sizes = {3, 3, 3, 1};
  for (int r = 0; r < 4; ++r) {
    BOOST_TEST(pieces[r].start == starts[r]);
    BOOST_TEST(pieces[r].size == sizes[r]);
  }
  // More ranks than elements: ranks 3.. hold empty pieces at the end.
  const ShardingPlan wide = FullSharding().make_plan({param("w", {3})}, 8);
  for (int r = 0; r < 8; ++r) {
    BOOST_TEST(wide.assignment("w", r)->size == (r < 3 ? 1 : 0));
    BOOST_TEST(wide.assignment("w", r)->start == std::min(r, 3));
  }
}

BOOST_AUTO_TEST_CASE(always_gathered_parameters_are_replicated_not_split) {
  for (const auto& name : {"full", "layerwise"}) {
    const ShardingPlan plan = make_strategy(name)->make_plan(small_model(), 3);
    BOOST_TEST(plan.always_gathered() == std::set<std::string>{"emb"});
    BOOST_TEST(plan.placement("emb").placement == Placement::replicated);
    BOOST_TEST(plan.assignments("emb").empty());
  }
}

BOOST_AUTO_TEST_CASE(layerwise_places_each_layer_whole_on_one_rank) {
  for (int n : {1, 2, 3, 4, 9}) {
    const ShardingPlan plan = LayerWiseSharding().make_plan(small_model(), n);
    check_coverage(plan);
    std::map<std::string, int> owner_of_layer;
    for (const ParameterInfo& p : plan.parameters()) {
      if (p.always_gather) {
        continue;
      }
      const auto pieces = plan.assignments(p.name);
      BOOST_REQUIRE(pieces.size() == 1u);
      // Elements, not bytes / 4: the seed's defect.
      BOOST_TEST(pieces[0].size == p.numel());
      const auto [it, inserted] = owner_of_layer.emplace(p.layer, pieces[0].owner_rank);
      BOOST_TEST(it->second == pieces[0].owner_rank);  // one owner per layer
      BOOST_TEST(pieces[0].owner_rank < n);
    }
  }
}

BOOST_AUTO_TEST_CASE(layerwise_balances_largest_first_to_least_loaded) {
  // Layers of 8, 7, 6, 5, 4 KiB-ish (bytes = 4 * elements) on 2 ranks:
  // 8 -> r0, 7 -> r1, 6 -> r1 (13), 5 -> r0 (13), 4 -> r0 (tie 13/13: lowest rank) = 17 / 13.
  std::vector<ParameterInfo> layers = {param("e", {4}, "E"), param("c", {6}, "C"),
                                       param("a", {8}, "A"), param("d", {5}, "D"),
                                       param("b", {7}, "B")};
  const ShardingPlan plan = LayerWiseSharding().make_plan(layers, 2);
  BOOST_TEST(plan.placement("a").owner_rank == 0);
  BOOST_TEST(plan.placement("b").owner_rank == 1);
  BOOST_TEST(plan.placement("c").owner_rank == 1);
  BOOST_TEST(plan.placement("d").owner_rank == 0);
  BOOST_TEST(plan.placement("e").owner_rank == 0);
  BOOST_TEST(plan.owned_bytes(0) == 17 * 4);
  BOOST_TEST(plan.owned_bytes(1) == 13 * 4);
  BOOST_TEST(plan.imbalance() == 17.0 / 15.0, boost::test_tools::tolerance(1e-12));

  // Balanced by bytes, not elements: 10 fp64 (80 B) outweighs 30 fp16 (60 B) and 12 fp32 (48 B).
  const ShardingPlan by_bytes = LayerWiseSharding().make_plan(
      {param("h", {30}, "H", DType::f16), param("d", {10}, "D", DType::f64),
       param("f", {12}, "F", DType::f32)},
      2);
  BOOST_TEST(by_bytes.placement("d").owner_rank == 0);
  BOOST_TEST(by_bytes.placement("h").owner_rank == 1);
  BOOST_TEST(by_bytes.placement("f").owner_rank == 1);

  // Equal sizes: by name, each to the lowest least-loaded rank.
  const ShardingPlan ties = LayerWiseSharding().make_plan(
      {param("z", {4}, "zeta"), param("y", {4}, "beta"), param("x", {4}, "alpha")}, 2);
  BOOST_TEST(ties.placement("x").owner_rank == 0);  // alpha
  BOOST_TEST(ties.placement("y").owner_rank == 1);  // beta
  BOOST_TEST(ties.placement("z").owner_rank == 0);  // zeta
}

BOOST_AUTO_TEST_CASE(layerwise_is_a_function_of_layers_not_of_input_order) {
  const auto model = transformer_parameters(TransformerConfig::gpt2_small());
  std::vector<ParameterInfo> reversed(model.rbegin(), model.rend());
  for (int n : {2, 3, 4, 7}) {
    const ShardingPlan a = LayerWiseSharding().make_plan(model, n);
    const ShardingPlan b = LayerWiseSharding().make_plan(reversed, n);
    for (const ParameterInfo& p : model) {
      BOOST_TEST(a.placement(p.name).owner_rank == b.placement(p.name).owner_rank);
    }
    // Greedy placement (Graham's bound): no rank exceeds the mean by more than the largest unit.
    std::int64_t total = 0, largest_rank = 0;
    for (int r = 0; r < n; ++r) {
      total += a.owned_bytes(r);
      largest_rank = std::max(largest_rank, a.owned_bytes(r));
    }
    const std::int64_t embeddings = (50257 + 1024) * 768 * 4;  // the largest unit
    BOOST_TEST(static_cast<double>(largest_rank) <= static_cast<double>(total) / n + embeddings);
    BOOST_TEST(a.imbalance() == static_cast<double>(largest_rank) * n / static_cast<double>(total),
               boost::test_tools::tolerance(1e-12));
    BOOST_TEST((a == LayerWiseSharding().make_plan(model, n)));  // repeatable
  }
  // Layers made equal (no embeddings): the blocks spread evenly over 4 ranks.
  TransformerConfig tiny = TransformerConfig::gpt2_small();
  tiny.vocab = 1;
  tiny.max_positions = 1;
  std::vector<ParameterInfo> blocks;
  for (const auto& p : transformer_parameters(tiny)) {
    if (p.layer.rfind("h.", 0) == 0) {
      blocks.push_back(p);
    }
  }
  const ShardingPlan even = LayerWiseSharding().make_plan(blocks, 4);
  BOOST_TEST(even.imbalance() == 1.0, boost::test_tools::tolerance(1e-12));
}

BOOST_AUTO_TEST_CASE(parameters_without_a_layer_are_their_own_unit) {
  const ShardingPlan plan =
      LayerWiseSharding().make_plan({param("a", {8}), param("b", {8}), param("c", {8})}, 3);
  std::set<int> owners;
  for (const auto& name : {"a", "b", "c"}) {
    owners.insert(plan.placement(name).owner_rank);
  }
  BOOST_TEST(owners.size() == 3u);
}

BOOST_AUTO_TEST_CASE(glob_patterns) {
  BOOST_TEST(glob_match("h.*", "h.11"));
  BOOST_TEST(!glob_match("h.*", "xh.1"));
  BOOST_TEST(glob_match("*attn*", "layers.3.attn.q"));
  BOOST_TEST(!glob_match("attn", "layers.3.attn"));  // whole names, not substrings
  BOOST_TEST(glob_match("layers.?", "layers.7"));
  BOOST_TEST(!glob_match("layers.?", "layers.17"));
  BOOST_TEST(glob_match("*", ""));
  BOOST_TEST(glob_match("a*b*c", "axxbyyc"));
  BOOST_TEST(!glob_match("a*b*c", "axxbyy"));
  BOOST_TEST(glob_match("**x", "x"));
}

BOOST_AUTO_TEST_CASE(hybrid_places_by_pattern) {
  std::vector<ParameterInfo> model = {
      param("emb", {100, 4}, "embeddings"), param("h0.w", {16, 16}, "h.0"),
      param("h1.w", {16, 16}, "h.1"),       param("head.w", {10, 16}, "lm_head"),
      param("norm", {16}, "final_norm"),    param("pos", {4}, "embed_pos", DType::f32, true)};
  const HybridSharding hybrid({"h.*"}, {"lm_head", "embed*", "h.1"});
  for (int n : {1, 2, 3, 4, 5}) {
    const ShardingPlan plan = hybrid.make_plan(model, n);
    BOOST_TEST(plan.strategy() == "hybrid");
    check_coverage(plan);
    BOOST_TEST(plan.placement("h0.w").placement == Placement::sharded);
    BOOST_TEST(plan.placement("h1.w").placement == Placement::sharded);  // full-shard wins
    BOOST_TEST(plan.placement("head.w").placement == Placement::whole);
    BOOST_TEST(plan.placement("emb").placement == Placement::whole);
    BOOST_TEST(plan.placement("norm").placement == Placement::sharded);  // unmatched: full
    BOOST_TEST(plan.placement("pos").placement == Placement::replicated);
  }
  // The whole layers avoid the ranks the sharded part loads most: with 3 ranks the sharded
  // 16*16*2 + 16 elements leave rank 2 lightest, so the largest whole layer (emb) goes there.
  const ShardingPlan three = hybrid.make_plan(model, 3);
  BOOST_TEST(three.placement("emb").owner_rank == 2);
  // A pattern that matches no layer is refused, naming it and the layers (not full sharding).
  BOOST_CHECK_EXCEPTION(HybridSharding({}, {"layers.*"}).make_plan(model, 2), Error,
                        (MessageHas{{"layer-wise pattern 'layers.*'", "matches no layer",
                                     "embeddings", "h.0", "lm_head"}}));
  BOOST_CHECK_EXCEPTION(HybridSharding({"h.*", "blocks*"}, {"lm_head"}).make_plan(model, 2), Error,
                        (MessageHas{{"full-shard pattern 'blocks*'", "matches no layer"}}));
}

BOOST_AUTO_TEST_CASE(factory_builds_strategies_by_name) {
  BOOST_TEST(make_strategy("full")->name() == "full");
  BOOST_TEST(make_strategy("Full")->name() == "full");
  BOOST_TEST(make_strategy("layerwise")->name() == "layerwise");
  BOOST_TEST(make_strategy("layer-wise")->name() == "layerwise");
  BOOST_TEST(make_strategy("LayerWise")->name() == "layerwise");
  StrategyOptions options;
  options.full_shard_patterns = {"h.*"};
  options.layer_wise_patterns = {"lm_head"};
  const auto hybrid = make_strategy("hybrid", options);
  BOOST_TEST(hybrid->name() == "hybrid");
  const auto* typed = dynamic_cast<const HybridSharding*>(hybrid.get());
  BOOST_REQUIRE(typed != nullptr);
  BOOST_TEST(typed->layer_wise_patterns() == std::vector<std::string>{"lm_head"});
  BOOST_CHECK_EXCEPTION(make_strategy("zero3"), Error,
                        (MessageHas{{"'zero3'", "full", "layerwise", "hybrid"}}));
  BOOST_CHECK_EXCEPTION(make_strategy("hybrid"), Error, (MessageHas{{"at least one"}}));
  BOOST_CHECK_EXCEPTION(make_strategy("full", options), Error, (MessageHas{{"no layer patterns"}}));
  BOOST_CHECK_EXCEPTION(HybridSharding({""}, {}), Error, (MessageHas{{"empty pattern"}}));
}

BOOST_AUTO_TEST_CASE(invalid_input_names_the_parameter_and_the_reason) {
  for (const auto& name : {"full", "layerwise"}) {
    const auto strategy = make_strategy(name);
    BOOST_CHECK_EXCEPTION(strategy->make_plan({}, 2), Error, (MessageHas{{"empty"}}));
    BOOST_CHECK_EXCEPTION(strategy->make_plan(small_model(), 0), Error,
                          (MessageHas{{"world size 0"}}));
    BOOST_CHECK_EXCEPTION(strategy->make_plan(small_model(), -3), Error,
                          (MessageHas{{"world size -3"}}));
    BOOST_CHECK_EXCEPTION(
        strategy->make_plan({param("a", {2}), param("b", {2}), param("a", {3})}, 2), Error,
        (MessageHas{{"'a'", "twice", "#0", "#2"}}));
    BOOST_CHECK_EXCEPTION(strategy->make_plan({param("a", {2}), param("w", {4, 0})}, 2), Error,
                          (MessageHas{{"'w'", "dimension 1 is 0", ">= 1"}}));
    BOOST_CHECK_EXCEPTION(strategy->make_plan({param("neg", {-5})}, 2), Error,
                          (MessageHas{{"'neg'", "dimension 0 is -5"}}));
    BOOST_CHECK_EXCEPTION(strategy->make_plan({param("", {5})}, 2), Error,
                          (MessageHas{{"#0", "empty name"}}));
    BOOST_CHECK_EXCEPTION(strategy->make_plan({param("odd", {5}, "", static_cast<DType>(42))}, 2),
                          Error, (MessageHas{{"'odd'", "unknown dtype", "42"}}));
    BOOST_CHECK_EXCEPTION(strategy->make_plan({param("huge", {1LL << 40, 1LL << 40})}, 2), Error,
                          (MessageHas{{"'huge'", "overflows"}}));
  }
  // A plan rejects inconsistent placements too (e.g. a hand-edited file).
  BOOST_CHECK_EXCEPTION(ShardingPlan("x", 2, {param("w", {4})}, {{Placement::whole, 2}}), Error,
                        (MessageHas{{"'w'", "rank 2", "[0, 2)"}}));
  BOOST_CHECK_EXCEPTION(
      ShardingPlan("x", 2, {param("w", {4}, "", DType::f32, true)}, {{Placement::sharded, -1}}),
      Error, (MessageHas{{"'w'", "always_gather", "replicated"}}));
  const ShardingPlan plan = FullSharding().make_plan(small_model(), 2);
  BOOST_CHECK_EXCEPTION(plan.assignments("nope"), Error, (MessageHas{{"'nope'"}}));
  BOOST_CHECK_EXCEPTION(plan.assignment("l0.w", 2), Error, (MessageHas{{"rank 2"}}));
}

BOOST_AUTO_TEST_CASE(plan_json_round_trip) {
  for (const auto& name : {"full", "layerwise"}) {
    const ShardingPlan plan = make_strategy(name)->make_plan(small_model(), 3);
    const ShardingPlan back = plan_from_json(plan_to_json(plan), "test");
    BOOST_TEST((back == plan));
  }
  // A frozen parameter says so ("trainable": false); the others are written as before.
  auto parameters = small_model();
  parameters.back().trainable = false;
  const ShardingPlan frozen = make_strategy("full")->make_plan(parameters, 2);
  const std::string text = plan_to_json(frozen);
  BOOST_TEST((plan_from_json(text, "test") == frozen));
  BOOST_TEST((plan_from_json(text, "test") != make_strategy("full")->make_plan(small_model(), 2)));
  BOOST_TEST(text.find("\"trainable\":false") != std::string::npos);
  BOOST_TEST(text.find("\"trainable\":true") == std::string::npos);
  BOOST_CHECK_EXCEPTION(plan_from_json("{\"format\": \"other\"}", "x.json"), Error,
                        (MessageHas{{"x.json", "not a sharding plan"}}));
  BOOST_CHECK_EXCEPTION(plan_from_json("{nope", "x.json"), Error,
                        (MessageHas{{"x.json", "not valid JSON"}}));
}

// A JSON plan is read strictly: what the reader cannot take exactly is refused, naming the field,
// never truncated, rounded or ignored.
BOOST_AUTO_TEST_CASE(plan_json_is_read_strictly) {
  const std::string good =
      plan_to_json(ShardingPlan("full", 2, {param("w", {4}), param("v", {2, 3}, "l")},
                                {{Placement::sharded, -1}, {Placement::whole, 1}}));
  BOOST_REQUIRE((plan_from_json(good, "p.json").world_size() == 2));
  // good with one piece of text replaced (which must be there).
  const auto edited = [&good](const std::string& from, const std::string& to) {
    const std::size_t at = good.find(from);
    BOOST_REQUIRE_MESSAGE(at != std::string::npos, from);
    std::string text = good;
    return text.replace(at, from.size(), to);
  };
  const auto refused = [](const std::string& text, const std::vector<std::string>& fragments) {
    try {
      plan_from_json(text, "p.json");
      BOOST_ERROR("accepted: " << text);
    } catch (const Error& error) {
      const std::string message = error.what();
      BOOST_TEST(MessageHas{fragments}(error), message);
      BOOST_TEST(message.size() < 400u, message);
    }
  };
  const std::string ranks = "\"world_size\" must be an integer from 1 to 2147483647, not ";
  refused(edited("\"world_size\":2", "\"world_size\":8.9"), {"p.json", ranks + "8.9"});
  refused(edited("\"world_size\":2", "\"world_size\":4294967304"), {ranks + "4294967304"});
  refused(edited("\"world_size\":2", "\"world_size\":18446744073709551615"), {ranks});
  refused(edited("\"world_size\":2", "\"world_size\":\"2\""), {ranks + "\"2\""});
  refused(edited("\"world_size\":2", "\"world_size\":0"), {ranks + "0"});
  refused(edited(",\"world_size\":2", ""), {"p.json has no \"world_size\""});
  refused(edited("\"format_version\":1", "\"format_version\":1.99"), {"format version 1.99"});
  refused(edited("\"format_version\":1", "\"format_version\":1.0"), {"format version 1.0"});
  refused(edited("\"format_version\":1", "\"format_version\":\"1\""), {"format version \"1\""});
  refused(edited("\"strategy\"", "\"comment\":\"hi\",\"strategy\""),
          {"unknown field \"comment\"", "format, format_version, parameters"});
  refused(edited("\"world_size\":2", "\"world_size\":2,\"world_size\":8"),
          {"p.json has the key \"world_size\" twice in one object"});
  refused(edited("\"strategy\":\"full\"", "\"strategy\":\"full sharding!\""),
          {"strategy name", "\"full sharding!\""});
  refused(edited("\"strategy\":\"full\"", "\"strategy\":7"), {"\"strategy\" must be a string"});
  // In a parameter.
  refused(edited("\"name\":\"w\"", "\"nam\":\"x\",\"name\":\"w\""),
          {"parameter #0 \"w\" has an unknown field \"nam\""});
  refused(edited("\"name\":\"v\"", "\"name\":\"v\",\"name\":\"u\""), {"key \"name\" twice"});
  refused(edited("\"owner_rank\":1", "\"owner_rank\":1.5"),
          {"parameter #1 \"v\": \"owner_rank\" must be an integer", "not 1.5"});
  refused(edited("\"owner_rank\":1", "\"owner_rank\":4294967297"), {"not 4294967297"});
  refused(edited("\"owner_rank\":1", "\"owner_rank\":2"), {"'v'", "rank 2", "[0, 2)"});
  refused(edited("\"shape\":[4]", "\"shape\":[4.0]"), {"dimension 0 must be an integer", "4.0"});
  refused(edited("\"shape\":[4]", "\"shape\":[18446744073709551616]"), {"dimension 0"});
  refused(edited("\"shape\":[4]", "\"shape\":[0]"), {"dimension 0", "not 0"});
  refused(edited("\"always_gather\":false", "\"always_gather\":0"), {"true or false, not 0"});
  refused(edited("\"placement\":\"sharded\"", "\"placement\":\"shard\""),
          {"unknown placement 'shard'"});
  refused(edited("\"dtype\":\"fp32\"", "\"dtype\":\"fp8\""), {"#0 \"w\"", "fp8"});
  // Values quoted in messages are excerpts, however long.
  const std::string huge(1000000, 'x');
  refused(edited("\"world_size\":2", "\"world_size\":\"" + huge + "\""), {ranks + "\"xxxx"});
  refused(edited("\"placement\":\"sharded\"", "\"placement\":\"" + huge + "\""), {"\"xxxx"});
  refused(edited("\"dtype\":\"fp32\"", "\"dtype\":\"" + huge + "\""), {"\"xxxx"});
  refused(edited("\"name\":\"w\"", "\"name\":\"" + huge + "\""), {"1000000 bytes", "at most 1024"});
  refused(edited("\"strategy\":\"full\"", "\"strategy\":\"" + huge + "\""), {"\"xxxx"});
  refused(edited("\"strategy\"", "\"" + huge + "\":1,\"strategy\""), {"unknown field \"xxxx"});
}

// A name with a NUL byte cannot be held by an HDF5 plan, a checkpoint or the C API: no plan has
// one, so none is written that cannot be read back.
BOOST_AUTO_TEST_CASE(names_with_nul_bytes_are_refused) {
  const std::string name("a\0b", 3);
  BOOST_CHECK_EXCEPTION(FullSharding().make_plan({param("w", {4}), param(name, {2})}, 2), Error,
                        (MessageHas{{"parameter #1", "NUL byte in its name (byte 1)"}}));
  BOOST_CHECK_EXCEPTION(FullSharding().make_plan({param("w", {4}, std::string("l\0", 2))}, 2),
                        Error, (MessageHas{{"parameter #0", "NUL byte in its layer (byte 1)"}}));
  const std::string text = plan_to_json(FullSharding().make_plan({param("aXb", {4})}, 2));
  std::string with_nul = text;
  with_nul.replace(with_nul.find("aXb"), 3, "a\\u0000b");
  BOOST_CHECK_EXCEPTION(plan_from_json(with_nul, "p.json"), Error,
                        (MessageHas{{"p.json", "NUL byte in its name"}}));
}

BOOST_AUTO_TEST_CASE(model_description_json) {
  const std::string good = R"({"parameters": [
      {"name": "w", "shape": [4, 8], "dtype": "bf16", "layer": "l0"},
      {"name": "b", "shape": [8], "layer": "l0", "always_gather": true},
      {"name": "s", "shape": [], "trainable": false}]})";
  const auto parameters = parameters_from_json(good, "m.json");
  BOOST_REQUIRE(parameters.size() == 3u);
  BOOST_TEST(parameters[0].trainable);
  BOOST_TEST(!parameters[2].trainable);
  BOOST_TEST(describe(parameters[2]).find(" frozen") != std::string::npos);
  BOOST_TEST((parameters[0].dtype == DType::bf16));
  BOOST_TEST(parameters[0].bytes() == 64);
  BOOST_TEST(parameters[1].always_gather);
  BOOST_TEST(parameters[2].numel() == 1);
  BOOST_TEST((parameters_from_json(parameters_to_json(parameters), "again") == parameters));

  BOOST_CHECK_EXCEPTION(
      parameters_from_json(R"({"parameters": [{"name": "w", "shape": [4], "dtype": "fp8"}]})",
                           "m.json"),
      Error, (MessageHas{{"m.json", "#0 'w'", "fp8"}}));
  BOOST_CHECK_EXCEPTION(parameters_from_json(R"({"parameters": [{"name": "w"}]})", "m.json"), Error,
                        (MessageHas{{"'w'", "\"shape\""}}));
  BOOST_CHECK_EXCEPTION(
      parameters_from_json(R"({"parameters": [{"name": "w", "shape": [4], "layr": "x"}]})",
                           "m.json"),
      Error, (MessageHas{{"'w'", "unknown field \"layr\""}}));
  BOOST_CHECK_EXCEPTION(
      parameters_from_json(R"({"parameters": [{"name": "w", "shape": [4, 0]}]})", "m.json"), Error,
      (MessageHas{{"m.json", "'w'", "dimension 1 is 0"}}));
  BOOST_CHECK_EXCEPTION(
      parameters_from_json(R"({"parameters": [{"name": "w", "shape": [4]}], "layers": 2})",
                           "m.json"),
      Error, (MessageHas{{"m.json", "unknown top-level field \"layers\"", "\"parameters\""}}));
  BOOST_CHECK_EXCEPTION(parameters_from_json(R"({"parameters": []})", "m.json"), Error,
                        (MessageHas{{"m.json", "empty"}}));
  BOOST_CHECK_EXCEPTION(parameters_from_json(R"([1, 2])", "m.json"), Error,
                        (MessageHas{{"\"parameters\" array"}}));
  // Hostile nesting is refused while parsing (100,000 levels crashed the error message that
  // printed the value), and a value quoted in a message is a short excerpt.
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  BOOST_CHECK_EXCEPTION(
      parameters_from_json(R"({"parameters": [{"name": "w", "shape": )" + deep + "}]}", "m.json"),
      Error, (MessageHas{{"m.json nests deeper than 32 levels"}}));
  try {
    parameters_from_json(
        R"({"parameters": [{"name": "w", "shape": [")" + std::string(100000, 'x') + R"("]}]})",
        "m.json");
    BOOST_ERROR("a string extent was accepted");
  } catch (const Error& error) {
    const std::string message = error.what();
    BOOST_TEST(message.find("must hold integers, not \"xxxx") != std::string::npos, message);
    BOOST_TEST(message.size() < 300, message.size());
  }
}

BOOST_AUTO_TEST_CASE(transformer_presets_have_the_published_sizes) {
  const auto count = [](const std::vector<ParameterInfo>& parameters) {
    std::int64_t total = 0;
    for (const auto& p : parameters)
      total += p.numel();
    return total;
  };
  const auto gpt2 = transformer_parameters(TransformerConfig::gpt2_small());
  BOOST_TEST(count(gpt2) == 124439808);  // GPT-2 small, tied LM head
  BOOST_TEST(gpt2.size() == 2u + 12u * 12u + 2u);
  const auto llama = transformer_parameters(TransformerConfig::llama2_7b());
  BOOST_TEST(count(llama) == 6738415616LL);  // Llama-2 7B
  TransformerConfig gqa = TransformerConfig::llama2_7b();
  gqa.kv_heads = 8;  // 1024-wide k and v
  BOOST_TEST(count(transformer_parameters(gqa)) == 6738415616LL - 32LL * 2 * 4096 * 3072);
  gqa.kv_heads = 5;
  BOOST_CHECK_EXCEPTION(transformer_parameters(gqa), Error, (MessageHas{{"kv_heads (5)"}}));
  TransformerConfig bad = TransformerConfig::gpt2_small();
  bad.heads = 7;
  BOOST_CHECK_EXCEPTION(transformer_parameters(bad), Error, (MessageHas{{"multiple of heads"}}));

  const auto config = transformer_config_from_json(
      R"({"family": "llama", "layers": 2, "hidden": 64, "heads": 4, "vocab": 100})", "c.json");
  BOOST_TEST(config.layers == 2);
  BOOST_TEST(config.tie_embeddings == false);
  BOOST_CHECK_EXCEPTION(transformer_config_from_json(R"({"family": "llama", "layyers": 2})", "c"),
                        Error, (MessageHas{{"unknown field \"layyers\""}}));
  // Sizes are whole numbers in range: 2^32 + 8 layers is refused, not 8; 8.9 is not 8.
  BOOST_CHECK_EXCEPTION(
      transformer_config_from_json(R"({"family": "gpt2", "layers": 4294967304})", "c.json"), Error,
      (MessageHas{{"c.json: \"layers\" must be an integer", "not 4294967304"}}));
  BOOST_CHECK_EXCEPTION(
      transformer_config_from_json(R"({"family": "gpt2", "heads": 8.9})", "c.json"), Error,
      (MessageHas{{"\"heads\" must be an integer", "not 8.9"}}));
}

// fuzz_model reports each of these before the fix (inputs in fuzz/corpus/model/regressions):
// 4294967298 layers were read as 2, 2,000,000,000 layers filled all memory, a hidden size of 2^62
// overflowed 4 * hidden (undefined behaviour).
BOOST_AUTO_TEST_CASE(transformer_configs_are_whole_numbers_in_range) {
  const auto config = [](const std::string& fields) {
    return transformer_config_from_json("{\"family\": \"gpt2\", " + fields + "}", "c.json");
  };
  BOOST_CHECK_EXCEPTION(config(R"("layers": 4294967298)"), Error,
                        (MessageHas{{"c.json: \"layers\" must be an integer from -2147483648 to "
                                     "2147483647, not 4294967298"}}));
  BOOST_CHECK_EXCEPTION(config(R"("hidden": 2.5)"), Error,
                        (MessageHas{{"c.json: \"hidden\" must be an integer", "not 2.5"}}));
  BOOST_CHECK_EXCEPTION(config(R"("dtype": "fp7")"), Error,
                        (MessageHas{{"c.json: \"dtype\": unknown dtype 'fp7'"}}));
  BOOST_CHECK_EXCEPTION(
      transformer_parameters(config(R"("layers": 2000000000)")), Error,
      (MessageHas{{"gpt2 preset: layers must be from 1 to 65536, got 2000000000"}}));
  BOOST_CHECK_EXCEPTION(
      transformer_parameters(config(R"("hidden": 4611686018427387904, "heads": 1)")), Error,
      (MessageHas{{"hidden must be from 1 to 1099511627776, got 4611686018427387904"}}));
  BOOST_CHECK_EXCEPTION(
      transformer_parameters(config(R"("intermediate": -1)")), Error,
      (MessageHas{
          {"intermediate must be from 0 to 1099511627776 (0: the family's default), got -1"}}));
  BOOST_CHECK_EXCEPTION(transformer_parameters(config(R"("kv_heads": 13)")), Error,
                        (MessageHas{{"kv_heads must be from 0 to 12 (0: heads), got 13"}}));
  BOOST_TEST(transformer_parameters(config(R"("layers": 65536, "hidden": 8, "heads": 2)")).size() ==
             2u + 65536u * 12u + 2u);
}

// LayerWise and Hybrid place units without a load per rank (runs of the sharded part's loads);
// the placement is the greedy rule's, rank by rank: checked against the rule written plainly
// (a vector of loads and the lowest least-loaded rank for each unit).
BOOST_AUTO_TEST_CASE(whole_units_are_placed_by_the_plain_greedy_rule) {
  const auto gpt2 = transformer_parameters(TransformerConfig::gpt2_small());
  TransformerConfig small_llama = TransformerConfig::llama2_7b();
  small_llama.layers = 5;
  small_llama.hidden = 64;
  small_llama.heads = 4;
  small_llama.vocab = 1000;
  const auto llama = transformer_parameters(small_llama);
  // Equal loads everywhere: sharded pieces leave the trailing ranks lighter, and units as heavy as
  // a piece tie with ranks that got none (the lowest rank must win).
  std::vector<ParameterInfo> ties = {param("s0", {2}, "s0"), param("s1", {5}, "s1")};
  for (int u = 0; u < 12; ++u) {
    ties.push_back(param("u" + std::to_string(u), {1 + u % 2}, "u" + std::to_string(u)));
  }
  struct Case {
    const std::vector<ParameterInfo>* model;
    std::vector<std::string> full, layer_wise;  // both empty: LayerWise
  };
  const std::vector<Case> cases = {{&gpt2, {}, {}},
                                   {&llama, {}, {}},
                                   {&gpt2, {"h.1*"}, {"h.*", "embeddings"}},
                                   {&llama, {"layers.0"}, {"*"}},
                                   {&llama, {"embeddings", "lm_head"}, {"layers.*"}},
                                   {&ties, {"s*"}, {"u*"}},
                                   {&ties, {}, {}}};
  for (const Case& c : cases) {
    const auto& model = *c.model;
    for (int world : {1, 2, 3, 7, 16, 33, 100, 1000, 4097}) {
      const ShardingPlan plan = c.full.empty() && c.layer_wise.empty()
                                    ? LayerWiseSharding().make_plan(model, world)
                                    : HybridSharding(c.full, c.layer_wise).make_plan(model, world);
      // The rule written plainly.
      std::vector<std::int64_t> load(static_cast<std::size_t>(world), 0);
      std::map<std::string, std::int64_t> units;
      for (std::size_t i = 0; i < model.size(); ++i) {
        if (plan.placements()[i].placement == Placement::sharded) {
          for (int r = 0; r < world; ++r) {
            load[static_cast<std::size_t>(r)] +=
                shard_range(model[i].numel(), world, r).size * model[i].bytes() / model[i].numel();
          }
        } else if (plan.placements()[i].placement == Placement::whole) {
          units[model[i].unit()] += model[i].bytes();
        }
      }
      std::vector<std::pair<std::string, std::int64_t>> order(units.begin(), units.end());
      std::stable_sort(order.begin(), order.end(),
                       [](const auto& a, const auto& b) { return a.second > b.second; });
      std::map<std::string, int> owner;
      for (const auto& [unit, bytes] : order) {
        const auto lightest = std::min_element(load.begin(), load.end());
        owner[unit] = static_cast<int>(lightest - load.begin());
        *lightest += bytes;
      }
      for (std::size_t i = 0; i < model.size(); ++i) {
        if (plan.placements()[i].placement == Placement::whole) {
          BOOST_TEST(plan.placements()[i].owner_rank == owner[model[i].unit()],
                     model[i].name << " at " << world << " ranks");
        }
      }
    }
  }
}
