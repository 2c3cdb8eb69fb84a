// CollectiveGuard: what keeps a collective from corrupting data or hanging when ranks misbehave.
// Backends call begin() before issuing an operation and wait_until() to complete it. Works on a
// private MPI communicator of its own, so it serves the NCCL backend as well as the MPI one.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "communicator.hpp"
#include "fsdp/comm/collective_options.hpp"
#include "fsdp/comm/reduce_op.hpp"
#include "fsdp/core/dtype.hpp"

namespace fsdp {

enum class Collective : std::int64_t {
  all_gather = 1,
  all_gather_v,
  reduce_scatter,
  all_reduce,
  broadcast,
  barrier,
  reduce,
  scatter_v
};
const char* name_of(Collective collective);

// What every rank must agree on for one collective.
struct CollectiveCall {
  Collective collective = Collective::barrier;
  DType dtype = DType::f32;
  std::int64_t count = 0;    // elements this rank sends (all_gather_v) or per rank
  std::int64_t root = -1;    // broadcast, reduce, scatter_v
  std::int64_t reduce = -1;  // ReduceOp for reductions
  std::uint64_t layout = 0;  // all_gather_v: hash of the counts vector
};

// The call of a collective with per-rank counts (all_gather_v, scatter_v), with a hash of counts
// that is the same on every rank and platform.
CollectiveCall uneven_call(Collective collective, const std::vector<std::size_t>& counts,
                           std::size_t my_count, DType dtype, int root = -1);

// Identifies an operation in messages: "all_gather #12".
struct OperationId {
  Collective collective;
  std::int64_t sequence;
};

class CollectiveGuard {
 public:
  // Duplicates comm for its own messages. Collective over comm.
  CollectiveGuard(MPI_Comm comm, const CollectiveOptions& options);
  ~CollectiveGuard();
  CollectiveGuard(const CollectiveGuard&) = delete;
  CollectiveGuard& operator=(const CollectiveGuard&) = delete;

  const CollectiveOptions& options() const { return options_; }
  int rank() const { return comm_.rank(); }
  int size() const { return comm_.size(); }

  // Numbers the operation and, when checks are on, verifies that every rank calls the same
  // collective with the same arguments and that none found its own arguments invalid (problem is
  // this rank's complaint from ArgumentCheck, empty when none). Throws fsdp::Error on every rank on
  // a mismatch; with checks off a local problem throws on this rank only.
  OperationId begin(const CollectiveCall& call, const std::string& problem);

  // Calls poll() until it returns true. Throws fsdp::Error naming the operation and the ranks that
  // did not arrive when options().timeout_s passes first; the group is unusable afterwards.
  void wait_until(const OperationId& id, const std::function<bool()>& poll);
  // wait_until for one MPI request, with MPI_Wait when there is no timeout.
  void wait(const OperationId& id, MPI_Request& request);

  // Throws if an earlier timeout made this group unusable.
  void ensure_usable(Collective collective) const;

 private:
  // A signature: collective, dtype, count, root, reduce op, layout, "my arguments are invalid".
  static constexpr std::size_t kSignatureFields = 7;
  static constexpr std::size_t kCountField = 2;
  static constexpr std::size_t kComplaintField = 6;
  bool same_on_every_rank(const OperationId& id, const std::int64_t (&signature)[kSignatureFields]);
  void explain_difference(const OperationId& id, const std::int64_t (&mine)[kSignatureFields],
                          const std::string& problem);
  [[noreturn]] void fail_after_timeout(const OperationId& id);
  std::string describe(const CollectiveCall& call) const;

  detail::Communicator comm_;
  CollectiveOptions options_;
  std::int64_t next_sequence_ = 0;
  std::string failure_;  // non-empty once a timeout broke the group
  struct Notice {
    std::int64_t sequence;
    char operation[32];
  } notice_{};  // outlives the sends of fail_after_timeout()
};

}  // namespace fsdp
