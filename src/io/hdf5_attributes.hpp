// Attributes of HDF5 objects (plan files, checkpoints): scalars, 1-D arrays and UTF-8 strings,
// every call checked through hdf5::Checker. Private to src/io.
#pragma once

#include <hdf5.h>

#include <cstdint>
#include <string>
#include <vector>

#include "fsdp/io/hdf5_handle.hpp"

namespace fsdp::hdf5 {

// The variable-length UTF-8 string type (a new copy; closed by the Handle), for reading format 1
// checkpoints, which stored their strings so.
Handle string_type(const Checker& file);
// A fixed-length UTF-8 string type of `bytes` bytes (>= 1), NUL-terminated (a new copy). Plan
// files use these: reading a variable-length string follows a pointer into the file's global
// heap, and one flipped bit there crashed inside HDF5.
Handle fixed_string_type(const Checker& file, std::size_t bytes);
// One fixed-length string as stored: its bytes up to the first NUL.
std::string from_fixed_string(const char* data, std::size_t bytes);

// True when object has an attribute of that name.
bool has_attribute(const Checker& file, hid_t object, const char* name);
// The attribute; when it is missing, Error (kind io): "<file> has no attribute '<name>'; it is
// not <expected>", e.g. expected = "an fsdp sharding plan".
Handle open_attribute(const Checker& file, hid_t object, const char* name, const char* expected);

// A variable-length or fixed-length string attribute (fixed ones of at most kMostTextBytes). A
// variable-length one is read from the file's global heap, where a damaged file hangs libhdf5
// 1.10: only for files the caller trusts (fsdp-ckpt upgrade); readers of any bytes use
// read_fixed_string_attribute.
std::string read_string_attribute(const Checker& file, hid_t object, const char* name,
                                  const char* expected);
// A fixed-length string attribute of value.size() + 1 bytes; value has no NUL byte.
void write_fixed_string_attribute(const Checker& file, hid_t object, const char* name,
                                  const std::string& value);
// A fixed-length string attribute of at most most_bytes bytes; a variable-length one, or a longer
// one, is an Error (kind io) read no further.
std::string read_fixed_string_attribute(const Checker& file, hid_t object, const char* name,
                                        const char* expected, std::size_t most_bytes);
// True when object has an attribute of that name whose stored type is a variable-length string.
// Only the type is looked at: the value, in the file's global heap, is never read (a damaged
// global heap hangs libhdf5 1.10 in H5Aread).
bool is_variable_string_attribute(const Checker& file, hid_t object, const char* name);

// Numbers: T is std::int32_t, std::int64_t, std::uint64_t or double, stored little-endian
// (I32LE, I64LE, U64LE, IEEE F64LE) and converted to T when read.
template <class T>
void write_attribute(const Checker& file, hid_t object, const char* name, T value);
template <class T>
void write_array_attribute(const Checker& file, hid_t object, const char* name,
                           const std::vector<T>& values);
template <class T>
T read_attribute(const Checker& file, hid_t object, const char* name, const char* expected);
// A 1-D attribute of exactly `count` values; another size is an Error (kind io).
template <class T>
std::vector<T> read_array_attribute(const Checker& file, hid_t object, const char* name,
                                    std::size_t count, const char* expected);

}  // namespace fsdp::hdf5
