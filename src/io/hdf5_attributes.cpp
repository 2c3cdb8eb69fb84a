#include "hdf5_attributes.hpp"

#include <algorithm>
#include <cstring>

#include "fsdp/core/error.hpp"
#include "fsdp/core/text.hpp"

namespace fsdp::hdf5 {
namespace {

std::string attribute_text(const char* name) {
  return std::string("attribute ") + name;
}

// Stored type and in-memory type of each number type (functions: HDF5's type ids are runtime
// values).
template <class T>
struct NumberTypes;
template <>
struct NumberTypes<std::int32_t> {
  static hid_t stored() { return H5T_STD_I32LE; }
  static hid_t memory() { return H5T_NATIVE_INT32; }
};
template <>
struct NumberTypes<std::int64_t> {
  static hid_t stored() { return H5T_STD_I64LE; }
  static hid_t memory() { return H5T_NATIVE_INT64; }
};
template <>
struct NumberTypes<std::uint64_t> {
  static hid_t stored() { return H5T_STD_U64LE; }
  static hid_t memory() { return H5T_NATIVE_UINT64; }
};
template <>
struct NumberTypes<double> {
  static hid_t stored() { return H5T_IEEE_F64LE; }
  static hid_t memory() { return H5T_NATIVE_DOUBLE; }
};

// How many elements the attribute holds (1 for a scalar).
hssize_t element_count(const Checker& file, hid_t attribute, const std::string& what) {
  Handle space(file.check(H5Aget_space(attribute), "H5Aget_space", what), H5Sclose);
  const hssize_t points = H5Sget_simple_extent_npoints(space.get());
  file.check_status(points < 0 ? -1 : 0, "H5Sget_simple_extent_npoints", what);
  return points;
}

// The attribute's stored type, its class, and whether it is a variable-length string.
struct StoredType {
  Handle type;
  H5T_class_t type_class;
  bool variable_string;
};
StoredType stored_type(const Checker& file, hid_t attribute, const std::string& what) {
  Handle type(file.check(H5Aget_type(attribute), "H5Aget_type", what), H5Tclose);
  const H5T_class_t type_class = H5Tget_class(type.get());
  file.check_status(type_class == H5T_NO_CLASS ? -1 : 0, "H5Tget_class", what);
  bool variable_string = false;
  if (type_class == H5T_STRING) {
    const htri_t variable = H5Tis_variable_str(type.get());
    file.check_status(variable, "H5Tis_variable_str", what);
    variable_string = variable > 0;
  }
  return {std::move(type), type_class, variable_string};
}

void write_raw(const Checker& file, hid_t object, const char* name, hid_t stored, hid_t memory,
               hid_t space, const void* data) {
  Handle attribute(file.check(H5Acreate2(object, name, stored, space, H5P_DEFAULT, H5P_DEFAULT),
                              "H5Acreate2", attribute_text(name)),
                   H5Aclose);
  file.check_status(H5Awrite(attribute.get(), memory, data), "H5Awrite", attribute_text(name));
}

}  // namespace

Handle string_type(const Checker& file) {
  Handle type(file.check(H5Tcopy(H5T_C_S1), "H5Tcopy", "the string type"), H5Tclose);
  file.check_status(H5Tset_size(type.get(), H5T_VARIABLE), "H5Tset_size", "the string type");
  file.check_status(H5Tset_cset(type.get(), H5T_CSET_UTF8), "H5Tset_cset", "the string type");
  return type;
}

Handle fixed_string_type(const Checker& file, std::size_t bytes) {
  Handle type(file.check(H5Tcopy(H5T_C_S1), "H5Tcopy", "the string type"), H5Tclose);
  file.check_status(H5Tset_size(type.get(), std::max<std::size_t>(bytes, 1)), "H5Tset_size",
                    "the string type");
  file.check_status(H5Tset_strpad(type.get(), H5T_STR_NULLTERM), "H5Tset_strpad",
                    "the string type");
  file.check_status(H5Tset_cset(type.get(), H5T_CSET_UTF8), "H5Tset_cset", "the string type");
  return type;
}

std::string from_fixed_string(const char* data, std::size_t bytes) {
  const void* nul = std::memchr(data, '\0', bytes);
  return std::string(data, nul ? static_cast<const char*>(nul) - data : bytes);
}

bool has_attribute(const Checker& file, hid_t object, const char* name) {
  const htri_t exists = H5Aexists(object, name);
  file.check_status(exists, "H5Aexists", attribute_text(name));
  return exists > 0;
}

Handle open_attribute(const Checker& file, hid_t object, const char* name, const char* expected) {
  if (!has_attribute(file, object, name)) {
    throw Error(ErrorKind::io,
                file.file() + " has no attribute '" + name + "'; it is not " + expected);
  }
  return Handle(file.check(H5Aopen(object, name, H5P_DEFAULT), "H5Aopen", attribute_text(name)),
                H5Aclose);
}

namespace {

// The attribute's stored type, which must be a string; whether it is variable-length.
std::pair<Handle, bool> string_attribute_type(const Checker& file, hid_t attribute,
                                              const std::string& what) {
  StoredType stored = stored_type(file, attribute, what);
  if (stored.type_class != H5T_STRING) {
    throw Error(ErrorKind::io, file.file() + ": " + what + " is not a string");
  }
  return {std::move(stored.type), stored.variable_string};
}

// A scalar attribute of a fixed-length string type (stored), read whole.
std::string read_fixed(const Checker& file, hid_t attribute, hid_t stored, const std::string& what,
                       std::size_t most_bytes) {
  const hssize_t points = element_count(file, attribute, what);
  const std::size_t bytes = H5Tget_size(stored);
  if (points != 1 || bytes == 0 || bytes > most_bytes) {
    throw Error(ErrorKind::io, file.file() + ": " + what + " should be one string of at most " +
                                   std::to_string(most_bytes) + " bytes; it holds " +
                                   std::to_string(points) + " of " + std::to_string(bytes));
  }
  std::string buffer(bytes, '\0');
  file.check_status(H5Aread(attribute, stored, buffer.data()), "H5Aread", what);
  return from_fixed_string(buffer.data(), bytes);
}

}  // namespace

void write_fixed_string_attribute(const Checker& file, hid_t object, const char* name,
                                  const std::string& value) {
  Handle type = fixed_string_type(file, value.size() + 1);
  Handle space(file.check(H5Screate(H5S_SCALAR), "H5Screate", attribute_text(name)), H5Sclose);
  write_raw(file, object, name, type.get(), type.get(), space.get(), value.c_str());
}

std::string read_fixed_string_attribute(const Checker& file, hid_t object, const char* name,
                                        const char* expected, std::size_t most_bytes) {
  const std::string what = attribute_text(name);
  Handle attribute = open_attribute(file, object, name, expected);
  auto [stored, variable] = string_attribute_type(file, attribute.get(), what);
  if (variable) {
    throw Error(ErrorKind::io, file.file() + ": " + what + " is not a fixed-length string");
  }
  return read_fixed(file, attribute.get(), stored.get(), what, most_bytes);
}

bool is_variable_string_attribute(const Checker& file, hid_t object, const char* name) {
  if (!has_attribute(file, object, name)) {
    return false;
  }
  const std::string what = attribute_text(name);
  Handle attribute(file.check(H5Aopen(object, name, H5P_DEFAULT), "H5Aopen", what), H5Aclose);
  return stored_type(file, attribute.get(), what).variable_string;
}

std::string read_string_attribute(const Checker& file, hid_t object, const char* name,
                                  const char* expected) {
  const std::string what = attribute_text(name);
  Handle attribute = open_attribute(file, object, name, expected);
  auto [stored, variable] = string_attribute_type(file, attribute.get(), what);
  if (!variable) {
    return read_fixed(file, attribute.get(), stored.get(), what,
                      static_cast<std::size_t>(kMostTextBytes));
  }
  // One string: H5Aread writes a pointer per element, and there is room for one (two strings
  // overflowed the stack; found by fuzz_checkpoint_structured).
  const hssize_t points = element_count(file, attribute.get(), what);
  if (points != 1) {
    throw Error(ErrorKind::io, file.file() + ": " + what + " should hold one string, it holds " +
                                   std::to_string(points));
  }
  // Read in the stored character set: libhdf5 converts ASCII to UTF-8 or refuses to, depending on
  // which conversions the process made before.
  const H5T_cset_t cset = H5Tget_cset(stored.get());
  file.check_status(cset < 0 ? -1 : 0, "H5Tget_cset", what);
  Handle type = string_type(file);
  file.check_status(H5Tset_cset(type.get(), cset), "H5Tset_cset", what);
  char* text = nullptr;
  file.check_status(H5Aread(attribute.get(), type.get(), &text), "H5Aread", what);
  std::string value = text ? text : "";
  file.check_status(H5free_memory(text), "H5free_memory", what);
  return value;
}

template <class T>
void write_attribute(const Checker& file, hid_t object, const char* name, T value) {
  Handle space(file.check(H5Screate(H5S_SCALAR), "H5Screate", attribute_text(name)), H5Sclose);
  write_raw(file, object, name, NumberTypes<T>::stored(), NumberTypes<T>::memory(), space.get(),
            &value);
}

template <class T>
void write_array_attribute(const Checker& file, hid_t object, const char* name,
                           const std::vector<T>& values) {
  const hsize_t extent = values.size();
  Handle space(
      file.check(H5Screate_simple(1, &extent, nullptr), "H5Screate_simple", attribute_text(name)),
      H5Sclose);
  write_raw(file, object, name, NumberTypes<T>::stored(), NumberTypes<T>::memory(), space.get(),
            values.data());
}

template <class T>
T read_attribute(const Checker& file, hid_t object, const char* name, const char* expected) {
  const std::string what = attribute_text(name);
  Handle attribute = open_attribute(file, object, name, expected);
  const hssize_t points = element_count(file, attribute.get(), what);
  if (points != 1) {
    throw Error(ErrorKind::io, file.file() + ": " + what + " should hold one value, it holds " +
                                   std::to_string(points));
  }
  T value{};
  file.check_status(H5Aread(attribute.get(), NumberTypes<T>::memory(), &value), "H5Aread", what);
  return value;
}

template <class T>
std::vector<T> read_array_attribute(const Checker& file, hid_t object, const char* name,
                                    std::size_t count, const char* expected) {
  const std::string what = attribute_text(name);
  Handle attribute = open_attribute(file, object, name, expected);
  const hssize_t points = element_count(file, attribute.get(), what);
  if (points != static_cast<hssize_t>(count)) {
    throw Error(ErrorKind::io, file.file() + ": " + what + " should hold " + std::to_string(count) +
                                   " values, it holds " + std::to_string(points));
  }
  std::vector<T> values(count);
  file.check_status(H5Aread(attribute.get(), NumberTypes<T>::memory(), values.data()), "H5Aread",
                    what);
  return values;
}

#define FSDP_ATTRIBUTE_TYPE(T)                                                                     \
  template void write_attribute<T>(const Checker&, hid_t, const char*, T);                         \
  template void write_array_attribute<T>(const Checker&, hid_t, const char*,                       \
                                         const std::vector<T>&);                                   \
  template T read_attribute<T>(const Checker&, hid_t, const char*, const char*);                   \
  template std::vector<T> read_array_attribute<T>(const Checker&, hid_t, const char*, std::size_t, \
                                                  const char*);
FSDP_ATTRIBUTE_TYPE(std::int32_t)
FSDP_ATTRIBUTE_TYPE(std::int64_t)
FSDP_ATTRIBUTE_TYPE(std::uint64_t)
FSDP_ATTRIBUTE_TYPE(double)
#undef FSDP_ATTRIBUTE_TYPE

}  // namespace fsdp::hdf5
