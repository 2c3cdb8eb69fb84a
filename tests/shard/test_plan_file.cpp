// Plan files: HDF5 and JSON round trips, and clear errors for plans that do not fit the job.
#include <hdf5.h>

#include <boost/test/unit_test.hpp>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "fsdp/io/plan_file.hpp"
#include "fsdp/shard/model_description.hpp"
#include "fsdp/shard/sharding_strategy.hpp"
#include "plan_test_util.hpp"

using namespace fsdp;
using fsdp::test::MessageHas;
using fsdp::test::param;
using fsdp::test::small_model;
namespace fs = std::filesystem;

namespace {

// A fresh directory under the system's temporary directory, removed at the end of the test.
struct TemporaryDirectory {
  TemporaryDirectory() {
    std::string pattern = (fs::temp_directory_path() / "fsdp-plan-test-XXXXXX").string();
    BOOST_REQUIRE(mkdtemp(pattern.data()) != nullptr);
    path = pattern;
  }
  ~TemporaryDirectory() {
    std::error_code ignored;
    fs::remove_all(path, ignored);
  }
  std::string file(const std::string& name) const { return (path / name).string(); }
  fs::path path;
};

std::vector<ShardingPlan> sample_plans() {
  const auto gpt2 = transformer_parameters(TransformerConfig::gpt2_small());
  return {FullSharding().make_plan(small_model(), 3),
          LayerWiseSharding().make_plan(small_model(), 4),
          HybridSharding({"h.*"}, {"embeddings", "final_norm"}).make_plan(gpt2, 5),
          FullSharding().make_plan({param("scalar", {})}, 2)};  // an empty "dims" dataset
}

}  // namespace

BOOST_AUTO_TEST_CASE(hdf5_and_json_round_trips) {
  const TemporaryDirectory dir;
  int k = 0;
  for (const ShardingPlan& plan : sample_plans()) {
    for (const auto& extension : {".h5", ".json"}) {
      const std::string path = dir.file("plan" + std::to_string(k++) + extension);
      save_plan(path, plan);
      BOOST_TEST(!fs::exists(path + ".tmp"));
      const ShardingPlan back = load_plan(path);
      BOOST_TEST((back == plan));
      BOOST_TEST(back.imbalance() == plan.imbalance());
      const ShardingPlan checked = load_plan(path, plan.parameters(), plan.world_size());
      BOOST_TEST((checked == plan));
    }
  }
}

BOOST_AUTO_TEST_CASE(hdf5_layout_is_plain_for_other_readers) {
  const TemporaryDirectory dir;
  const std::string path = dir.file("plan.h5");
  save_plan_hdf5(path, FullSharding().make_plan(small_model(), 3));
  const hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  BOOST_REQUIRE(file >= 0);
  const hid_t attribute = H5Aopen(file, "world_size", H5P_DEFAULT);
  BOOST_REQUIRE(attribute >= 0);
  int world_size = 0;
  BOOST_TEST(H5Aread(attribute, H5T_NATIVE_INT, &world_size) >= 0);
  BOOST_TEST(world_size == 3);
  BOOST_TEST(H5Aclose(attribute) >= 0);
  const hid_t dataset = H5Dopen2(file, "numel", H5P_DEFAULT);
  BOOST_REQUIRE(dataset >= 0);
  std::vector<std::int64_t> numel(small_model().size());
  BOOST_TEST(H5Dread(dataset, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, numel.data()) >= 0);
  BOOST_TEST(numel[1] == 35);
  BOOST_TEST(H5Dclose(dataset) >= 0);
  BOOST_TEST(H5Fclose(file) >= 0);
}

BOOST_AUTO_TEST_CASE(a_plan_for_another_job_is_a_clear_error) {
  const TemporaryDirectory dir;
  const ShardingPlan plan = FullSharding().make_plan(small_model(), 4);
  for (const auto& extension : {".h5", ".json"}) {
    const std::string path = dir.file(std::string("plan") + extension);
    save_plan(path, plan);
    BOOST_CHECK_EXCEPTION(load_plan(path, small_model(), 8), Error,
                          (MessageHas{{path, "world size 4", "8 ranks", "--world-size 8"}}));
    auto other = small_model();
    other[3].shape = {5, 6};
    BOOST_CHECK_EXCEPTION(load_plan(path, other, 4), Error,
                          (MessageHas{{path, "#3", "'l1.w' [5, 5]", "'l1.w' [5, 6]"}}));
    other = small_model();
    other.pop_back();
    BOOST_CHECK_EXCEPTION(load_plan(path, other, 4), Error,
                          (MessageHas{{path, "7 parameters", "6", "'scale'"}}));
  }
}

BOOST_AUTO_TEST_CASE(unreadable_files_are_clear_errors) {
  const TemporaryDirectory dir;
  BOOST_CHECK_EXCEPTION(load_plan(dir.file("missing.h5")), Error, (MessageHas{{"missing.h5"}}));
  BOOST_CHECK_EXCEPTION(load_plan(dir.file("missing.json")), Error,
                        (MessageHas{{"missing.json", "cannot open"}}));
  BOOST_CHECK_EXCEPTION(load_plan(dir.file("plan.txt")), Error, (MessageHas{{".h5", ".json"}}));
  const ShardingPlan plan = FullSharding().make_plan(small_model(), 2);
  BOOST_CHECK_EXCEPTION(save_plan(dir.file("plan.txt"), plan), Error, (MessageHas{{".hdf5"}}));
  BOOST_CHECK_EXCEPTION(save_plan(dir.file("no/such/dir/plan.h5"), plan), Error,
                        (MessageHas{{"cannot create a temporary file beside", "no/such/dir/plan.h5",
                                     "does its directory exist"}}));

  const std::string text = dir.file("text.h5");
  std::ofstream(text) << "not hdf5";
  BOOST_CHECK_EXCEPTION(load_plan(text), Error, (MessageHas{{"text.h5", "not an HDF5 file"}}));

  // An HDF5 file that is not a plan.
  const std::string other = dir.file("other.h5");
  const hid_t file = H5Fcreate(other.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  BOOST_REQUIRE(file >= 0);
  BOOST_TEST(H5Fclose(file) >= 0);
  BOOST_CHECK_EXCEPTION(load_plan(other), Error, (MessageHas{{"other.h5", "'format'"}}));

  // A newer format version.
  std::string json = plan_to_json(plan);
  const std::string key = "\"format_version\":1";
  BOOST_REQUIRE(json.find(key) != std::string::npos);
  json.replace(json.find(key), key.size(), "\"format_version\":2");
  const std::string newer = dir.file("newer.json");
  std::ofstream(newer) << json;
  BOOST_CHECK_EXCEPTION(load_plan(newer), Error, (MessageHas{{"newer.json", "version 2"}}));
}
