#include "fsdp/io/hdf5_storage.hpp"

#include <cstdint>

#include "fsdp/core/error.hpp"

namespace fsdp::hdf5 {

void require_stored_in_file(const Checker& file, hid_t dataset, const std::string& object) {
  const std::string named = object + " in " + file.file();
  Handle creation(file.check(H5Dget_create_plist(dataset), "H5Dget_create_plist", object),
                  H5Pclose);
  const H5D_layout_t layout = H5Pget_layout(creation.get());
  file.check_status(layout < 0 ? -1 : 0, "H5Pget_layout", object);
  const int external_files = H5Pget_external_count(creation.get());
  file.check_status(external_files, "H5Pget_external_count", object);
  if (layout == H5D_VIRTUAL || external_files > 0) {
    throw Error(ErrorKind::io,
                named + " keeps its values outside the file (" +
                    (layout == H5D_VIRTUAL ? "a virtual dataset" : "external storage") +
                    "); fsdp reads values stored in the file itself: copy them into it");
  }
  // Contiguous and compact storage is there whole or not at all; chunked storage chunk by chunk.
  bool complete = false;
  if (layout == H5D_CHUNKED) {
    Handle space(file.check(H5Dget_space(dataset), "H5Dget_space", object), H5Sclose);
    hsize_t extents[H5S_MAX_RANK] = {};
    hsize_t chunk[H5S_MAX_RANK] = {};
    const int rank = H5Sget_simple_extent_dims(space.get(), extents, nullptr);
    file.check_status(rank, "H5Sget_simple_extent_dims", object);
    file.check_status(H5Pget_chunk(creation.get(), H5S_MAX_RANK, chunk), "H5Pget_chunk", object);
    hsize_t expected = 1;
    bool countable = true;  // more chunks than 2^64 can never all be in a file
    for (int d = 0; d < rank; ++d) {
      const hsize_t along = extents[d] / chunk[d] + (extents[d] % chunk[d] != 0 ? 1 : 0);
      countable = countable && (along == 0 || expected <= UINT64_MAX / along);
      expected *= along;
    }
    hsize_t stored = 0;
    file.check_status(H5Dget_num_chunks(dataset, space.get(), &stored), "H5Dget_num_chunks",
                      object);
    complete = countable && stored == expected;
  } else {
    H5D_space_status_t status = H5D_SPACE_STATUS_ERROR;
    file.check_status(H5Dget_space_status(dataset, &status), "H5Dget_space_status", object);
    complete = status == H5D_SPACE_STATUS_ALLOCATED;
  }
  if (!complete) {
    throw Error(ErrorKind::io, named +
                                   " was not completely written: the file does not hold all of "
                                   "its values, and HDF5 would read the missing ones as fill "
                                   "values (did the program writing it stop half way?)");
  }
}

}  // namespace fsdp::hdf5
