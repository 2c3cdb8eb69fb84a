// row_major_boxes: every run of every small shape, checked by enumerating the boxes' elements in
// row-major order (what an HDF5 hyperslab union transfers) against the run itself.
#include <boost/test/unit_test.hpp>
#include <cstdint>
#include <vector>

#include "error_message.hpp"
#include "fsdp/core/error.hpp"
#include "fsdp/io/row_major_boxes.hpp"

using namespace fsdp;
using namespace fsdp::test;

namespace {

std::int64_t flat_index(const std::vector<std::int64_t>& dims,
                        const std::vector<std::int64_t>& at) {
  std::int64_t flat = 0;
  for (std::size_t d = 0; d < dims.size(); ++d) {
    flat = flat * dims[d] + at[d];
  }
  return flat;
}

// Marks every element of box, in the box's own row-major order, appending flat indices.
void elements_of(const std::vector<std::int64_t>& dims, const Box& box,
                 std::vector<std::int64_t>& out) {
  std::vector<std::int64_t> at = box.start;
  const std::size_t rank = dims.size();
  for (;;) {
    out.push_back(flat_index(dims, at));
    std::size_t d = rank;
    while (d-- > 0) {
      if (++at[d] < box.start[d] + box.count[d]) {
        break;
      }
      at[d] = box.start[d];
      if (d == 0) {
        return;
      }
    }
  }
}

}  // namespace

BOOST_AUTO_TEST_CASE(every_run_of_small_shapes_is_covered_exactly_in_order) {
  const std::vector<std::vector<std::int64_t>> shapes = {
      {}, {1}, {7}, {3, 5}, {1, 4}, {4, 1}, {2, 3, 4}, {3, 1, 2, 2}, {2, 2, 2, 2, 3}};
  for (const auto& shape : shapes) {
    const std::vector<std::int64_t> dims = shape.empty() ? std::vector<std::int64_t>{1} : shape;
    std::int64_t numel = 1;
    for (auto e : dims) {
      numel *= e;
    }
    for (std::int64_t begin = 0; begin <= numel; ++begin) {
      for (std::int64_t end = begin; end <= numel; ++end) {
        const std::vector<Box> boxes = row_major_boxes(shape, begin, end);
        BOOST_TEST_CONTEXT("shape rank " << shape.size() << " numel " << numel << " run [" << begin
                                         << ", " << end << ")") {
          BOOST_TEST(boxes.size() <= 2 * dims.size() - 1);
          std::vector<std::int64_t> seen;
          for (const Box& box : boxes) {
            BOOST_TEST(box.start.size() == dims.size());
            BOOST_TEST(box.count.size() == dims.size());
            for (std::size_t d = 0; d < dims.size(); ++d) {
              BOOST_TEST(box.count[d] >= 1);
              BOOST_TEST(box.start[d] + box.count[d] <= dims[d]);
            }
            elements_of(dims, box, seen);
          }
          std::vector<std::int64_t> expected;
          for (std::int64_t k = begin; k < end; ++k) {
            expected.push_back(k);
          }
          BOOST_TEST(seen == expected, boost::test_tools::per_element());
        }
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(whole_rows_are_one_box) {
  const std::vector<Box> boxes = row_major_boxes({4, 6}, 6, 18);
  BOOST_TEST(boxes.size() == 1u);
  BOOST_TEST((boxes[0] == Box{{1, 0}, {2, 6}}));
}

BOOST_AUTO_TEST_CASE(runs_outside_the_array_are_errors) {
  BOOST_CHECK_EXCEPTION(row_major_boxes({3, 5}, 4, 16), Error,
                        message_has("elements [4, 16) are not within the 15 elements"));
  BOOST_CHECK_EXCEPTION(row_major_boxes({3, 5}, 5, 4), Error, message_has("elements [5, 4)"));
  BOOST_CHECK_EXCEPTION(row_major_boxes({3, 0}, 0, 0), Error, message_has("has a dimension < 1"));
}
