// Whether a dataset's values are all in its file, for readers of HDF5 files that other programs
// wrote (fsdp-train's data, fsdp-ckpt's checkpoints). HDF5 reads elements that were never
// written as the fill value (zeros): a file whose writer stopped half way reads as if complete.
// Values kept outside the file (external raw files, a virtual dataset's source files) can be
// anything of any size, a device or a FIFO, and a missing source reads as fill values too.
#pragma once

#include <hdf5.h>

#include <string>

#include "fsdp/io/hdf5_handle.hpp"

namespace fsdp::hdf5 {

// Throws Error (kind io) "<object> in <file> keeps its values outside the file (...)" or
// "<object> in <file> was not completely written: ..." unless every element of the open dataset
// has storage in the file. A chunked dataset needs every chunk of its extent (HDF5's own space
// status compares bytes, which compression makes fewer). object: e.g. "dataset 'x'".
void require_stored_in_file(const Checker& file, hid_t dataset, const std::string& object);

}  // namespace fsdp::hdf5
