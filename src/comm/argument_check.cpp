#include "argument_check.hpp"

#include <climits>
#include <numeric>

namespace fsdp {

ArgumentCheck::ArgumentCheck(Collective collective, int rank, int size)
    : collective_(collective), rank_(rank), size_(size) {}

std::string ArgumentCheck::where() const {
  return std::string(name_of(collective_)) + " on rank " + std::to_string(rank_) + ": ";
}

ArgumentCheck& ArgumentCheck::dtype(DType dtype) {
  if (problem_.empty() && static_cast<int>(dtype) > static_cast<int>(DType::i64)) {
    problem_ = where() + "invalid DType value " + std::to_string(static_cast<int>(dtype)) +
               "; use one of fp32, fp64, bf16, fp16, int32, int64";
  }
  return *this;
}

ArgumentCheck& ArgumentCheck::root(int root) {
  if (problem_.empty() && (root < 0 || root >= size_)) {
    problem_ = where() + "root " + std::to_string(root) + " is not a rank of this group (0.." +
               std::to_string(size_ - 1) + ")";
  }
  return *this;
}

ArgumentCheck& ArgumentCheck::reduction(DType dtype, ReduceOp op) {
  if (!problem_.empty()) {
    return *this;
  }
  const int value = static_cast<int>(op);
  if (value < static_cast<int>(ReduceOp::sum) || value > static_cast<int>(ReduceOp::min)) {
    problem_ =
        where() + "invalid ReduceOp value " + std::to_string(value) + "; use sum, avg, max or min";
  } else if (op == ReduceOp::avg && !is_floating(dtype)) {
    problem_ = where() + "ReduceOp::avg needs a floating dtype, got " + name_of(dtype) +
               "; use ReduceOp::sum and divide yourself";
  }
  return *this;
}

ArgumentCheck& ArgumentCheck::uneven_counts(const std::vector<std::size_t>& counts,
                                            std::size_t my_count) {
  if (!problem_.empty()) {
    return *this;
  }
  if (counts.size() != static_cast<std::size_t>(size_)) {
    problem_ = where() + "counts has " + std::to_string(counts.size()) +
               " entries; it needs one per rank (" + std::to_string(size_) + ")";
  } else if (counts[static_cast<std::size_t>(rank_)] != my_count) {
    problem_ = where() + "this rank's count " + std::to_string(my_count) + " differs from counts[" +
               std::to_string(rank_) +
               "] = " + std::to_string(counts[static_cast<std::size_t>(rank_)]);
  }
  return fits_int(std::accumulate(counts.begin(), counts.end(), std::size_t{0}), "sum of counts");
}

ArgumentCheck& ArgumentCheck::fits_int(std::size_t elements, const char* what) {
  if (problem_.empty() && elements > static_cast<std::size_t>(INT_MAX)) {
    problem_ = where() + std::to_string(elements) + " elements (" + what +
               ") exceed the int count limit of collectives (" + std::to_string(INT_MAX) +
               "); split the buffer into smaller collectives";
  }
  return *this;
}

}  // namespace fsdp
