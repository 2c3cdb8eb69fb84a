#include "collective_guard.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <iterator>
#include <limits>
#include <map>
#include <mutex>
#include <sstream>
#include <vector>

#include "backoff.hpp"
#include "fsdp/core/error.hpp"
#include "hash.hpp"
#include "mpi_types.hpp"

namespace fsdp {
namespace {

constexpr int kNoticeTag = 7301;
// The signature checks' messages: a tag of their own for each of 4 * kChecksInFlight consecutive
// collectives, so that no check's message can be taken for another's. A rank's unfinished check
// can meet another rank's message of a later collective only from a rank that many ahead, and no
// rank gets 2 * kChecksInFlight ahead of another's unfinished check (each rank has fewer than
// kChecksInFlight unfinished, and a check finishes only once every rank has started it). A
// folded check (start_check) probes for any message with its tag, not only its partner's.
constexpr int kCheckTags = 8192;

int check_tag(const OperationId& id) {
  return kCheckTags + static_cast<int>(id.sequence % (4 * CollectiveGuard::kChecksInFlight));
}
constexpr int kMaxRanksNamed = 8;
constexpr unsigned kFoldedPollsPerProbe = 16;

using Clock = std::chrono::steady_clock;

std::string id_text(const OperationId& id) {
  return std::string(name_of(id.collective)) + " #" + std::to_string(id.sequence);
}

// "0, 2, 5" with at most kMaxRanksNamed names.
std::string rank_list(const std::vector<int>& ranks) {
  std::ostringstream text;
  for (std::size_t i = 0; i < ranks.size() && i < kMaxRanksNamed; ++i) {
    text << (i ? ", " : "") << ranks[i];
  }
  if (ranks.size() > kMaxRanksNamed) {
    text << " and " << ranks.size() - kMaxRanksNamed << " more";
  }
  return text.str();
}

// With per-rank counts (all_gather_v, scatter_v) ranks legitimately pass different counts; all
// else must be identical.
bool count_may_differ(Collective collective) {
  return collective == Collective::all_gather_v || collective == Collective::scatter_v;
}

}  // namespace

const char* name_of(Collective collective) {
  switch (collective) {
    case Collective::all_gather:
      return "all_gather";
    case Collective::all_gather_v:
      return "all_gather_v";
    case Collective::reduce_scatter:
      return "reduce_scatter";
    case Collective::all_reduce:
      return "all_reduce";
    case Collective::broadcast:
      return "broadcast";
    case Collective::barrier:
      return "barrier";
    case Collective::reduce:
      return "reduce";
    case Collective::scatter_v:
      return "scatter_v";
  }
  return "unknown collective";
}

CollectiveCall uneven_call(Collective collective, const std::vector<std::size_t>& counts,
                           std::size_t my_count, DType dtype, int root) {
  CollectiveCall call{collective, dtype, static_cast<std::int64_t>(my_count), root};
  std::uint64_t hash = detail::kFnvOffsetBasis;
  for (std::size_t count : counts) {
    hash = detail::fnv1a_word(count, hash);
  }
  call.layout = hash >> 1;  // fits the int64 of the signature exchange
  return call;
}

namespace {

std::int64_t signature_field(const SignatureCheck& check, int rank, std::size_t field) {
  return check.signatures[SignatureCheck::kFields * static_cast<std::size_t>(rank) + field];
}

}  // namespace

CollectiveCall signature_call(const SignatureCheck& check, int rank) {
  CollectiveCall call;
  call.collective = static_cast<Collective>(signature_field(check, rank, 0));
  call.dtype = static_cast<DType>(signature_field(check, rank, 1));
  call.count = signature_field(check, rank, SignatureCheck::kCountField);
  call.root = signature_field(check, rank, 3);
  call.reduce = signature_field(check, rank, 4);
  call.layout = static_cast<std::uint64_t>(signature_field(check, rank, 5));
  return call;
}

bool signature_complains(const SignatureCheck& check, int rank) {
  return signature_field(check, rank, SignatureCheck::kComplaintField) != 0;
}

CollectiveGuard::CollectiveGuard(MPI_Comm comm, const CollectiveOptions& options)
    : comm_(detail::Communicator::duplicate(comm, "CollectiveGuard")),
      options_(options),
      board_(std::make_shared<NoticeBoard>()) {
  board_id_ = board_->next_id++;
  board_->guards.emplace_back(board_id_, comm_.get());
  // A rank that checks exchanges a signature before each collective; one that does not goes
  // straight into it. Mixed, they would pair a signature with data: agree first, on every rank.
  // The lowest rank that checks and the lowest that does not, in one all-reduce (the duplicate
  // above has just synchronized every rank, so this cannot wait for long).
  // The same all-reduce finds the lowest rank whose environment was malformed
  // (CollectiveOptions::environment_error), whose words then reach every rank.
  const std::int64_t none = std::numeric_limits<std::int64_t>::max();
  const std::int64_t rank = comm_.rank();
  std::int64_t lowest[3] = {options_.check_arguments ? rank : none,
                            options_.check_arguments ? none : rank,
                            options_.environment_error.empty() ? none : rank};
  mpi::check(MPI_Allreduce(MPI_IN_PLACE, lowest, 3, MPI_INT64_T, MPI_MIN, comm_.get()),
             "MPI_Allreduce (collective check agreement)", comm_.rank());
  if (lowest[2] != none) {
    const int root = static_cast<int>(lowest[2]);
    std::string problem = options_.environment_error;
    int length = static_cast<int>(std::min<std::size_t>(problem.size(), 4096));
    mpi::check(MPI_Bcast(&length, 1, MPI_INT, root, comm_.get()),
               "MPI_Bcast (environment error length)", comm_.rank());
    problem.resize(static_cast<std::size_t>(length));
    mpi::check(MPI_Bcast(problem.data(), length, MPI_CHAR, root, comm_.get()),
               "MPI_Bcast (environment error)", comm_.rank());
    throw Error("the environment of rank " + std::to_string(root) + " is not understood: " +
                problem + " (every rank of a process group checks it when the group is made)");
  }
  if (lowest[0] != none && lowest[1] != none) {
    throw Error(ErrorKind::mismatch,
                "ranks disagree on checking collectives: rank " + std::to_string(lowest[0]) +
                    " checks every collective's signature but rank " + std::to_string(lowest[1]) +
                    " does not (FSDP_CHECK_COLLECTIVES=0 or CollectiveOptions::check_arguments "
                    "false); give every rank the same FSDP_CHECK_COLLECTIVES");
  }
}

void CollectiveGuard::share_notices_with(const CollectiveGuard& parent) {
  int relation = MPI_UNEQUAL;
  mpi::check(MPI_Comm_compare(parent.comm_.get(), comm_.get(), &relation),
             "MPI_Comm_compare (collective guard)", comm_.rank());
  if (relation != MPI_CONGRUENT || parent.board_ == board_) {
    return;
  }
  board_ = parent.board_;
  board_id_ = board_->next_id++;
  board_->guards.emplace_back(board_id_, comm_.get());
}

CollectiveGuard::~CollectiveGuard() {
  auto& guards = board_->guards;
  guards.erase(std::remove_if(guards.begin(), guards.end(),
                              [&](const auto& guard) { return guard.first == board_id_; }),
               guards.end());
  // After a timeout, notices may still be in flight on comm_: leave it to MPI_Finalize/Abort.
  // A group broken otherwise (break_group) frees it: the requests of an abandoned check keep it
  // until they complete, as MPI_Comm_free allows.
  if (abandon_communicator_) {
    comm_.abandon();
  }
}

void CollectiveGuard::ensure_usable(Collective collective) const {
  if (!failure_.empty()) {
    throw Error(std::string(name_of(collective)) +
                " on a process group that an earlier failure made unusable (" + failure_ +
                "); end the job with MPI_Abort");
  }
}

void CollectiveGuard::break_group(const std::string& reason) {
  if (failure_.empty()) {
    failure_ = reason;
  }
}

std::string CollectiveGuard::describe(const CollectiveCall& call) const {
  std::ostringstream text;
  const bool uneven = count_may_differ(call.collective);
  text << name_of(call.collective) << "(";
  if (call.collective != Collective::barrier) {
    text << (uneven ? "my_count=" : "count=") << call.count << ", dtype=" << name_of(call.dtype);
  }
  if (call.root >= 0) {
    text << ", root=" << call.root;
  }
  if (call.reduce >= 0) {
    text << ", op=" << name_of(static_cast<ReduceOp>(call.reduce));
  }
  if (uneven) {
    text << ", counts hash=" << std::hex << call.layout << std::dec;
  }
  text << ")";
  return text.str();
}

std::unique_ptr<SignatureCheck> CollectiveGuard::start_check(const CollectiveCall& call,
                                                             const std::string& problem,
                                                             bool folded) {
  ensure_usable(call.collective);
  auto check = std::make_unique<SignatureCheck>();
  check->id = OperationId{call.collective, next_sequence_++};
  if (!options_.check_arguments) {
    if (!problem.empty()) {
      throw Error(problem);
    }
    return check;
  }
  check->problem = problem;
  const std::int64_t signature[SignatureCheck::kFields] = {
      static_cast<std::int64_t>(call.collective),
      static_cast<std::int64_t>(call.dtype),
      call.count,
      call.root,
      call.reduce,
      static_cast<std::int64_t>(call.layout),
      problem.empty() ? 0 : 1};
  std::copy(std::begin(signature), std::end(signature), check->signature);
  if (folded) {
    check->stage = SignatureCheck::Stage::folded;
  } else {
    start_minimum(*check);
  }
  return check;
}

void CollectiveGuard::start_minimum(SignatureCheck& check) {
  // The cheap check, on by default in every build: the least and the greatest hash of the
  // signature over the ranks, in one minimum of two words (min of (h, ~h) is (least h, ~greatest
  // h)). O(log N) steps of 16 bytes whatever the group size; the full exchange (poll) runs only
  // when they differ, to say how.
  std::uint64_t hash = detail::kFnvOffsetBasis;
  for (std::size_t i = 0; i < SignatureCheck::kFields; ++i) {
    const bool per_rank = i == SignatureCheck::kCountField && count_may_differ(check.id.collective);
    hash = detail::fnv1a_word(per_rank ? 0 : static_cast<std::uint64_t>(check.signature[i]), hash);
  }
  const std::int64_t range[2] = {static_cast<std::int64_t>(hash), ~static_cast<std::int64_t>(hash)};
  check.range = std::make_unique<detail::PairwiseMinimum>(comm_.get(), check_tag(check.id), range);
  check.stage = SignatureCheck::Stage::comparing;
}

void CollectiveGuard::settle_folded(SignatureCheck& check,
                                    const std::vector<CollectiveCall>& calls) {
  check.stage = SignatureCheck::Stage::done;
  if (std::all_of(calls.begin(), calls.end(),
                  [&](const CollectiveCall& call) { return call == calls.front(); })) {
    return;
  }
  // They differ: every rank's signature, for the message and for the ranks that sent blocks.
  check.signatures.assign(SignatureCheck::kFields * calls.size(), 0);
  for (std::size_t r = 0; r < calls.size(); ++r) {
    const CollectiveCall& c = calls[r];
    const std::int64_t fields[SignatureCheck::kFields] = {static_cast<std::int64_t>(c.collective),
                                                          static_cast<std::int64_t>(c.dtype),
                                                          c.count,
                                                          c.root,
                                                          c.reduce,
                                                          static_cast<std::int64_t>(c.layout),
                                                          0};
    std::copy(std::begin(fields), std::end(fields),
              check.signatures.begin() + static_cast<std::ptrdiff_t>(SignatureCheck::kFields * r));
  }
  check.failure = difference(check);
}

bool CollectiveGuard::poll(SignatureCheck& check) {
  if (check.stage == SignatureCheck::Stage::done) {
    return true;
  }
  if (check.stage == SignatureCheck::Stage::folded) {
    // Another rank checks this collective the ordinary way (it announced it, or called another
    // collective): join it, since it waits for this rank's words. Looked for at every 16th poll
    // only: a probe that finds nothing costs as much as a poll of the exchange itself, and that
    // case is the rare one. Where the other rank checks the ordinary way, this rank's words leave
    // up to 16 polls later.
    if (++check.folded_polls % kFoldedPollsPerProbe != 0) {
      return false;
    }
    int arrived = 0;
    mpi::check(
        MPI_Iprobe(MPI_ANY_SOURCE, check_tag(check.id), comm_.get(), &arrived, MPI_STATUS_IGNORE),
        "MPI_Iprobe (collective argument check)", comm_.rank());
    if (!arrived) {
      return false;  // or settle_folded() decides
    }
    start_minimum(check);
  }
  if (check.stage == SignatureCheck::Stage::comparing) {
    if (!check.range->poll()) {
      return false;
    }
    const std::int64_t* range = check.range->words();
    if (range[0] != ~range[1]) {
      // The hashes differ on every rank alike, so every rank comes here for the same collective:
      // all-gather the signatures, to name what each rank called.
      check.signatures.resize(SignatureCheck::kFields * static_cast<std::size_t>(comm_.size()));
      mpi::check(MPI_Iallgather(check.signature, SignatureCheck::kFields, MPI_INT64_T,
                                check.signatures.data(), SignatureCheck::kFields, MPI_INT64_T,
                                comm_.get(), &check.request),
                 "MPI_Iallgather (collective argument check)", comm_.rank());
      check.stage = SignatureCheck::Stage::explaining;
      return false;
    }
  } else {
    int done = 0;
    mpi::check(MPI_Test(&check.request, &done, MPI_STATUS_IGNORE),
               "MPI_Test (collective argument check)", comm_.rank());
    if (!done) {
      return false;
    }
  }
  if (check.stage == SignatureCheck::Stage::explaining) {
    check.failure = difference(check);
  } else if (!check.problem.empty()) {
    // Every rank found the same: every rank's own arguments are wrong.
    check.failure = std::make_exception_ptr(Error(check.problem));
  }
  check.stage = SignatureCheck::Stage::done;
  return true;
}

OperationId CollectiveGuard::begin(const CollectiveCall& call, const std::string& problem) {
  std::unique_ptr<SignatureCheck> check = start_check(call, problem);
  try {
    wait_until(check->id, [&] { return poll(*check); });
  } catch (...) {
    abandon(std::move(check));
    throw;
  }
  if (check->failure) {
    std::rethrow_exception(check->failure);
  }
  return check->id;
}

void CollectiveGuard::abandon(std::unique_ptr<SignatureCheck> check) {
  // MPI may still write into its buffers after the group is gone (a timeout leaves the guard's
  // communicator to MPI_Finalize or MPI_Abort): it stays reachable until the process exits.
  if (check && check->stage != SignatureCheck::Stage::done) {
    static std::mutex mutex;
    static std::vector<std::unique_ptr<SignatureCheck>> abandoned;
    const std::lock_guard<std::mutex> lock(mutex);
    abandoned.push_back(std::move(check));
  }
}

// What every rank raises for a collective whose signatures differ (check.signatures holds every
// rank's): the rank's own complaint, or who called what. Null when they differ only where they
// may (per-rank counts).
std::exception_ptr CollectiveGuard::difference(const SignatureCheck& check) const {
  std::vector<int> complaining;
  for (int r = 0; r < comm_.size(); ++r) {
    if (signature_complains(check, r)) {
      complaining.push_back(r);
    }
  }
  if (!complaining.empty()) {
    if (!check.problem.empty()) {
      return std::make_exception_ptr(Error(check.problem));
    }
    return std::make_exception_ptr(
        Error(ErrorKind::mismatch, id_text(check.id) + ": rank(s) " + rank_list(complaining) +
                                       " passed invalid arguments (their error says which); no "
                                       "rank entered the collective"));
  }

  const bool uneven = count_may_differ(check.id.collective);
  std::map<std::string, std::vector<int>> ranks_by_call;
  for (int r = 0; r < comm_.size(); ++r) {
    CollectiveCall c = signature_call(check, r);
    if (uneven) {
      c.count = 0;
    }
    ranks_by_call[describe(c)].push_back(r);
  }
  if (ranks_by_call.size() <= 1) {
    return nullptr;
  }
  std::ostringstream text;
  text << "ranks disagree on collective #" << check.id.sequence << " of a group of " << comm_.size()
       << ":";
  for (const auto& [description, ranks] : ranks_by_call) {
    text << " rank" << (ranks.size() > 1 ? "s " : " ") << rank_list(ranks) << " called "
         << description << ";";
  }
  text << " every rank must call the same collective with the same "
       << (uneven ? "counts vector" : "count") << ", dtype, root and op";
  return std::make_exception_ptr(Error(ErrorKind::mismatch, text.str()));
}

// Not MPI_Wait, even without a timeout: Open MPI's wait busy-polls unless told to yield
// (mpiexec tells it when it oversubscribes, srun never does), and the polls then take the core
// from the rank being waited for (backoff.hpp).
void CollectiveGuard::wait(const OperationId& id, MPI_Request& request) {
  wait_until(id, [&] {
    int done = 0;
    mpi::check(MPI_Test(&request, &done, MPI_STATUS_IGNORE), name_of(id.collective), comm_.rank());
    return done != 0;
  });
}

void CollectiveGuard::wait_until(const OperationId& id, const std::function<bool()>& poll) {
  if (poll()) {
    return;
  }
  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                           std::chrono::duration<double>(options_.timeout_s));
  Backoff backoff;
  for (unsigned polls = 1;; ++polls) {
    if (poll()) {
      return;
    }
    // Reading the clock costs more than a poll; look at it now and then.
    if (options_.timeout_s > 0 && polls % 256 == 0 && Clock::now() > deadline) {
      fail_after_timeout(id);
    }
    backoff.pause();
  }
}

void CollectiveGuard::fail_after_timeout(const OperationId& id) {
  // Tell every other rank where this one is stuck, then listen for a while to learn where they
  // are: a rank that says nothing never reached a collective of this group.
  // On the communicator of every guard of these ranks (NoticeBoard), so that the ranks waiting
  // in any of their groups hear it; the ranks are numbered alike in all of them.
  notice_.sequence = id.sequence;
  notice_.group = board_id_;
  std::snprintf(notice_.operation, sizeof notice_.operation, "%s", name_of(id.collective));
  const std::vector<std::pair<int, MPI_Comm>> boards = board_->guards;
  for (const auto& [guard, comm] : boards) {
    for (int r = 0; r < comm_.size(); ++r) {
      if (r == comm_.rank()) {
        continue;
      }
      MPI_Request request = MPI_REQUEST_NULL;
      if (MPI_Isend(&notice_, sizeof notice_, MPI_BYTE, r, kNoticeTag, comm, &request) ==
          MPI_SUCCESS) {
        MPI_Request_free(&request);
      }
    }
  }
  const double grace_s = std::clamp(options_.timeout_s / 4, 0.5, 5.0);
  const auto listen_until = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                               std::chrono::duration<double>(grace_s));
  std::map<int, Notice> heard;
  Backoff backoff;
  for (; Clock::now() < listen_until && static_cast<int>(heard.size()) < comm_.size() - 1;
       backoff.pause()) {
    bool failed = false;
    for (const auto& [guard, comm] : boards) {
      int flag = 0;
      MPI_Status status;
      if (MPI_Iprobe(MPI_ANY_SOURCE, kNoticeTag, comm, &flag, &status) != MPI_SUCCESS) {
        failed = true;
        break;
      }
      if (flag) {
        Notice notice{};
        if (MPI_Recv(&notice, sizeof notice, MPI_BYTE, status.MPI_SOURCE, kNoticeTag, comm,
                     MPI_STATUS_IGNORE) != MPI_SUCCESS) {
          failed = true;
          break;
        }
        notice.operation[sizeof notice.operation - 1] = '\0';
        heard[status.MPI_SOURCE] = notice;
      }
    }
    if (failed) {
      break;
    }
  }

  std::vector<int> missing;
  std::vector<int> arrived{comm_.rank()};
  std::ostringstream elsewhere;
  for (int r = 0; r < comm_.size(); ++r) {
    if (r == comm_.rank()) {
      continue;
    }
    auto it = heard.find(r);
    if (it == heard.end()) {
      missing.push_back(r);
    } else if (it->second.group == board_id_ && it->second.sequence == id.sequence) {
      arrived.push_back(r);
    } else {
      elsewhere << "; rank " << r << " is waiting in " << it->second.operation << " #"
                << it->second.sequence
                << (it->second.group == board_id_ ? "" : " of another group of these ranks");
    }
  }
  std::sort(arrived.begin(), arrived.end());
  std::ostringstream text;
  text << id_text(id) << " timed out after " << options_.timeout_s << " s on rank " << comm_.rank()
       << " of " << comm_.size() << ": ";
  if (!missing.empty()) {
    text << "rank" << (missing.size() > 1 ? "s " : " ") << rank_list(missing) << " did not arrive";
  } else {
    text << "every rank arrived but the operation did not complete";
  }
  text << elsewhere.str() << " (arrived: " << rank_list(arrived)
       << "). Every rank must call the same collectives in the same order; if a rank is only "
          "slow, raise FSDP_COLLECTIVE_TIMEOUT_S. This process group can no longer be used.";
  failure_ = id_text(id) + " timed out";
  abandon_communicator_ = true;
  throw Error(ErrorKind::timeout, text.str());
}

}  // namespace fsdp
