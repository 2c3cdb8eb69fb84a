// row_major_boxes: a run of elements of a row-major N-D array as rectangular boxes, the form
// HDF5 hyperslab selections take. A rank's flat piece of a tensor is such a run.
#pragma once

#include <cstdint>
#include <vector>

namespace fsdp {

// A rectangular block of an N-D array: start[d] <= index[d] < start[d] + count[d].
struct Box {
  std::vector<std::int64_t> start;
  std::vector<std::int64_t> count;
  bool operator==(const Box& o) const { return start == o.start && count == o.count; }
  bool operator!=(const Box& o) const { return !(*this == o); }
};

// The elements [begin, end) of the flattened (row-major) array of the given shape, as disjoint
// boxes in element order: at most 2 * rank - 1 of them (a partial row, whole rows, a partial
// row, recursively per dimension). Read in row-major order, their union is exactly the run, so a
// contiguous buffer of end - begin elements matches the selection one to one. A scalar (empty
// shape) is a 1-element array of rank 1 here. Throws fsdp::Error unless
// 0 <= begin <= end <= numel; an empty run gives no boxes.
std::vector<Box> row_major_boxes(const std::vector<std::int64_t>& shape, std::int64_t begin,
                                 std::int64_t end);

}  // namespace fsdp
