// Checkpoints: a sharded model's parameters and optimizer state in one HDF5 file, written and
// read collectively through MPI-IO, with every tensor stored whole in its logical shape (so any
// world size and strategy can load it, and h5py reads it as plain arrays). docs/checkpoints.md
// shows the layout.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "fsdp/core/dtype.hpp"
#include "fsdp/core/stateful.hpp"
#include "fsdp/data/sampler_state.hpp"
#include "fsdp/optim/optimizer.hpp"
#include "fsdp/unit/sharded_model.hpp"

namespace fsdp {

// The layout version this fsdp writes, and the only one it loads. Version 2 stores every string
// fixed-length; version 1 (variable-length strings, which a damaged file turns into a hang inside
// HDF5) is refused, and upgrade_checkpoint converts it.
inline constexpr int kCheckpointFormatVersion = 2;

// Where training stands, saved with the tensors and given back by a load.
struct CheckpointState {
  std::int64_t step = 0;   // training steps taken (the caller's count)
  std::int64_t epoch = 0;  // the epoch the next step belongs to
  std::optional<SamplerState> sampler;
  std::map<std::string, std::string> metadata;  // the caller's own key/value pairs
  // Objects whose state a save stores too (Stateful::state_dict, taken when the save is called),
  // each under its name; load_checkpoint restores them when given objects of the same names.
  // Only a save reads this: a load reports what a file holds in CheckpointHeader::objects.
  StatefulObjects objects;
};

// One tensor of a checkpoint: "model/<parameter>" or "optimizer/<state>/<parameter>".
struct CheckpointTensor {
  std::string name;
  std::vector<std::int64_t> shape;  // empty: a scalar
  std::string dtype;                // "fp32", "fp64", or what the file holds otherwise
  std::uint64_t checksum = 0;       // kChecksumAlgorithm over all its elements
  bool has_checksum = false;
};

// Everything in a checkpoint except the tensors' values.
struct CheckpointHeader {
  int format_version = 0;
  std::string library_version;  // of the fsdp that wrote it
  CheckpointState state;
  int world_size = 0;     // of the job that wrote it
  std::string strategy;   // its sharding strategy
  std::string plan_json;  // its sharding plan (plan_to_json)
  // The optimizer saved with the model; empty name when none was.
  std::string optimizer;
  OptimizerSettings optimizer_settings;
  std::int64_t optimizer_steps = 0;
  std::vector<CheckpointTensor> tensors;  // sorted by name
  // The state of each named object the file holds (CheckpointState::objects): JSON text.
  std::map<std::string, std::string> objects;
};

// Collective over model.group(). Writes path as one HDF5 file through MPI-IO: each rank writes
// only the elements it holds (the owner a whole parameter, rank 0 a replicated one), plus the
// optimizer's state and settings when optimizer is not null, and state (with the state_dict of
// each of state.objects: Error, kind usage, on every rank when one is not JSON). The file is
// written under a temporary beside path (temporary_beside: a link is followed, only a regular file
// is replaced), synced and only then renamed to path (publish_file), so path is either the previous
// file or the complete new one, never a half-written one. Rank 0's state is saved.
// Every rank throws the same Error (kind io) when the file cannot be written.
//
// Fault injection for tests: when FSDP_CHECKPOINT_CRASH_RANK=r is set, rank r aborts (as a
// crashed process would) after writing half of its tensors; FSDP_CHECKPOINT_FAIL_RANK=r makes
// rank r's write fail there instead (Error, kind io, on every rank).
template <class T>
void save_checkpoint(const std::string& path, ShardedModel<T>& model, const Optimizer<T>* optimizer,
                     const CheckpointState& state);

// Serial: the bytes save_checkpoint makes sure there is room for before it writes a checkpoint of
// this model, the optimizer (none when null) with the state it keeps once it has stepped (even
// before its first step), and state.
template <class T>
long long checkpoint_file_bytes(ShardedModel<T>& model, const Optimizer<T>* optimizer,
                                const CheckpointState& state);

// Collective over model.group(). Loads a checkpoint written at any world size with any strategy:
// each rank reads only the elements of its pieces. With an optimizer, its state and step count
// are loaded too (the file must hold the same rule; a file saved before the first step leaves the
// optimizer with no state and step count 0); with none, the parameters only. Each of objects
// gets the state the file holds under its name (Stateful::load_state_dict, on every rank, after
// the model and the optimizer). Checks, on every rank alike, before anything changes:
//   - the file is an fsdp checkpoint of a format version this fsdp reads (else Error, kind io;
//     a format 1 file is refused without reading its strings, the message naming fsdp-ckpt
//     upgrade);
//   - its tensors' names, shapes and dtypes are the model's (and the optimizer's): else Error
//     (kind mismatch) listing every difference;
//   - the file holds a state for every one of objects (else Error, kind mismatch, naming those
//     it lacks and those it holds), and each object's check_state_dict accepts its state on
//     every rank (else the object's Error, on every rank);
//   - every tensor's checksum (else Error, kind io, naming the file and the tensor).
// Nothing in the model, the optimizer or the objects changes unless every check passed on every
// rank. States the file holds for objects not given are only reported (CheckpointHeader).
template <class T>
CheckpointHeader load_checkpoint(const std::string& path, ShardedModel<T>& model,
                                 Optimizer<T>* optimizer, const StatefulObjects& objects = {});

// Collective over model.group(): a model's parameters from a plain HDF5 file of unsharded
// tensors (pretrained weights; what export_parameters writes): one dataset per parameter, named
// as the parameter, under `group` ("/" by default), each rank reading its pieces. An fsdp
// checkpoint is read from its "model" group instead, with its checksums checked. The same
// mismatch rules as load_checkpoint.
template <class T>
void load_parameters(const std::string& path, ShardedModel<T>& model,
                     const std::string& group = "/");

// Serial (any one process): the header of a checkpoint, for tools. Error (kind io) when the file
// is not a checkpoint this fsdp reads.
CheckpointHeader read_checkpoint_header(const std::string& path);

// Serial: reads every tensor of a checkpoint and checks its checksum, one tensor in memory at a
// time; Error (kind io) naming the first damaged tensor.
void verify_checkpoint(const std::string& path);

// Serial: converts a checkpoint of format version 1 at old_path into one of
// kCheckpointFormatVersion at new_path (which may be old_path): the same header, but
// library_version (this fsdp's), and the same tensors, every one checked against its checksum
// first. Written like a save (a temporary beside new_path, renamed when complete), so new_path is
// never half-written. It TRUSTS old_path: format 1 strings are read from HDF5's global heap, where
// a damaged file can hang HDF5 forever. Error (kind io) when old_path is not a format 1 checkpoint
// (one already of this version says so), a tensor's data does not match its checksum (nothing is
// written), or new_path cannot be written. Returns old_path's header. reading_trusted, when given,
// is called once it is known to be a format 1 file, just before its strings are read (fsdp-ckpt
// says then that it trusts the file: the last words before a hang).
CheckpointHeader upgrade_checkpoint(const std::string& old_path, const std::string& new_path,
                                    const std::function<void()>& reading_trusted = {});

// Serial: the parameters of a checkpoint as a plain HDF5 file (one dataset per parameter, named
// as the parameter, at the root), for other programs and for load_parameters. Written whole or not
// at all (temporary_beside, publish_file). Error (kind usage) when output is the checkpoint's own
// file (require_not_input).
void export_parameters(const std::string& checkpoint, const std::string& output);

extern template void save_checkpoint<float>(const std::string&, ShardedModel<float>&,
                                            const Optimizer<float>*, const CheckpointState&);
extern template void save_checkpoint<double>(const std::string&, ShardedModel<double>&,
                                             const Optimizer<double>*, const CheckpointState&);
extern template long long checkpoint_file_bytes<float>(ShardedModel<float>&,
                                                       const Optimizer<float>*,
                                                       const CheckpointState&);
extern template long long checkpoint_file_bytes<double>(ShardedModel<double>&,
                                                        const Optimizer<double>*,
                                                        const CheckpointState&);
extern template CheckpointHeader load_checkpoint<float>(const std::string&, ShardedModel<float>&,
                                                        Optimizer<float>*, const StatefulObjects&);
extern template CheckpointHeader load_checkpoint<double>(const std::string&, ShardedModel<double>&,
                                                         Optimizer<double>*,
                                                         const StatefulObjects&);
extern template void load_parameters<float>(const std::string&, ShardedModel<float>&,
                                            const std::string&);
extern template void load_parameters<double>(const std::string&, ShardedModel<double>&,
                                             const std::string&);

}  // namespace fsdp
