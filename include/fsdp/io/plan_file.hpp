// Sharding plans in files: HDF5 (for programs, h5py and h5dump) and JSON (for people).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "fsdp/comm/process_group.hpp"
#include "fsdp/shard/sharding_plan.hpp"

namespace fsdp {

// Format of JSON plans (plan_to_json); a loader refuses versions it does not know.
inline constexpr int kPlanFormatVersion = 1;
// Format of HDF5 plans: 2 (docs/plans.md), with fixed-length strings and a checksummed header in
// the user block. Version 1 (variable-length strings, no checksum) is refused with what to do.
inline constexpr int kPlanHdf5FormatVersion = 2;
// The HDF5 user block of an HDF5 plan file, whose start holds fsdp's header: every HDF5 plan file
// has at least these bytes.
inline constexpr std::size_t kPlanHdf5UserBlockBytes = 512;

// Serial: call on one process (rank 0). Writes a temporary of its own beside path and renames it
// (temporary_beside, publish_file), so a failed write (a full disk) leaves path as it was and no
// temporary behind. Throws Error (kind io) naming the file and the reason. An HDF5 plan is made
// in memory and written by fsdp: HDF5 never writes to disk.
void save_plan_hdf5(const std::string& path, const ShardingPlan& plan);
// Reads the file's bytes (a regular file of at most 256 MiB), checks its header, length and
// checksum before HDF5 parses anything, then every size and type; a damaged file is an Error
// (kind io) saying so, never a crash.
ShardingPlan load_plan_hdf5(const std::string& path);
// Sets the header of an HDF5 plan file's bytes (its first kPlanHdf5UserBlockBytes, the HDF5 user
// block; Error for fewer bytes) to
// match them: magic, format version, length and checksum. save_plan_hdf5 uses it; tests and fuzz
// targets use it to reach the checks behind the checksum with bytes of their own.
void seal_plan_hdf5_bytes(std::string& bytes);
void save_plan_json(const std::string& path, const ShardingPlan& plan);
ShardingPlan load_plan_json(const std::string& path);

// By extension: ".h5"/".hdf5" HDF5, ".json" JSON; anything else is an Error.
void save_plan(const std::string& path, const ShardingPlan& plan);
ShardingPlan load_plan(const std::string& path);

// Loads a plan and checks it against this job: made for world_size ranks and for exactly these
// parameters, else Error naming the file, the plan's world size and this one, or the first
// differing parameter.
ShardingPlan load_plan(const std::string& path, const std::vector<ParameterInfo>& parameters,
                       int world_size);

// Collective: rank 0 reads the file, every rank gets the plan and checks it against its own
// parameters and group.size() (agree_on_plan); every rank throws the same Error on any failure.
ShardingPlan load_plan(const std::string& path, const std::vector<ParameterInfo>& parameters,
                       ProcessGroup& group);
// Collective: rank 0 writes; every rank throws if the write failed.
void save_plan(const std::string& path, const ShardingPlan& plan, ProcessGroup& group);

}  // namespace fsdp
