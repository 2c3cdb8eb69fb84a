// HDF5 readers must close every identifier they open, on success and on every error path: an
// object left open keeps its file open (the next open of the same path would see the old file)
// and made fsdp-plan crash in HDF5's exit handler.
#pragma once

#include <hdf5.h>

#include <string>

#include "reader_contract.hpp"

namespace fsdp_fuzz {

inline void expect_no_open_hdf5_objects(const char* reader) {
  const ssize_t open = H5Fget_obj_count(H5F_OBJ_ALL, H5F_OBJ_ALL);
  if (open != 0) {
    finding(std::string(reader) + " left " + std::to_string(open) + " HDF5 objects open");
  }
}

}  // namespace fsdp_fuzz
