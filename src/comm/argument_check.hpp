// ArgumentCheck: what ProcessGroup checks in a collective's arguments before any backend sees
// them, so that every backend refuses exactly the same calls with exactly the same words.
// The result is not thrown here: the backend hands it to its CollectiveGuard, which fails the
// collective on every rank ("my arguments are invalid") instead of leaving the others waiting.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "collective_guard.hpp"
#include "fsdp/comm/reduce_op.hpp"
#include "fsdp/core/dtype.hpp"

namespace fsdp {

// Each check is skipped once one has failed: problem() is the first thing found wrong, saying
// what was wrong and what would be right, or empty when the arguments are fine.
class ArgumentCheck {
 public:
  ArgumentCheck(Collective collective, int rank, int size);

  // dtype is one of the DType values.
  ArgumentCheck& dtype(DType dtype);
  // root is a rank of the group.
  ArgumentCheck& root(int root);
  // op is a ReduceOp value, and avg only for floating dtypes (integers would truncate silently).
  ArgumentCheck& reduction(DType dtype, ReduceOp op);
  // all_gather_v, scatter_v: counts has one entry per rank, my_count == counts[rank], and their
  // sum fits an int.
  ArgumentCheck& uneven_counts(const std::vector<std::size_t>& counts, std::size_t my_count);
  // Counts travel as int (MPI's count type): elements, described by what, must fit one.
  ArgumentCheck& fits_int(std::size_t elements, const char* what);

  const std::string& problem() const { return problem_; }

 private:
  // "fsdp: <collective> on rank <r>: "
  std::string where() const;

  Collective collective_;
  int rank_;
  int size_;
  std::string problem_;
};

}  // namespace fsdp
