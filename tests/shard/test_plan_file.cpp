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
  auto fine_tuned = small_model();  // frozen parameters: a "trainable" dataset
  fine_tuned.front().trainable = false;
  return {FullSharding().make_plan(small_model(), 3), FullSharding().make_plan(fine_tuned, 2),
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
  BOOST_CHECK_EXCEPTION(load_plan(text), Error,
                        (MessageHas{{"text.h5", "is not an fsdp sharding plan"}}));

  // An HDF5 file without fsdp's header: another file, or a plan of format version 1 (no longer
  // read: its variable-length strings could crash HDF5 on a damaged file). Refused before HDF5
  // parses it, saying how to make the plan again.
  const std::string other = dir.file("other.h5");
  const hid_t file = H5Fcreate(other.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  BOOST_REQUIRE(file >= 0);
  BOOST_TEST(H5Fclose(file) >= 0);
  BOOST_CHECK_EXCEPTION(load_plan(other), Error,
                        (MessageHas{{"other.h5", "format version 1", "fsdp-plan ... --output",
                                     "--output plan.json"}}));

  // A newer format version.
  std::string json = plan_to_json(plan);
  const std::string key = "\"format_version\":1";
  BOOST_REQUIRE(json.find(key) != std::string::npos);
  json.replace(json.find(key), key.size(), "\"format_version\":2");
  const std::string newer = dir.file("newer.json");
  std::ofstream(newer) << json;
  BOOST_CHECK_EXCEPTION(load_plan(newer), Error, (MessageHas{{"newer.json", "version 2"}}));
}

namespace {

std::string file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

void write_bytes(const std::string& path, const std::string& bytes) {
  // A new file each time: ext4 flushes a file truncated and written again when it is closed, which
  // made thousands of rewrites take a minute.
  fs::remove(path);
  std::ofstream(path, std::ios::binary | std::ios::trunc)
      .write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// A predicate for BOOST_CHECK_EXCEPTION: an io Error whose message has one of the fragments.
struct IoErrorWithAnyOf {
  std::vector<std::string> fragments;
  bool operator()(const Error& error) const {
    const std::string message = error.what();
    for (const std::string& fragment : fragments) {
      if (error.kind() == ErrorKind::io && message.find(fragment) != std::string::npos) {
        return true;
      }
    }
    BOOST_TEST_MESSAGE("unexpected error: " << message);
    return false;
  }
};

}  // namespace

// HDF5 plans carry a checksum of every byte: one flipped bit anywhere, a truncation or appended
// bytes are reported as damage before HDF5 parses anything (a flipped bit in a format 1 plan
// crashed inside HDF5 reading a variable-length string from the global heap).
BOOST_AUTO_TEST_CASE(damaged_hdf5_plans_are_reported_never_parsed) {
  const TemporaryDirectory dir;
  const auto gpt2 = transformer_parameters(TransformerConfig::gpt2_small());
  const std::string path = dir.file("plan.h5");
  save_plan_hdf5(path, HybridSharding({"h.*"}, {"embeddings"}).make_plan(gpt2, 8));
  const std::string good = file_bytes(path);
  BOOST_REQUIRE(good.size() > 512u);
  BOOST_TEST(good.compare(0, 8, "fsdpplan") == 0);
  const std::string damaged = dir.file("damaged.h5");
  const IoErrorWithAnyOf damage{{"damaged.h5' is damaged", "damaged.h5' is not an fsdp"}};
  // One bit of every byte: bit i % 8 of byte i. Every damaged byte takes the same path (the
  // checksum refuses it before HDF5 reads anything), so the sanitizer build, where this loop took
  // 11 of the program's 13 s, damages every 16th byte (bit (i / 16) % 8 of byte i) and still walks
  // that path throughout.
#if defined(__SANITIZE_ADDRESS__)
  const std::size_t stride = 16;
#else
  const std::size_t stride = 1;
#endif
  for (std::size_t i = 0; i < good.size(); i += stride) {
    std::string bytes = good;
    bytes[i] = static_cast<char>(bytes[i] ^ (1 << ((i / stride) % 8)));
    write_bytes(damaged, bytes);
    BOOST_CHECK_EXCEPTION(load_plan(damaged), Error, damage);
  }
  for (std::size_t length : {std::size_t{0}, std::size_t{7}, std::size_t{511}, std::size_t{512},
                             good.size() / 2, good.size() - 1}) {
    write_bytes(damaged, good.substr(0, length));
    BOOST_CHECK_EXCEPTION(load_plan(damaged), Error, damage);
  }
  write_bytes(damaged, good + "x");
  BOOST_CHECK_EXCEPTION(load_plan(damaged), Error,
                        (MessageHas{{"is damaged: its header says", "truncated or appended"}}));
  write_bytes(damaged, good);
  BOOST_TEST((load_plan(damaged) == load_plan(path)));
}

namespace {

// Edits an HDF5 plan with HDF5 itself (its user block is left alone), then seals the bytes again
// (seal_plan_hdf5_bytes), as a hostile writer would: the checks behind the checksum must hold.
template <class Edit>
void edit_and_seal(const std::string& path, Edit edit) {
  const hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  BOOST_REQUIRE(file >= 0);
  edit(file);
  BOOST_REQUIRE(H5Fclose(file) >= 0);
  std::string bytes = file_bytes(path);
  seal_plan_hdf5_bytes(bytes);
  write_bytes(path, bytes);
}

// Replaces dataset name by an unwritten one of `length` entries of `type` (no storage: the file
// stays small), with an optional creation property list.
void replace_dataset(hid_t file, const char* name, hid_t type, hsize_t length,
                     hid_t creation = H5P_DEFAULT) {
  BOOST_REQUIRE(H5Ldelete(file, name, H5P_DEFAULT) >= 0);
  const hid_t space = H5Screate_simple(1, &length, nullptr);
  const hid_t dataset = H5Dcreate2(file, name, type, space, H5P_DEFAULT, creation, H5P_DEFAULT);
  BOOST_REQUIRE(dataset >= 0);
  BOOST_REQUIRE(H5Dclose(dataset) >= 0);
  BOOST_REQUIRE(H5Sclose(space) >= 0);
}

void replace_attribute(hid_t file, const char* name, hid_t type, const void* value) {
  BOOST_REQUIRE(H5Adelete(file, name) >= 0);
  const hid_t space = H5Screate(H5S_SCALAR);
  const hid_t attribute = H5Acreate2(file, name, type, space, H5P_DEFAULT, H5P_DEFAULT);
  BOOST_REQUIRE(attribute >= 0);
  BOOST_REQUIRE(H5Awrite(attribute, type, value) >= 0);
  BOOST_REQUIRE(H5Aclose(attribute) >= 0);
  BOOST_REQUIRE(H5Sclose(space) >= 0);
}

}  // namespace

// A plan with a valid checksum but hostile contents: every size is checked against the file's
// length before anything is allocated (a 10 KB plan declaring a 2^31-long dataset allocated
// 16 GB), and every type against the one fsdp writes.
BOOST_AUTO_TEST_CASE(hostile_hdf5_plans_behind_a_valid_checksum_are_refused) {
  const TemporaryDirectory dir;
  const ShardingPlan plan = LayerWiseSharding().make_plan(small_model(), 3);
  int k = 0;
  const auto refused = [&](auto edit, const std::vector<std::string>& fragments) {
    const std::string path = dir.file("hostile" + std::to_string(k++) + ".h5");
    save_plan_hdf5(path, plan);
    edit_and_seal(path, edit);
    BOOST_TEST(fs::file_size(path) < 100000u);
    BOOST_CHECK_EXCEPTION(load_plan(path), Error, (MessageHas{fragments}));
  };
  const hsize_t huge = hsize_t{1} << 31;
  const auto names_type = [](std::size_t bytes) {
    const hid_t type = H5Tcopy(H5T_C_S1);
    BOOST_REQUIRE(H5Tset_size(type, bytes) >= 0);
    return type;
  };
  refused([&](hid_t f) { replace_dataset(f, "names", names_type(8), huge); },
          {"dataset 'names' is not a plain 1-D dataset of at most"});
  refused([&](hid_t f) { replace_dataset(f, "numel", H5T_STD_I64LE, huge); },
          {"dataset 'numel' is not a plain 1-D dataset of at most"});
  refused([&](hid_t f) { replace_dataset(f, "names", names_type(1u << 30), 7); },
          {"dataset 'names' is not 7 fixed-length strings of at most 1025 bytes"});
  refused(
      [&](hid_t f) {
        const hid_t variable = H5Tcopy(H5T_C_S1);
        BOOST_REQUIRE(H5Tset_size(variable, H5T_VARIABLE) >= 0);
        replace_dataset(f, "layers", variable, 7);
      },
      {"dataset 'layers' is not 7 fixed-length strings"});
  refused([&](hid_t f) { replace_dataset(f, "owner_rank", H5T_IEEE_F64LE, 7); },
          {"dataset 'owner_rank' is not of the integer type fsdp writes"});
  refused(
      [&](hid_t f) {
        const hid_t creation = H5Pcreate(H5P_DATASET_CREATE);
        const hsize_t chunk = 7;
        BOOST_REQUIRE(H5Pset_chunk(creation, 1, &chunk) >= 0);
        BOOST_REQUIRE(H5Pset_deflate(creation, 9) >= 0);
        replace_dataset(f, "numel", H5T_STD_I64LE, 7, creation);
      },
      {"dataset 'numel' is not a plain 1-D dataset"});
  refused(
      [&](hid_t f) {
        const std::int32_t ndims[7] = {1 << 30, 1 << 30, 1 << 30, 1 << 30, 1, 1, 1};
        const hid_t dataset = H5Dopen2(f, "ndims", H5P_DEFAULT);
        BOOST_REQUIRE(H5Dwrite(dataset, H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, ndims) >=
                      0);
        BOOST_REQUIRE(H5Dclose(dataset) >= 0);
      },
      {"dataset 'dims' should hold 4294967299 entries"});
  refused(
      [&](hid_t f) {
        const double world = 8.9;
        replace_attribute(f, "world_size", H5T_IEEE_F64LE, &world);
      },
      {"attribute world_size is not of the integer type fsdp writes"});
  refused(
      [&](hid_t f) {
        const std::int32_t world = 2;  // owner ranks up to 2 no longer fit
        replace_attribute(f, "world_size", H5T_STD_I32LE, &world);
      },
      {"is inconsistent", "outside [0, 2)"});
  refused(
      [&](hid_t f) {
        const std::int64_t numel[7] = {33, 35, 7, 25, 5, 21, 2};
        const hid_t dataset = H5Dopen2(f, "numel", H5P_DEFAULT);
        BOOST_REQUIRE(H5Dwrite(dataset, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, numel) >=
                      0);
        BOOST_REQUIRE(H5Dclose(dataset) >= 0);
      },
      {"parameter 'scale' has 2 elements in dataset 'numel' but its shape gives 1"});
}

// Strings are fixed-length (no global heap); h5dump and h5py read them as any string.
BOOST_AUTO_TEST_CASE(hdf5_plan_strings_are_fixed_length) {
  const TemporaryDirectory dir;
  const std::string path = dir.file("plan.h5");
  save_plan_hdf5(path, LayerWiseSharding().make_plan(small_model(), 3));
  const hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  BOOST_REQUIRE(file >= 0);
  for (const char* name : {"names", "layers", "dtypes", "placements"}) {
    const hid_t dataset = H5Dopen2(file, name, H5P_DEFAULT);
    const hid_t type = H5Dget_type(dataset);
    BOOST_TEST(H5Tget_class(type) == H5T_STRING);
    BOOST_TEST(H5Tis_variable_str(type) == 0, name);
    BOOST_TEST(H5Tclose(type) >= 0);
    BOOST_TEST(H5Dclose(dataset) >= 0);
  }
  for (const char* name : {"format", "strategy"}) {
    const hid_t attribute = H5Aopen(file, name, H5P_DEFAULT);
    const hid_t type = H5Aget_type(attribute);
    BOOST_TEST(H5Tis_variable_str(type) == 0, name);
    BOOST_TEST(H5Tclose(type) >= 0);
    BOOST_TEST(H5Aclose(attribute) >= 0);
  }
  const hid_t dataset = H5Dopen2(file, "names", H5P_DEFAULT);
  const hid_t type = H5Dget_type(dataset);
  const std::size_t width = H5Tget_size(type);
  BOOST_TEST(width == 7u);  // "head.w" and its NUL
  std::string names(7 * width, '\0');
  BOOST_TEST(H5Dread(dataset, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, names.data()) >= 0);
  BOOST_TEST(names.substr(width, 4) == "l0.w");
  BOOST_TEST(H5Tclose(type) >= 0);
  BOOST_TEST(H5Dclose(dataset) >= 0);
  BOOST_TEST(H5Fclose(file) >= 0);
}
