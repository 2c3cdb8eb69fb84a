// Checkpoints built from the fuzz input through the HDF5 API (hdf5_builder.hpp): the root
// attributes, the metadata, optimizer and state groups and the model's and optimizer's tensors of
// docs/checkpoints.md, each attribute of the intended type and value or another one, each tensor
// of any type, shape, layout and storage, with its checksum right, wrong, of another type or
// missing. read_checkpoint_header must give a header or fsdp::Error and leave no HDF5 object open;
// a header it gives has a format version this fsdp reads, no variable-length string (format 1's,
// never read), every tensor built with its shape, and no negative extent; verify_checkpoint must
// refuse a tensor whose values are known and whose checksum is missing or wrong.
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "fsdp/config.hpp"
#include "fsdp/data/sampler_state.hpp"
#include "fsdp/io/checkpoint.hpp"
#include "fsdp/io/tensor_checksum.hpp"
#include "fsdp/shard/sharding_plan.hpp"
#include "fsdp/shard/sharding_strategy.hpp"
#include "hdf5_builder.hpp"
#include "kokkos_for_fuzzing.hpp"
#include "open_hdf5_objects.hpp"
#include "reader_contract.hpp"

namespace {

using fsdp_fuzz::built;
using fsdp_fuzz::built_status;
using fsdp_fuzz::BuiltDataset;
using fsdp_fuzz::FuzzInput;
using fsdp_fuzz::Handle;

// A tensor as built, for the checks.
struct BuiltTensor {
  std::string name;  // "model/w"
  BuiltDataset dataset;
  bool values_known = false;  // written whole as fp32 or fp64: the right checksum is known
  std::uint64_t right_checksum = 0;
  bool checksum_missing = false;
  bool checksum_wrong = false;  // a uint64 checksum that is not the right one
};

// The checksum fsdp computes for values stored as fp32 or fp64 (tensor_checksum.hpp).
bool checksum_of(const BuiltDataset& dataset, std::uint64_t* sum) {
  const bool fp32 = dataset.stored == fsdp_fuzz::Stored::f32le;
  const bool fp64 = dataset.stored == fsdp_fuzz::Stored::f64le;
  if (!dataset.values_written_as_is || !(fp32 || fp64)) {
    return false;
  }
  *sum = 0;
  const std::size_t size = fp32 ? 4 : 8;
  for (std::size_t i = 0; i * size < dataset.values.size(); ++i) {
    const auto index = static_cast<std::int64_t>(i);
    if (fp32) {
      float value;
      std::memcpy(&value, dataset.values.data() + i * size, size);
      *sum += fsdp::checksum_term<float>(index, value);
    } else {
      double value;
      std::memcpy(&value, dataset.values.data() + i * size, size);
      *sum += fsdp::checksum_term<double>(index, value);
    }
  }
  return true;
}

// A tensor under group (its name may add one group level), with its checksum attribute.
BuiltTensor build_tensor(FuzzInput& in, hid_t group, const std::string& prefix) {
  static const char* const names[] = {"w", "b", "layer/w", "layer/b"};
  const std::string name = names[in.choice(4)];
  if (name.rfind("layer/", 0) == 0 && H5Lexists(group, "layer", H5P_DEFAULT) <= 0) {
    Handle(built(H5Gcreate2(group, "layer", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT)), H5Gclose);
  }
  BuiltTensor tensor;
  tensor.name = prefix + name;
  const hid_t element = in.flag() ? H5T_IEEE_F64LE : H5T_IEEE_F32LE;
  tensor.dataset = fsdp_fuzz::build_dataset(in, group, name, {element, {3, 2}});
  tensor.values_known = checksum_of(tensor.dataset, &tensor.right_checksum);
  Handle dataset(built(H5Dopen2(group, name.c_str(), H5P_DEFAULT)), H5Dclose);
  const int pick = in.choice(4);  // 0 right, 1 any uint64, 2 a double, 3 none
  if (pick == 3) {
    tensor.checksum_missing = true;
    return tensor;
  }
  std::uint64_t checksum = tensor.right_checksum;
  if (pick == 1) {
    const std::vector<std::uint8_t> raw = in.bytes(8);
    std::memcpy(&checksum, raw.data(), 8);
    tensor.checksum_wrong = checksum != tensor.right_checksum;
  }
  Handle space(built(H5Screate(H5S_SCALAR)), H5Sclose);
  const hid_t stored = pick == 2 ? H5T_IEEE_F64LE : H5T_STD_U64LE;
  Handle attribute(
      built(H5Acreate2(dataset.get(), "checksum", stored, space.get(), H5P_DEFAULT, H5P_DEFAULT)),
      H5Aclose);
  built_status(H5Awrite(attribute.get(), H5T_NATIVE_UINT64, &checksum));
  return tensor;
}

// A plan of the model tensors built, as fsdp writes one; "{}" when they make no valid plan (an
// extent of 0, two of one name).
std::string plan_of(const std::vector<BuiltTensor>& tensors) {
  std::vector<fsdp::ParameterInfo> parameters;
  for (const BuiltTensor& tensor : tensors) {
    if (tensor.name.rfind("model/", 0) != 0) {
      continue;
    }
    fsdp::ParameterInfo parameter;
    parameter.name = tensor.name.substr(6);
    parameter.shape.assign(tensor.dataset.dims.begin(), tensor.dataset.dims.end());
    parameter.dtype =
        tensor.dataset.stored == fsdp_fuzz::Stored::f64le ? fsdp::DType::f64 : fsdp::DType::f32;
    parameters.push_back(parameter);
  }
  try {
    return fsdp::plan_to_json(fsdp::FullSharding().make_plan(parameters, 2));
  } catch (const fsdp::Error&) {
    return "{}";
  }
}

// The tensors as built; *variable_strings: whether any string attribute was built variable-length.
std::vector<BuiltTensor> build_checkpoint(FuzzInput& in, hid_t file, bool* variable_strings) {
  Handle root(built(H5Gopen2(file, "/", H5P_DEFAULT)), H5Gclose);
  const hid_t r = root.get();
  *variable_strings |= fsdp_fuzz::build_string_attribute(in, r, "format", "fsdp-checkpoint");
  fsdp_fuzz::build_number_attribute<std::int32_t>(in, r, "format_version", H5T_STD_I32LE,
                                                  H5T_NATIVE_INT32, fsdp::kCheckpointFormatVersion);
  *variable_strings |=
      fsdp_fuzz::build_string_attribute(in, r, "library_version", FSDP_VERSION_STRING);
  fsdp_fuzz::build_number_attribute<std::int64_t>(in, r, "step", H5T_STD_I64LE, H5T_NATIVE_INT64,
                                                  10);
  fsdp_fuzz::build_number_attribute<std::int64_t>(in, r, "epoch", H5T_STD_I64LE, H5T_NATIVE_INT64,
                                                  1);
  fsdp_fuzz::build_number_attribute<std::int32_t>(in, r, "world_size", H5T_STD_I32LE,
                                                  H5T_NATIVE_INT32, 2);
  *variable_strings |= fsdp_fuzz::build_string_attribute(in, r, "strategy", "full");
  *variable_strings |=
      fsdp_fuzz::build_string_attribute(in, r, "checksum_algorithm", fsdp::kChecksumAlgorithm);
  if (in.flag()) {
    fsdp::SamplerState sampler;
    sampler.dataset_size = 8;
    sampler.replicas = 2;
    const auto words = sampler.to_words();
    fsdp_fuzz::build_array_attribute<std::int64_t>(in, r, "sampler", H5T_STD_I64LE,
                                                   H5T_NATIVE_INT64, {words.begin(), words.end()});
  }
  if (in.flag()) {
    Handle metadata(built(H5Gcreate2(r, "metadata", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT)),
                    H5Gclose);
    const int count = in.choice(4);
    for (int i = 0; i < count; ++i) {
      const std::string key = in.flag() ? in.text(12) : "key" + std::to_string(i);
      *variable_strings |=
          fsdp_fuzz::build_string_attribute(in, metadata.get(), key.c_str(), "value");
    }
  }
  std::vector<BuiltTensor> tensors;
  const bool optimizer = in.flag();
  if (optimizer) {
    Handle group(built(H5Gcreate2(r, "optimizer", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT)),
                 H5Gclose);
    const hid_t o = group.get();
    *variable_strings |= fsdp_fuzz::build_string_attribute(in, o, "name", "adam");
    for (const char* setting :
         {"lr", "weight_decay", "momentum", "dampening", "beta1", "beta2", "eps"}) {
      fsdp_fuzz::build_number_attribute<double>(in, o, setting, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE,
                                                0.5);
    }
    fsdp_fuzz::build_number_attribute<std::int32_t>(in, o, "nesterov", H5T_STD_I32LE,
                                                    H5T_NATIVE_INT32, 0);
    fsdp_fuzz::build_number_attribute<std::int64_t>(in, o, "step", H5T_STD_I64LE, H5T_NATIVE_INT64,
                                                    3);
    Handle state(built(H5Gcreate2(o, "exp_avg", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT)), H5Gclose);
    tensors.push_back(build_tensor(in, state.get(), "optimizer/exp_avg/"));
  }
  if (in.choice(8) != 7) {
    Handle model(built(H5Gcreate2(r, "model", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT)), H5Gclose);
    const int count = 1 + in.choice(3);
    for (int i = 0; i < count; ++i) {
      tensors.push_back(build_tensor(in, model.get(), "model/"));
    }
  }
  // The plan last, listing the model tensors built (verify refuses a checkpoint that lacks a
  // tensor its plan lists, so a plan of nothing would make every file fail there, before its
  // checksums are judged).
  *variable_strings |= fsdp_fuzz::build_string_attribute(in, r, "plan", plan_of(tensors));
  // The named objects' states (the state group), after everything else so that an input from
  // before there was one builds the same file as it did.
  if (in.flag()) {
    Handle state(built(H5Gcreate2(r, "state", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT)), H5Gclose);
    const int count = in.choice(4);
    for (int i = 0; i < count; ++i) {
      const std::string name = in.flag() ? in.text(12) : "object" + std::to_string(i);
      *variable_strings |=
          fsdp_fuzz::build_string_attribute(in, state.get(), name.c_str(), "{\"scale\": 65536.0}");
    }
  }
  return tensors;
}

void check_header(const fsdp::CheckpointHeader& header, const std::vector<BuiltTensor>& tensors,
                  bool variable_strings) {
  // Every string attribute built is read for a header: a variable-length one must be refused
  // (reading it reads the global heap, where libhdf5 hangs on damage).
  if (variable_strings) {
    fsdp_fuzz::finding("read_checkpoint_header accepted a variable-length string attribute");
  }
  if (header.format_version != fsdp::kCheckpointFormatVersion) {
    fsdp_fuzz::finding("read_checkpoint_header accepted format version " +
                       std::to_string(header.format_version));
  }
  for (const fsdp::CheckpointTensor& tensor : header.tensors) {
    for (std::int64_t extent : tensor.shape) {
      if (extent < 0) {
        fsdp_fuzz::finding("read_checkpoint_header gave " + tensor.name + " a negative extent");
      }
    }
  }
  for (const BuiltTensor& built : tensors) {
    if (built.name.rfind("model/", 0) != 0) {
      continue;  // optimizer state is listed only under an optimizer name: not checked here
    }
    bool listed = false;
    for (const fsdp::CheckpointTensor& tensor : header.tensors) {
      if (tensor.name == built.name) {
        listed = std::vector<std::int64_t>(built.dataset.dims.begin(), built.dataset.dims.end()) ==
                 tensor.shape;
      }
    }
    if (!listed) {
      fsdp_fuzz::finding("read_checkpoint_header does not list " + built.name +
                         " with the shape it has");
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  fsdp_fuzz::initialize_kokkos();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  FuzzInput in(data, size);
  const std::string path = fsdp_fuzz::scratch_path("checkpoint-built.h5");
  std::vector<BuiltTensor> tensors;
  bool variable_strings = false;
  try {
    fsdp::hdf5::QuietErrorStack quiet;
    fsdp_fuzz::BuiltFile file(path, in);
    tensors = build_checkpoint(in, file.get(), &variable_strings);
    file.close();
  } catch (const fsdp_fuzz::CannotBuild&) {
    fsdp_fuzz::expect_no_open_hdf5_objects("building the input file");
    return 0;
  }
  const auto header = fsdp_fuzz::value_or_error("read_checkpoint_header",
                                                [&] { return fsdp::read_checkpoint_header(path); });
  fsdp_fuzz::expect_no_open_hdf5_objects("read_checkpoint_header");
  if (!header) {
    return 0;
  }
  check_header(*header, tensors, variable_strings);
  const auto verified = fsdp_fuzz::value_or_error("verify_checkpoint", [&] {
    fsdp::verify_checkpoint(path);
    return true;
  });
  fsdp_fuzz::expect_no_open_hdf5_objects("verify_checkpoint");
  for (const BuiltTensor& tensor : tensors) {
    if (verified && tensor.values_known && (tensor.checksum_missing || tensor.checksum_wrong)) {
      fsdp_fuzz::finding("verify_checkpoint passed " + tensor.name + ", whose checksum is " +
                         (tensor.checksum_missing ? "missing" : "wrong"));
    }
  }
  return 0;
}
