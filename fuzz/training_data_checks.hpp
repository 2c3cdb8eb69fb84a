// What a training set read from a file must be when fsdp_train::read_hdf5 accepts it: shapes
// that agree with the vectors, class numbers within the class count (within kMaxClasses), finite
// features. Both dataset targets check every set they get.
#pragma once

#include <cmath>
#include <string>

#include "fsdp-train/dataset.hpp"
#include "reader_contract.hpp"

namespace fsdp_fuzz {

inline void expect_usable(const fsdp_train::Dataset& data) {
  if (data.samples < 2 || data.dim < 1 ||
      data.features.size() !=
          static_cast<std::size_t>(data.samples) * static_cast<std::size_t>(data.dim) ||
      data.labels.size() != static_cast<std::size_t>(data.samples)) {
    finding("read_hdf5 returned inconsistent shapes: " + data.description);
  }
  if (data.classes < 2 || data.classes > fsdp_train::kMaxClasses) {
    finding("read_hdf5 returned " + std::to_string(data.classes) + " classes");
  }
  for (std::int64_t label : data.labels) {
    if (label < 0 || label >= data.classes) {
      finding("read_hdf5 returned label " + std::to_string(label) + " of " +
              std::to_string(data.classes) + " classes");
    }
  }
  for (double x : data.features) {
    if (!std::isfinite(x)) {
      finding("read_hdf5 returned a feature that is not finite");
    }
  }
}

}  // namespace fsdp_fuzz
