// CollectiveGuard: what keeps a collective from corrupting data or hanging when ranks misbehave.
// The MPI backend starts each collective's signature check with start_check() and the collective
// once poll() finds the check passed, so that the caller does not wait for the other ranks; the
// NCCL backend, which enqueues its collectives at once, waits for the check in begin(). Both
// complete operations with wait_until(). Works on a private MPI communicator of its own, so it
// serves the NCCL backend as well as the MPI one.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "communicator.hpp"
#include "fsdp/comm/collective_options.hpp"
#include "fsdp/comm/reduce_op.hpp"
#include "fsdp/core/dtype.hpp"
#include "pairwise_minimum.hpp"

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

  // Two calls are the same collective when every field is the same: what an announced
  // collective must repeat when it is issued (the ranks' checks compare a hash of the fields).
  friend bool operator==(const CollectiveCall& a, const CollectiveCall& b) {
    return a.collective == b.collective && a.dtype == b.dtype && a.count == b.count &&
           a.root == b.root && a.reduce == b.reduce && a.layout == b.layout;
  }
};

// The calls of the collectives that can be announced (ProcessGroup::expect_*). The announcement
// and the collective build their call here, so that the two cannot drift apart.
inline CollectiveCall all_gather_call(std::size_t count, DType dtype) {
  return {Collective::all_gather, dtype, static_cast<std::int64_t>(count)};
}
inline CollectiveCall broadcast_call(std::size_t count, DType dtype, int root) {
  return {Collective::broadcast, dtype, static_cast<std::int64_t>(count), root};
}

// The call of a collective with per-rank counts (all_gather_v, scatter_v), with a hash of counts
// that is the same on every rank and platform.
CollectiveCall uneven_call(Collective collective, const std::vector<std::size_t>& counts,
                           std::size_t my_count, DType dtype, int root = -1);

// Identifies an operation in messages: "all_gather #12".
struct OperationId {
  Collective collective;
  std::int64_t sequence;
};

// One collective's signature check: a hash of (collective, dtype, count, root, reduce op, layout,
// "my arguments are invalid") compared over the ranks, and, only when the hashes differ, every
// rank's signature gathered to say how. MPI owns its buffers while a request is in flight: it is
// made on the heap by CollectiveGuard::start_check and must not move.
struct SignatureCheck {
  static constexpr std::size_t kFields = 7;
  static constexpr std::size_t kCountField = 2;
  static constexpr std::size_t kComplaintField = 6;
  // folded: a collective by exchange on 2 ranks, whose blocks say whether the ranks agree
  // (CollectiveGuard::settle_folded), until the other rank's ordinary check shows up.
  enum class Stage { folded, comparing, explaining, done };

  OperationId id;
  std::string problem;  // this rank's complaint about its own arguments, empty when none
  std::int64_t signature[kFields] = {};
  // (least hash, ~greatest hash) over the ranks, while comparing.
  std::unique_ptr<detail::PairwiseMinimum> range;
  std::vector<std::int64_t> signatures;    // every rank's, once the hashes differed
  MPI_Request request = MPI_REQUEST_NULL;  // their all-gather, while explaining
  Stage stage = Stage::done;
  unsigned folded_polls = 0;   // polls while folded
  std::exception_ptr failure;  // once done: why the collective must not start, or null
};

// Rank r's call as check.signatures holds it, and whether rank r found its own arguments invalid:
// once the hashes differed, when the signatures were gathered (they are empty otherwise).
CollectiveCall signature_call(const SignatureCheck& check, int rank);
bool signature_complains(const SignatureCheck& check, int rank);

// Where the guards of groups with the same ranks in the same order (a group and its congruent
// splits, such as a runtime's group for gathers) post their timeout notices, so that a rank stuck
// in one of them learns where the others are stuck, in any of them. Each guard has an id, the
// same on every rank (splits are made in the same order everywhere).
struct NoticeBoard {
  std::vector<std::pair<int, MPI_Comm>> guards;  // id, the guard's communicator
  int next_id = 0;
};

class CollectiveGuard {
 public:
  // Duplicates comm for its own messages. Collective over comm.
  CollectiveGuard(MPI_Comm comm, const CollectiveOptions& options);
  ~CollectiveGuard();
  CollectiveGuard(const CollectiveGuard&) = delete;
  CollectiveGuard& operator=(const CollectiveGuard&) = delete;

  // At most this many checks may be unfinished at once (each has a message tag of its own):
  // whoever starts checks without waiting for them finishes the oldest one first.
  static constexpr std::int64_t kChecksInFlight = 256;

  const CollectiveOptions& options() const { return options_; }
  // The number start_check() gives the next collective.
  std::int64_t next_sequence() const { return next_sequence_; }
  int rank() const { return comm_.rank(); }
  int size() const { return comm_.size(); }

  // Numbers the operation and, when checks are on, starts the check that every rank calls the
  // same collective with the same arguments and that none found its own arguments invalid
  // (problem is this rank's complaint from ArgumentCheck, empty when none). The check runs while
  // the caller goes on; poll() advances it. With checks off a local problem throws here, on this
  // rank only, and the check returned is already done.
  //
  // folded (for a collective by exchange on a group of 2 ranks, whose blocks carry its
  // signature: block_exchange.hpp) sends nothing: the caller settles the check with
  // settle_folded() once the other rank's block has shown its call, and poll() turns it into an
  // ordinary check if the other rank's words arrive instead (a rank that announced the
  // collective, or called another). With 2 ranks the other rank's words reach this one directly.
  std::unique_ptr<SignatureCheck> start_check(const CollectiveCall& call,
                                              const std::string& problem, bool folded = false);
  // Ends a folded check from every rank's call (calls[r] is rank r's), with a failure when they
  // differ. Only while check.stage is folded.
  void settle_folded(SignatureCheck& check, const std::vector<CollectiveCall>& calls);
  // Turns a folded check into an ordinary one (its words leave now): for the caller that learned
  // from a block that the other rank checks the ordinary way.
  void join(SignatureCheck& check) { start_minimum(check); }
  // Advances check; true once it is done, when check.failure says whether the collective may
  // start: null, or the fsdp::Error that every rank holds for it (a mismatch, or a rank's invalid
  // arguments). Throws only for MPI's own errors.
  bool poll(SignatureCheck& check);
  // start_check, waited for: throws the check's failure on every rank.
  OperationId begin(const CollectiveCall& call, const std::string& problem);
  // Takes a check that is not done from an operation that gave up on it (a timeout): MPI may
  // still write its buffers, so they live until the process exits.
  void abandon(std::unique_ptr<SignatureCheck> check);

  // Calls poll() until it returns true. Throws fsdp::Error naming the operation and the ranks that
  // did not arrive when options().timeout_s passes first; the group is unusable afterwards.
  void wait_until(const OperationId& id, const std::function<bool()>& poll);
  // wait_until for one MPI request, with MPI_Wait when there is no timeout.
  void wait(const OperationId& id, MPI_Request& request);

  // "all_gather(count=4, dtype=fp32)", for messages.
  std::string describe(const CollectiveCall& call) const;

  // Posts and reads timeout notices with the guards of parent as well, when this group has its
  // ranks in the same order (MPI_CONGRUENT); else keeps its own. Collective: every rank of the
  // group calls it (a split of parent does, when it is made).
  void share_notices_with(const CollectiveGuard& parent);

  // Throws if an earlier timeout made this group unusable.
  void ensure_usable(Collective collective) const;
  // Makes this group unusable on this rank (ensure_usable throws, naming reason): after a failure
  // the other ranks cannot learn of, which may leave them in a collective this rank never joins.
  void break_group(const std::string& reason);

 private:
  // Sends the check's words (its stage becomes comparing).
  void start_minimum(SignatureCheck& check);
  std::exception_ptr difference(const SignatureCheck& check) const;
  [[noreturn]] void fail_after_timeout(const OperationId& id);

  detail::Communicator comm_;
  CollectiveOptions options_;
  std::int64_t next_sequence_ = 0;
  std::string failure_;  // non-empty once a failure (a timeout, break_group) broke the group
  // After a timeout, notices may still be in flight on comm_: it is left to MPI_Finalize/Abort.
  bool abandon_communicator_ = false;
  std::shared_ptr<NoticeBoard> board_;
  int board_id_ = 0;
  struct Notice {
    std::int64_t sequence;
    std::int64_t group;  // the NoticeBoard id of the guard that waits
    char operation[32];
  } notice_{};  // outlives the sends of fail_after_timeout()
};

}  // namespace fsdp
