// Builds well-formed HDF5 files from fuzz choices, through the HDF5 API, for the structured
// targets (dataset_structured, checkpoint_structured): datasets of any type class, rank, extent
// (up to 2^64 - 1, declared without storage), layout, filter, allocation time, fill value and
// external storage, written completely, partly or not at all; attributes of the expected type or
// another one. The reader under test then opens a valid file whose contents are hostile, which
// exercises fsdp's checks instead of libhdf5's parser (the raw-bytes targets do that).
//
// A choice the HDF5 API refuses (a chunk larger than a fixed extent, compact data over 64 KiB)
// throws CannotBuild: the input builds nothing and is skipped.
#pragma once

#include <hdf5.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "fsdp/io/hdf5_handle.hpp"
#include "fuzz_input.hpp"
#include "scratch_file.hpp"

namespace fsdp_fuzz {

using fsdp::hdf5::Handle;

struct CannotBuild {};

inline hid_t built(hid_t id) {
  if (id < 0) {
    throw CannotBuild{};
  }
  return id;
}
inline void built_status(herr_t rc) {
  if (rc < 0) {
    throw CannotBuild{};
  }
}

// The file being built: created (truncated) at path with the library-version bounds a choice
// picks (the earliest format or the newest, whose object headers and chunk indexes differ), and
// closed by close() before the reader opens it.
class BuiltFile {
 public:
  BuiltFile(const std::string& path, FuzzInput& in) : file_(create(path, in), H5Fclose) {}
  hid_t get() const { return file_.get(); }
  void close() { built_status(file_.close()); }

 private:
  static hid_t create(const std::string& path, FuzzInput& in) {
    Handle fapl(built(H5Pcreate(H5P_FILE_ACCESS)), H5Pclose);
    if (in.flag()) {
      built_status(H5Pset_libver_bounds(fapl.get(), H5F_LIBVER_LATEST, H5F_LIBVER_LATEST));
    }
    return built(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl.get()));
  }

  Handle file_;
};

// What a dataset is meant to be when every choice is 0.
struct Intended {
  hid_t type;                 // e.g. H5T_IEEE_F64LE
  std::vector<hsize_t> dims;  // e.g. {4, 3}
};

// The stored element types the targets' checks know.
enum class Stored : std::uint8_t { f32le, f64le, i64le, other };

// What was built, for the targets' checks.
struct BuiltDataset {
  // False when the reader cannot have the values: elements never written and no storage
  // allocated for them, which HDF5 reads as fill values (a writer that died half way).
  bool fully_stored = true;
  std::vector<hsize_t> dims;
  Stored stored = Stored::other;
  std::vector<std::uint8_t> values;   // numel * type size bytes as written (all written)
  bool values_written_as_is = false;  // values hold every element, in the file's type
};

namespace detail {

// An extent: the intended one, a small one, or one that overflows what a reader could allocate.
inline hsize_t extent(FuzzInput& in, hsize_t intended) {
  static const hsize_t large[] = {1000,
                                  hsize_t{1} << 20,
                                  hsize_t{1} << 31,
                                  (hsize_t{1} << 32) + 1,
                                  hsize_t{1} << 62,
                                  std::numeric_limits<hsize_t>::max() - 1};
  const int pick = in.choice(16);
  if (pick == 0) {
    return intended;
  }
  if (pick <= 9) {
    return static_cast<hsize_t>(pick - 1);
  }
  return pick <= 15 ? large[pick - 10] : intended;
}

// A 16-bit float with a fuzzed exponent bias (half precision when the bias is 15).
inline hid_t small_float(FuzzInput& in) {
  const hid_t type = built(H5Tcopy(H5T_IEEE_F32LE));
  built_status(H5Tset_fields(type, 15, 10, 5, 0, 10));
  built_status(H5Tset_precision(type, 16));
  built_status(H5Tset_size(type, 2));
  built_status(H5Tset_ebias(type, static_cast<std::size_t>(in.number(0, 40))));
  return type;
}

// The element type: the intended one or any other class (numbers of other sizes and orders,
// strings, compounds, enums, arrays, bitfields, opaque bytes).
inline hid_t element_type(FuzzInput& in, hid_t intended) {
  switch (in.choice(20)) {
    case 1:
      return built(H5Tcopy(H5T_IEEE_F64LE));
    case 2:
      return built(H5Tcopy(H5T_IEEE_F32LE));
    case 3:
      return built(H5Tcopy(H5T_IEEE_F64BE));
    case 4:
      return built(H5Tcopy(H5T_STD_I64LE));
    case 5:
      return built(H5Tcopy(H5T_STD_I32LE));
    case 6:
      return built(H5Tcopy(H5T_STD_I16BE));
    case 7:
      return built(H5Tcopy(H5T_STD_U8LE));
    case 8:
      return built(H5Tcopy(H5T_STD_I8LE));
    case 9:
      return built(H5Tcopy(H5T_STD_U64LE));
    case 10:
      return built(H5Tcopy(H5T_STD_U32BE));
    case 11:
      return small_float(in);
    case 12: {
      const hid_t type = built(H5Tcopy(H5T_C_S1));
      built_status(H5Tset_size(type, static_cast<std::size_t>(in.number(1, 16))));
      return type;
    }
    case 13: {
      const hid_t type = built(H5Tcreate(H5T_COMPOUND, 8));
      built_status(H5Tinsert(type, "value", 0, H5T_IEEE_F64LE));
      return type;
    }
    case 14: {
      const hid_t type = built(H5Tenum_create(H5T_STD_I32LE));
      const int zero = 0, one = 1;
      built_status(H5Tenum_insert(type, "zero", &zero));
      built_status(H5Tenum_insert(type, "one", &one));
      return type;
    }
    case 15: {
      const hsize_t two = 2;
      return built(H5Tarray_create2(H5T_IEEE_F64LE, 1, &two));
    }
    case 16:
      return built(H5Tcopy(H5T_STD_B8LE));
    case 17: {
      const hid_t type = built(H5Tcreate(H5T_OPAQUE, 4));
      built_status(H5Tset_tag(type, "fuzz"));
      return type;
    }
    case 18:
      return built(H5Tcopy(H5T_IEEE_F32BE));
    case 19:
      return built(H5Tcopy(H5T_STD_I64BE));
    default:
      return built(H5Tcopy(intended));
  }
}

inline hsize_t product(const std::vector<hsize_t>& dims, bool* overflow) {
  hsize_t n = 1;
  *overflow = false;
  for (hsize_t d : dims) {
    if (d != 0 && n > std::numeric_limits<hsize_t>::max() / d) {
      *overflow = true;
      return 0;
    }
    n *= d;
  }
  return n;
}

}  // namespace detail

// Builds the dataset `name` under parent from the input's choices. Writes at most about 1 MiB:
// larger extents are declared with no storage, chunked (or external on /dev/zero).
inline BuiltDataset build_dataset(FuzzInput& in, hid_t parent, const std::string& name,
                                  const Intended& intended) {
  constexpr hsize_t kMostWrittenBytes = hsize_t{1} << 20;
  BuiltDataset out;
  const Handle type(detail::element_type(in, intended.type), H5Tclose);
  const std::size_t type_size = H5Tget_size(type.get());
  built_status(type_size == 0 ? -1 : 0);
  out.stored = H5Tequal(type.get(), H5T_IEEE_F32LE) > 0   ? Stored::f32le
               : H5Tequal(type.get(), H5T_IEEE_F64LE) > 0 ? Stored::f64le
               : H5Tequal(type.get(), H5T_STD_I64LE) > 0  ? Stored::i64le
                                                          : Stored::other;
  const bool variable_length =
      H5Tget_class(type.get()) == H5T_STRING && H5Tis_variable_str(type.get()) > 0;

  // The dataspace: simple of the intended rank or another, scalar, or null.
  const int space_kind = in.choice(8);  // 0-5 simple, 6 scalar, 7 null
  if (space_kind < 6) {
    const std::size_t rank =
        space_kind == 0 ? intended.dims.size() : static_cast<std::size_t>(in.number(0, 4));
    for (std::size_t i = 0; i < rank; ++i) {
      out.dims.push_back(detail::extent(in, i < intended.dims.size() ? intended.dims[i] : 2));
    }
  }
  bool overflow = false;
  const hsize_t numel = space_kind == 7 ? 0 : detail::product(out.dims, &overflow);
  const bool within_budget = !overflow && numel <= kMostWrittenBytes / type_size;
  const bool unlimited = in.choice(4) == 3 && space_kind < 6 && !out.dims.empty();
  std::vector<hsize_t> most(out.dims);
  if (unlimited) {
    most.assign(out.dims.size(), H5S_UNLIMITED);
  }
  const Handle space(built(space_kind == 6   ? H5Screate(H5S_SCALAR)
                           : space_kind == 7 ? H5Screate(H5S_NULL)
                                             : H5Screate_simple(static_cast<int>(out.dims.size()),
                                                                out.dims.data(), most.data())),
                     H5Sclose);

  // Storage: 0 contiguous, 1 chunked, 2 compact, 3 deflate, 4 shuffle + deflate + fletcher32,
  // 5 external file holding the values, 6 external /dev/zero. Beyond the budget only storage
  // that needs no bytes in the file is possible.
  Handle dcpl(built(H5Pcreate(H5P_DATASET_CREATE)), H5Pclose);
  int storage = in.choice(7);
  const bool simple = space_kind < 6 && !out.dims.empty();
  if (unlimited && storage != 3 && storage != 4) {
    storage = 1;
  }
  if (!simple && (storage == 1 || storage == 3 || storage == 4)) {
    storage = 0;
  }
  if (!within_budget && storage != 6) {
    storage = simple ? 1 : 0;
  }
  const bool chunked = storage == 1 || storage == 3 || storage == 4;
  std::vector<hsize_t> chunk;
  if (chunked) {
    for (hsize_t d : out.dims) {
      // At most 8 chunks along a written dimension: libhdf5 needs memory per chunk it writes
      // (a million chunks of one byte took gigabytes).
      const hsize_t fewest = within_budget ? (d + 7) / 8 : 1;
      const hsize_t c = std::max(static_cast<hsize_t>(in.number(1, 8)), fewest);
      chunk.push_back(unlimited || d == 0 ? c : std::min(c, d));
    }
    built_status(H5Pset_chunk(dcpl.get(), static_cast<int>(chunk.size()), chunk.data()));
    if (storage == 4) {
      built_status(H5Pset_shuffle(dcpl.get()));
    }
    if (storage >= 3) {
      built_status(H5Pset_deflate(dcpl.get(), static_cast<unsigned>(in.number(0, 9))));
    }
    if (storage == 4) {
      built_status(H5Pset_fletcher32(dcpl.get()));
    }
  } else if (storage == 2) {
    built_status(H5Pset_layout(dcpl.get(), H5D_COMPACT));
  } else if (storage == 5) {
    const std::vector<std::uint8_t> bytes = in.bytes(static_cast<std::size_t>(numel * type_size));
    const std::string raw = scratch_file("external.raw", bytes.data(), bytes.size());
    built_status(H5Pset_external(dcpl.get(), raw.c_str(), 0, numel * type_size));
  } else if (storage == 6) {
    built_status(H5Pset_external(dcpl.get(), "/dev/zero", 0, H5F_UNLIMITED));
  }

  // When storage is allocated and what unwritten elements read as.
  const int allocation = in.choice(4);  // 0 the layout's default, 1 early, 2 late, 3 incremental
  if (allocation != 0 && within_budget) {
    const H5D_alloc_time_t when[] = {H5D_ALLOC_TIME_DEFAULT, H5D_ALLOC_TIME_EARLY,
                                     H5D_ALLOC_TIME_LATE, H5D_ALLOC_TIME_INCR};
    built_status(H5Pset_alloc_time(dcpl.get(), when[allocation]));
  }
  if (in.choice(4) == 1) {
    const std::vector<std::uint8_t> fill = in.bytes(type_size);
    if (!variable_length) {
      built_status(H5Pset_fill_value(dcpl.get(), type.get(), fill.data()));
    }
  }
  Handle dataset(built(H5Dcreate2(parent, name.c_str(), type.get(), space.get(), H5P_DEFAULT,
                                  dcpl.get(), H5P_DEFAULT)),
                 H5Dclose);

  // The values: all written, none, or the first half of the first dimension.
  const int writing = within_budget ? in.choice(3) : 1;
  const bool has_storage_anyway =
      storage == 2 || storage == 5 || storage == 6 || (allocation == 1 && within_budget);
  if (writing == 0 && numel > 0) {
    out.values = in.bytes(static_cast<std::size_t>(numel * type_size));
    if (variable_length) {
      out.values.clear();  // variable-length elements are pointers: not written
      out.fully_stored = has_storage_anyway;
      return out;
    }
    built_status(
        H5Dwrite(dataset.get(), type.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, out.values.data()));
    out.values_written_as_is = storage != 6;
  } else if (writing == 2 && numel > 0 && simple) {
    std::vector<hsize_t> start(out.dims.size(), 0), count(out.dims);
    count[0] = out.dims[0] / 2;
    if (count[0] > 0) {
      Handle file_space(built(H5Dget_space(dataset.get())), H5Sclose);
      built_status(H5Sselect_hyperslab(file_space.get(), H5S_SELECT_SET, start.data(), nullptr,
                                       count.data(), nullptr));
      bool ignored = false;
      const hsize_t written = detail::product(count, &ignored);
      Handle memory(built(H5Screate_simple(1, &written, nullptr)), H5Sclose);
      const std::vector<std::uint8_t> half =
          in.bytes(static_cast<std::size_t>(written * type_size));
      if (!variable_length) {
        built_status(H5Dwrite(dataset.get(), type.get(), memory.get(), file_space.get(),
                              H5P_DEFAULT, half.data()));
      }
    }
    // A contiguous dataset's storage comes whole with its first write; a chunked one's chunk by
    // chunk, so chunks past the written rows stay unallocated, unless allocation is late: then
    // the first write allocates every chunk, and HDF5 stores the unwritten ones filled (found by
    // fuzzing: such a file holds all its chunks, as a complete one does, and no reader can tell).
    const bool some_written = count[0] > 0;
    const bool late = allocation == 2 && within_budget;
    out.fully_stored =
        has_storage_anyway || (chunked && !late ? (count[0] + chunk[0] - 1) / chunk[0] ==
                                                          (out.dims[0] + chunk[0] - 1) / chunk[0] &&
                                                      some_written
                                                : some_written);
  } else if (numel > 0) {
    out.fully_stored = has_storage_anyway;
  }
  built_status(dataset.close());
  return out;
}

// Attributes: the intended type and value when the choice is 0, else another value, type, shape
// or none at all.

// A string attribute: fixed-length, NUL-terminated UTF-8 (as fsdp writes them) of the intended
// or a fuzzed value, or two of them, or a variable-length one (as checkpoints of format 1 and
// other programs wrote them, which readers must refuse without reading the global heap), a
// number, no value, an ASCII one padded without a NUL, or none. True when it built a
// variable-length one.
inline bool build_string_attribute(FuzzInput& in, hid_t object, const char* name,
                                   const std::string& intended) {
  const int pick = in.choice(8);
  if (pick == 7) {
    return false;  // missing
  }
  const std::string value = pick == 1 ? in.text(40) : intended;
  const hsize_t two = 2;  // pick 2: two strings instead of one
  const Handle space(built(pick == 5   ? H5Screate(H5S_NULL)
                           : pick == 2 ? H5Screate_simple(1, &two, nullptr)
                                       : H5Screate(H5S_SCALAR)),
                     H5Sclose);
  if (pick == 3) {  // variable-length
    Handle type(built(H5Tcopy(H5T_C_S1)), H5Tclose);
    built_status(H5Tset_size(type.get(), H5T_VARIABLE));
    built_status(H5Tset_cset(type.get(), in.flag() ? H5T_CSET_ASCII : H5T_CSET_UTF8));
    Handle attribute(
        built(H5Acreate2(object, name, type.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT)),
        H5Aclose);
    const char* text = in.flag() ? value.c_str() : nullptr;  // or a null string
    built_status(H5Awrite(attribute.get(), type.get(), &text));
    return true;
  }
  if (pick == 4) {  // a number
    const std::int32_t number = 7;
    Handle attribute(
        built(H5Acreate2(object, name, H5T_STD_I32LE, space.get(), H5P_DEFAULT, H5P_DEFAULT)),
        H5Aclose);
    built_status(H5Awrite(attribute.get(), H5T_NATIVE_INT32, &number));
    return false;
  }
  // Fixed-length: the value and its NUL, or (pick 6) ASCII of exactly the value's bytes, padded
  // with NULs when shorter and ending without one.
  const std::size_t width = pick == 6 ? std::max<std::size_t>(value.size(), 1) : value.size() + 1;
  Handle type(built(H5Tcopy(H5T_C_S1)), H5Tclose);
  built_status(H5Tset_size(type.get(), width));
  built_status(H5Tset_strpad(type.get(), pick == 6 ? H5T_STR_NULLPAD : H5T_STR_NULLTERM));
  built_status(H5Tset_cset(type.get(), pick == 6 ? H5T_CSET_ASCII : H5T_CSET_UTF8));
  std::vector<char> bytes(2 * width, '\0');
  for (std::size_t copy = 0; copy < 2; ++copy) {
    std::copy(value.begin(),
              value.begin() + static_cast<std::ptrdiff_t>(std::min(value.size(), width)),
              bytes.begin() + static_cast<std::ptrdiff_t>(copy * width));
  }
  Handle attribute(
      built(H5Acreate2(object, name, type.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT)), H5Aclose);
  if (pick != 5) {
    built_status(H5Awrite(attribute.get(), type.get(), bytes.data()));
  }
  return false;
}

// A number attribute stored as `stored` (e.g. H5T_STD_I32LE) holding `intended` (memory type
// `memory`), or a fuzzed value, another type, two values, or none.
template <class T>
void build_number_attribute(FuzzInput& in, hid_t object, const char* name, hid_t stored,
                            hid_t memory, T intended) {
  const int pick = in.choice(8);
  if (pick == 7) {
    return;
  }
  T value = intended;
  if (pick == 1) {
    const std::vector<std::uint8_t> raw = in.bytes(sizeof(T));
    std::memcpy(&value, raw.data(), sizeof(T));
  }
  static const hid_t others[] = {H5T_IEEE_F64LE, H5T_STD_I64BE, H5T_STD_U64LE, H5T_STD_I8LE,
                                 H5T_IEEE_F32LE};
  const hid_t type = pick == 2 ? others[in.choice(5)] : stored;
  const hsize_t two = 2;
  Handle space(built(pick == 3 ? H5Screate_simple(1, &two, nullptr)
                               : H5Screate(pick == 4 ? H5S_NULL : H5S_SCALAR)),
               H5Sclose);
  Handle attribute(built(H5Acreate2(object, name, type, space.get(), H5P_DEFAULT, H5P_DEFAULT)),
                   H5Aclose);
  const T values[2] = {value, value};
  if (pick != 4 && pick != 5) {  // 5: created, never written (reads as zeros)
    built_status(H5Awrite(attribute.get(), memory, values));
  }
}

// An array attribute of `intended.size()` values, or another count, type, or none.
template <class T>
void build_array_attribute(FuzzInput& in, hid_t object, const char* name, hid_t stored,
                           hid_t memory, std::vector<T> values) {
  const int pick = in.choice(6);
  if (pick == 5) {
    return;
  }
  if (pick == 1) {
    for (T& value : values) {
      const std::vector<std::uint8_t> raw = in.bytes(sizeof(T));
      std::memcpy(&value, raw.data(), sizeof(T));
    }
  } else if (pick == 2) {
    values.resize(static_cast<std::size_t>(in.number(0, 12)));
  }
  const hsize_t count = values.size();
  Handle space(built(pick == 3 ? H5Screate(H5S_SCALAR) : H5Screate_simple(1, &count, nullptr)),
               H5Sclose);
  const hid_t type = pick == 4 ? H5T_IEEE_F64LE : stored;
  Handle attribute(built(H5Acreate2(object, name, type, space.get(), H5P_DEFAULT, H5P_DEFAULT)),
                   H5Aclose);
  if (!values.empty()) {
    built_status(H5Awrite(attribute.get(), memory, values.data()));
  }
}

}  // namespace fsdp_fuzz
