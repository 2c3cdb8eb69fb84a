#include "fsdp/io/row_major_boxes.hpp"

#include <string>

#include "fsdp/core/error.hpp"
#include "fsdp/core/text.hpp"

namespace fsdp {
namespace {

// Boxes of [begin, end) within dimensions shape[d..], prefixed by the fixed leading indices.
void boxes_from(const std::vector<std::int64_t>& shape, std::size_t d,
                std::vector<std::int64_t>& prefix, std::int64_t begin, std::int64_t end,
                std::vector<Box>& out) {
  if (begin >= end) {
    return;
  }
  const std::size_t rank = shape.size();
  std::int64_t inner = 1;  // elements of one index step in dimension d
  for (std::size_t k = d + 1; k < rank; ++k) {
    inner *= shape[k];
  }
  auto emit = [&](std::int64_t first_row, std::int64_t rows) {
    Box box;
    box.start = prefix;
    box.start.push_back(first_row);
    box.count.assign(prefix.size(), 1);
    box.count.push_back(rows);
    for (std::size_t k = d + 1; k < rank; ++k) {
      box.start.push_back(0);
      box.count.push_back(shape[k]);
    }
    out.push_back(std::move(box));
  };
  auto within_row = [&](std::int64_t row, std::int64_t from, std::int64_t to) {
    prefix.push_back(row);
    boxes_from(shape, d + 1, prefix, from, to, out);
    prefix.pop_back();
  };
  std::int64_t row = begin / inner;
  const std::int64_t last_row = (end - 1) / inner;
  if (row == last_row && !(begin % inner == 0 && end % inner == 0)) {
    within_row(row, begin - row * inner, end - row * inner);  // inside one row
    return;
  }
  if (begin % inner != 0) {  // the tail of the first row
    within_row(row, begin - row * inner, inner);
    ++row;
  }
  const std::int64_t full_end = end / inner;  // rows [row, full_end) are whole
  if (full_end > row) {
    emit(row, full_end - row);
  }
  if (end % inner != 0) {  // the head of the last row
    within_row(full_end, 0, end - full_end * inner);
  }
}

}  // namespace

std::vector<Box> row_major_boxes(const std::vector<std::int64_t>& shape, std::int64_t begin,
                                 std::int64_t end) {
  const std::vector<std::int64_t> dims = shape.empty() ? std::vector<std::int64_t>{1} : shape;
  std::int64_t numel = 1;
  for (std::int64_t extent : dims) {
    require(extent >= 1, "row_major_boxes: shape " + shape_text(shape) +
                             " has a dimension < 1; every dimension must be >= 1");
    numel *= extent;
  }
  require(0 <= begin && begin <= end && end <= numel,
          "row_major_boxes: elements [" + std::to_string(begin) + ", " + std::to_string(end) +
              ") are not within the " + std::to_string(numel) + " elements of shape " +
              shape_text(shape));
  std::vector<Box> out;
  std::vector<std::int64_t> prefix;
  boxes_from(dims, 0, prefix, begin, end, out);
  return out;
}

}  // namespace fsdp
