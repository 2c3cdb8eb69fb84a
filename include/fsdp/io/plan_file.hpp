// Sharding plans in files: HDF5 (for programs, h5py and h5dump) and JSON (for people).
#pragma once

#include <string>
#include <vector>

#include "fsdp/comm/process_group.hpp"
#include "fsdp/shard/sharding_plan.hpp"

namespace fsdp {

// Format of both files; a loader refuses versions it does not know.
inline constexpr int kPlanFormatVersion = 1;

// Serial: call on one process (rank 0). Writes to path + ".tmp" and renames, so a failed write
// never leaves a half plan under path. Throws Error with the HDF5 call and path on failure.
void save_plan_hdf5(const std::string& path, const ShardingPlan& plan);
ShardingPlan load_plan_hdf5(const std::string& path);
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
