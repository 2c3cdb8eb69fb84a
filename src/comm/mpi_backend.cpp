#include "mpi_backend.hpp"

#include <algorithm>
#include <cstring>
#include <deque>
#include <exception>
#include <functional>
#include <utility>
#include <vector>

#include "block_exchange.hpp"
#include "collective_guard.hpp"
#include "fsdp/comm/transport.hpp"
#include "fsdp/core/ceil_div.hpp"
#include "fsdp/core/error.hpp"
#include "mpi_types.hpp"

namespace fsdp {

class MpiOperation;

struct MpiGroupState {
  detail::Communicator comm;  // declared first: the guard goes before the communicator
  CollectiveGuard guard;
  // The reductions sent piece by piece (MpiBackend::kReductionPieceBytes) issue their pieces on a
  // communicator of their own, one piece of one operation in flight at a time, in the order the
  // operations started: each piece starts when the one before it completes, which may be after
  // later collectives started on comm, and every rank must start comm's collectives in the
  // same order.
  // The collectives by exchange (block_exchange.hpp) send their blocks on it too: point-to-point
  // messages never match a collective's.
  detail::Communicator lane_comm;
  std::deque<MpiOperation*> lane;  // started piecewise operations not completed, in start order
  // Operations whose exchange (or drain, after a failed check) is moving, in issue order.
  std::vector<MpiOperation*> exchanging;
  // Whether buffers can be packed by host code: MPI that is not CUDA-aware is given host
  // memory only (Transport); a CUDA-aware one may be given device pointers.
  bool packs_on_host = !mpi_is_cuda_aware();
  // Operations whose signature check has not finished, in the order this rank issued them: each
  // starts its collective once its check and every earlier one have, so that every rank starts
  // the collectives in the same order.
  std::deque<MpiOperation*> unstarted;
  // Collectives announced by expect() and not issued yet, in order, with their checks running.
  struct Expected {
    CollectiveCall call;
    std::unique_ptr<SignatureCheck> check;
  };
  std::deque<Expected> expected;

  MpiGroupState(detail::Communicator owned, const CollectiveOptions& options)
      : comm(std::move(owned)),
        guard(comm.get(), options),
        lane_comm(detail::Communicator::duplicate(comm.get(), "ProcessGroup")) {}
  ~MpiGroupState();

  // Starts, in order, the operations whose checks have finished, and moves the lane and the
  // exchanges on.
  void start_checked();
  void advance_exchanges();
  // Completes the lane's front operation's piece in flight if MPI says it is done, and issues
  // the next piece: of the same operation, or the first of the next one.
  void advance_lane();
  // Before a new check: finishes the oldest one while kChecksInFlight - 1 are unfinished.
  void make_room_for_a_check();
  // The check of a collective being issued: the one expect() started for it, or a new one.
  std::unique_ptr<SignatureCheck> check_for(const CollectiveCall& call, const std::string& problem);
};

namespace {

// Issues piece `piece` of an operation (0 for the operations of one piece) as one MPI request.
using Issue = std::function<int(MPI_Request*, std::size_t piece)>;

}  // namespace

// One collective: its signature check, then its MPI requests, one piece at a time (most
// operations have one), plus what must happen when it completes (the division of avg) and what
// must live until then (all_gather_v's int count arrays, the pieces' packing buffer). A
// collective by exchange instead moves its bytes from the start, beside its check, and completes
// once both have; after a failed check, an operation receives the blocks that ranks exchanging
// sent it (a drain) before it raises the check's failure.
//
// The caller does not wait for the check: the collective is started by whichever poll of this
// group (test or wait of any of its operations) finds the check finished. A rank that runs
// ahead of the others goes on computing instead of waiting for them at the start of every
// collective, as it would without the check; the bytes move at the next poll, which is when
// MPI moves them anyway (Open MPI progresses non-blocking collectives inside MPI calls only).
class MpiOperation final : public PendingOperation {
 public:
  MpiOperation(std::shared_ptr<MpiGroupState> state, std::unique_ptr<SignatureCheck> check,
               const char* mpi_name, Issue issue, std::size_t pieces,
               std::function<void()> on_complete, std::shared_ptr<void> scratch,
               std::unique_ptr<detail::BlockExchange> exchange = {})
      : state_(std::move(state)),
        check_(std::move(check)),
        mpi_name_(mpi_name),
        issue_(std::move(issue)),
        pieces_(pieces),
        on_complete_(std::move(on_complete)),
        scratch_(std::move(scratch)),
        exchange_(std::move(exchange)) {
    if (exchange_) {
      state_->exchanging.push_back(this);
    }
  }

  ~MpiOperation() override {
    // Only after a failed wait (a timeout) can an operation go before it started or completed.
    for (auto* queue : {&state_->unstarted, &state_->lane}) {
      queue->erase(std::remove(queue->begin(), queue->end(), this), queue->end());
    }
    auto& exchanging = state_->exchanging;
    exchanging.erase(std::remove(exchanging.begin(), exchanging.end(), this), exchanging.end());
    detail::BlockExchange::abandon(std::move(exchange_));
    state_->guard.abandon(std::move(check_));
  }

  const SignatureCheck& check() const { return *check_; }
  SignatureCheck& check() { return *check_; }

  // Once the check is done: the collective, or the check's failure kept for test and wait.
  // Called in the order the operations were issued.
  void start() {
    started_ = true;
    if (check_->failure) {
      issue_ = nullptr;
      // Blocks that ranks exchanging sent this rank must be received all the same,
      // or they would stay unmatched on a group that remains in use.
      const std::vector<bool> senders =
          detail::exchange_senders(*check_, state_->comm.size(), state_->packs_on_host);
      if (exchange_) {
        exchange_->settle(senders);
      } else if (std::find(senders.begin(), senders.end(), true) != senders.end()) {
        exchange_ = detail::BlockExchange::drain(state_->lane_comm, check_->id.sequence, senders);
        state_->exchanging.push_back(this);
      }
      if (!exchange_ || exchange_->done()) {
        end_exchange();
      }
    } else if (exchange_) {
      if (exchange_->done()) {
        end_exchange();
      }
    } else if (pieces_ == 1) {
      issue_next_piece();
    } else {
      state_->lane.push_back(this);
      state_->advance_lane();
    }
  }

  // For the lane, on its front operation: issues the first piece, or tests the piece in flight
  // and on its completion issues the next one or, after the last, completes the operation. True
  // once the operation is done with the lane (completed, or failed: the failure is kept for test
  // and wait).
  bool advance() {
    try {
      if (issued_ > 0 && !test_request()) {
        return false;
      }
    } catch (...) {
      failure_ = std::current_exception();
      return true;
    }
    if (issued_ < pieces_) {
      issue_next_piece();
      return static_cast<bool>(failure_);
    }
    complete();
    return true;
  }

  // For the group's list of exchanges: moves this operation's exchange on. True once it is done
  // (the operation completes, or keeps its failure for test and wait, if its check has too).
  bool advance_exchange() {
    try {
      const bool done = exchange_->poll();
      if (check_->stage == SignatureCheck::Stage::folded && exchange_->matched_all()) {
        if (exchange_->all_folded()) {
          state_->guard.settle_folded(*check_, exchange_->calls());
        } else {
          state_->guard.join(*check_);
        }
      }
      if (!done) {
        return false;
      }
    } catch (...) {
      failure_ = std::current_exception();
      return true;
    }
    if (started_) {
      end_exchange();
    }
    return true;
  }

  bool test() override {
    // Every poll of the group also starts the collectives issued after this one whose checks have
    // finished: a runtime that waits for one gather while the next is prefetched would otherwise
    // start the next only when it waits for it, and lose the overlap.
    state_->start_checked();
    if (failure_) {
      std::rethrow_exception(failure_);
    }
    if (!started_ || exchange_) {
      return done_;  // an exchange ends in advance_exchange() or start()
    }
    if (!done_ && pieces_ == 1 && test_request()) {
      complete();
    }
    return done_;  // the lane completes the piecewise operations
  }

  void wait() override {
    if (!done_) {
      state_->guard.wait_until(check_->id, [this] { return test(); });
    }
  }

 private:
  // Once both the check and the exchange (or drain) are done: the check's failure, a block of
  // the wrong size (checks off, or two signatures with the same hash), or the result.
  void end_exchange() {
    if (check_->failure) {
      failure_ = check_->failure;
    } else if (exchange_ && !exchange_->problem().empty()) {
      failure_ = std::make_exception_ptr(Error(ErrorKind::mismatch, exchange_->problem()));
    } else {
      complete();
    }
  }

  void complete() {
    done_ = true;
    if (on_complete_) {
      on_complete_();
    }
    scratch_.reset();
  }

  // Issues the next piece; a failure is kept for test and wait.
  void issue_next_piece() {
    try {
      mpi::check(issue_(&request_, issued_), mpi_name_, state_->comm.rank());
      ++issued_;
    } catch (...) {
      failure_ = std::current_exception();
      issued_ = pieces_;
    }
    if (issued_ == pieces_) {
      issue_ = nullptr;  // what it captured is no longer needed
    }
  }

  // Whether the piece in flight has completed.
  bool test_request() {
    int flag = 0;
    mpi::check(MPI_Test(&request_, &flag, MPI_STATUS_IGNORE), name_of(check_->id.collective),
               state_->comm.rank());
    return flag != 0;
  }

  std::shared_ptr<MpiGroupState> state_;
  std::unique_ptr<SignatureCheck> check_;  // its id names the operation in messages
  const char* mpi_name_;
  Issue issue_;
  std::size_t pieces_;
  std::size_t issued_ = 0;
  std::function<void()> on_complete_;
  std::shared_ptr<void> scratch_;
  std::unique_ptr<detail::BlockExchange> exchange_;
  MPI_Request request_ = MPI_REQUEST_NULL;
  std::exception_ptr failure_;
  bool started_ = false;
  bool done_ = false;
};

MpiGroupState::~MpiGroupState() {
  // Announced, never issued (a runtime that gave up its step): the other ranks may have issued
  // them, and nothing more may go over this communicator.
  if (!expected.empty()) {
    guard.break_group("collectives were announced but not issued");
  }
  for (Expected& e : expected) {
    guard.abandon(std::move(e.check));
  }
}

void MpiGroupState::make_room_for_a_check() {
  if (static_cast<std::int64_t>(unstarted.size() + expected.size()) + 1 <
      CollectiveGuard::kChecksInFlight) {
    return;
  }
  SignatureCheck& oldest = unstarted.empty() ? *expected.front().check : unstarted.front()->check();
  guard.wait_until(oldest.id, [&] { return guard.poll(oldest); });
  start_checked();
}

std::unique_ptr<SignatureCheck> MpiGroupState::check_for(const CollectiveCall& call,
                                                         const std::string& problem) {
  if (expected.empty()) {
    make_room_for_a_check();
    return guard.start_check(call, problem);
  }
  Expected next = std::move(expected.front());
  expected.pop_front();
  const CollectiveCall& e = next.call;
  const bool same = e == call;
  if (same && problem.empty()) {
    return std::move(next.check);
  }
  // The other ranks may start the announced collective as soon as their checks pass: this rank
  // can neither join it nor take the announcement back.
  guard.abandon(std::move(next.check));
  const std::string what =
      guard.describe(call) + " issued where " + guard.describe(e) + " was announced" +
      (same ? " (the same, but its arguments are invalid: " + problem + ")" : "");
  guard.break_group(what);
  throw Error(ErrorKind::usage, what +
                                    "; a collective announced with ProcessGroup::expect_* must "
                                    "be the next one issued on its group, as announced");
}

void MpiGroupState::advance_lane() {
  while (!lane.empty() && lane.front()->advance()) {
    lane.pop_front();
  }
}

void MpiGroupState::advance_exchanges() {
  // advance_exchange() leaves the list alone: operations leave it here, or when destroyed.
  exchanging.erase(
      std::remove_if(exchanging.begin(), exchanging.end(),
                     [](MpiOperation* operation) { return operation->advance_exchange(); }),
      exchanging.end());
}

void MpiGroupState::start_checked() {
  // The exchanges first: on 2 ranks their blocks may finish their checks.
  advance_exchanges();
  while (!unstarted.empty() && guard.poll(unstarted.front()->check())) {
    MpiOperation* operation = unstarted.front();
    unstarted.pop_front();
    operation->start();
  }
  advance_lane();
  // Announced checks of more than one exchange (over more than 2 ranks) need polls to go on.
  for (Expected& e : expected) {
    guard.poll(*e.check);
  }
}

namespace {

// Numbers the operation, starts its check, and issues the request through issue() once the check
// has passed: at once when checks are off. issue captures by value: it may run after the call.
std::unique_ptr<PendingOperation> start(const std::shared_ptr<MpiGroupState>& state,
                                        const CollectiveCall& call, const std::string& problem,
                                        const char* mpi_name, Issue issue,
                                        std::function<void()> on_complete = {},
                                        std::shared_ptr<void> scratch = {},
                                        std::size_t pieces = 1) {
  state->guard.ensure_usable(call.collective);
  auto operation = std::make_unique<MpiOperation>(state, state->check_for(call, problem), mpi_name,
                                                  std::move(issue), pieces, std::move(on_complete),
                                                  std::move(scratch));
  state->unstarted.push_back(operation.get());
  // Issuing is a poll too: earlier collectives whose checks have finished start now, and with
  // checks off this one starts straight away.
  state->start_checked();
  return operation;
}

// An all_gather or reduce_scatter by exchange: its blocks leave now, beside its check, instead of
// once the check has passed (block_exchange.hpp). What can refuse the collective (a broken group,
// no room for a check that does not come, an announcement it breaks) refuses it before a block
// leaves. on_complete: what follows the bytes (the division of avg).
std::unique_ptr<PendingOperation> start_exchange(const std::shared_ptr<MpiGroupState>& state,
                                                 const CollectiveCall& call, const void* send,
                                                 void* recv,
                                                 std::function<void()> on_complete = {}) {
  CollectiveGuard& guard = state->guard;
  guard.ensure_usable(call.collective);
  auto exchange_for = [&](std::int64_t sequence, bool folded) {
    return std::make_unique<detail::BlockExchange>(state->lane_comm, sequence, call, folded, send,
                                                   recv, state->packs_on_host);
  };
  std::unique_ptr<SignatureCheck> check;
  std::unique_ptr<detail::BlockExchange> exchange;
  if (state->expected.empty()) {
    // The blocks leave before the check's words, which have the shorter way to go; on 2 ranks
    // they are the check (folded).
    state->make_room_for_a_check();
    const bool folded = guard.options().check_arguments && guard.size() == 2;
    exchange = exchange_for(guard.next_sequence(), folded);
    try {
      check = guard.start_check(call, "", folded);
    } catch (...) {
      detail::BlockExchange::abandon(std::move(exchange));
      guard.break_group(std::string("a ") + name_of(call.collective) +
                        "'s blocks were sent but its check failed to start");
      throw;
    }
  } else {
    check = state->check_for(call, "");  // announced: its check has been running
    exchange = exchange_for(check->id.sequence, false);
  }
  auto operation =
      std::make_unique<MpiOperation>(state, std::move(check), "block exchange", nullptr, 1,
                                     std::move(on_complete), nullptr, std::move(exchange));
  state->unstarted.push_back(operation.get());
  state->start_checked();
  return operation;
}

// int counts and displacements for the v-collectives, alive until the operation completes. Filled
// only after the guard has passed: ProcessGroup checked that every count fits an int.
struct IntLayout {
  std::vector<int> counts;
  std::vector<int> displacements;
  void fill(const std::vector<std::size_t>& sizes) {
    std::size_t offset = 0;
    for (std::size_t size : sizes) {
      counts.push_back(static_cast<int>(size));
      displacements.push_back(static_cast<int>(offset));
      offset += size;
    }
  }
};

std::function<void()> average_after(const MpiGroupState& state, void* data, std::size_t count,
                                    DType dtype, ReduceOp op) {
  if (op != ReduceOp::avg) {
    return {};
  }
  const double factor = 1.0 / state.comm.size();
  return [=] { mpi::scale(data, count, dtype, factor); };
}

}  // namespace

MpiBackend::MpiBackend(detail::Communicator comm, const CollectiveOptions& options)
    : state_(std::make_shared<MpiGroupState>(std::move(comm), options)) {}

MpiBackend::~MpiBackend() = default;

int MpiBackend::rank() const {
  return state_->comm.rank();
}
int MpiBackend::size() const {
  return state_->comm.size();
}
MPI_Comm MpiBackend::mpi_comm() const {
  return state_->comm.get();
}

// Counts are converted to int only after the guard has passed: ProcessGroup checked that they fit.
std::unique_ptr<PendingOperation> MpiBackend::all_gather(const void* send, void* recv,
                                                         std::size_t count, DType dtype,
                                                         const std::string& problem) {
  const CollectiveCall call = all_gather_call(count, dtype);
  if (problem.empty() && detail::goes_by_exchange(call, size(), state_->packs_on_host)) {
    return start_exchange(state_, call, send, recv);
  }
  return start(state_, call, problem, "MPI_Iallgather",
               [=, comm = state_->comm.get()](MPI_Request* request, std::size_t) {
                 const int n = static_cast<int>(count);
                 return MPI_Iallgather(send, n, mpi::datatype_of(dtype), recv, n,
                                       mpi::datatype_of(dtype), comm, request);
               });
}

std::unique_ptr<PendingOperation> MpiBackend::all_gather_v(const void* send, std::size_t send_count,
                                                           void* recv,
                                                           const std::vector<std::size_t>& counts,
                                                           DType dtype,
                                                           const std::string& problem) {
  auto layout = std::make_shared<IntLayout>();
  return start(
      state_, uneven_call(Collective::all_gather_v, counts, send_count, dtype), problem,
      "MPI_Iallgatherv",
      [=, comm = state_->comm.get()](MPI_Request* request, std::size_t) {
        layout->fill(counts);
        return MPI_Iallgatherv(send, static_cast<int>(send_count), mpi::datatype_of(dtype), recv,
                               layout->counts.data(), layout->displacements.data(),
                               mpi::datatype_of(dtype), comm, request);
      },
      {}, layout);
}

std::unique_ptr<PendingOperation> MpiBackend::scatter_v(const void* send,
                                                        const std::vector<std::size_t>& counts,
                                                        void* recv, std::size_t recv_count,
                                                        DType dtype, int root,
                                                        const std::string& problem) {
  auto layout = std::make_shared<IntLayout>();
  return start(
      state_, uneven_call(Collective::scatter_v, counts, recv_count, dtype, root), problem,
      "MPI_Iscatterv",
      [=, comm = state_->comm.get()](MPI_Request* request, std::size_t) {
        layout->fill(counts);
        return MPI_Iscatterv(send, layout->counts.data(), layout->displacements.data(),
                             mpi::datatype_of(dtype), recv, static_cast<int>(recv_count),
                             mpi::datatype_of(dtype), root, comm, request);
      },
      {}, layout);
}

std::unique_ptr<PendingOperation> MpiBackend::reduce(const void* send, void* recv,
                                                     std::size_t count, DType dtype, ReduceOp op,
                                                     int root, const std::string& problem) {
  const CollectiveCall call{Collective::reduce, dtype, static_cast<std::int64_t>(count), root,
                            static_cast<std::int64_t>(op)};
  const bool at_root = state_->comm.rank() == root;
  return start(
      state_, call, problem, "MPI_Ireduce",
      [=, comm = state_->comm.get()](MPI_Request* request, std::size_t) {
        return MPI_Ireduce(at_root && send == recv ? MPI_IN_PLACE : send, recv,
                           static_cast<int>(count), mpi::datatype_of(dtype), mpi::op_of(op, dtype),
                           root, comm, request);
      },
      at_root ? average_after(*state_, recv, count, dtype, op) : std::function<void()>{});
}

namespace {

// The elements of one piece of a reduction that moves bytes_per_element bytes per element of the
// piece (a reduce-scatter packs every rank's slice: ranks x element size): at most
// MpiBackend::kReductionPieceBytes, at least one element.
std::size_t piece_elements(std::size_t bytes_per_element) {
  return std::max<std::size_t>(1, MpiBackend::kReductionPieceBytes / bytes_per_element);
}

// Pieces of `piece` elements that cover count elements: at least one, so that an empty reduction
// is still issued (every rank takes part in it).
std::size_t pieces_of(std::size_t count, std::size_t piece) {
  return std::max<std::size_t>(1, ceil_div(count, piece));
}

}  // namespace

std::unique_ptr<PendingOperation> MpiBackend::reduce_scatter(const void* send, void* recv,
                                                             std::size_t count, DType dtype,
                                                             ReduceOp op,
                                                             const std::string& problem) {
  const CollectiveCall call{Collective::reduce_scatter, dtype, static_cast<std::int64_t>(count), -1,
                            static_cast<std::int64_t>(op)};
  const std::size_t ranks = static_cast<std::size_t>(state_->comm.size());
  const std::size_t element = size_of(dtype);
  const std::size_t piece = piece_elements(ranks * element);
  if (problem.empty() && detail::goes_by_exchange(call, size(), state_->packs_on_host)) {
    return start_exchange(state_, call, send, recv, average_after(*state_, recv, count, dtype, op));
  }
  if (!state_->packs_on_host || count <= piece) {
    return start(
        state_, call, problem, "MPI_Ireduce_scatter_block",
        [=, comm = state_->comm.get()](MPI_Request* request, std::size_t) {
          return MPI_Ireduce_scatter_block(send, recv, static_cast<int>(count),
                                           mpi::datatype_of(dtype), mpi::op_of(op, dtype), comm,
                                           request);
        },
        average_after(*state_, recv, count, dtype, op));
  }
  // Piece k reduces elements [k * piece, (k + 1) * piece) of every rank's chunk, packed one
  // chunk after the other into a buffer of kReductionPieceBytes at most.
  auto packed = std::make_shared<std::vector<unsigned char>>();
  return start(
      state_, call, problem, "MPI_Ireduce_scatter_block",
      [=, comm = state_->lane_comm.get()](MPI_Request* request, std::size_t k) {
        const std::size_t offset = k * piece;
        const std::size_t n = std::min(piece, count - offset);
        packed->resize(ranks * piece * element);
        const auto* from = static_cast<const unsigned char*>(send);
        for (std::size_t r = 0; r < ranks; ++r) {
          std::memcpy(packed->data() + r * n * element, from + (r * count + offset) * element,
                      n * element);
        }
        return MPI_Ireduce_scatter_block(
            packed->data(), static_cast<unsigned char*>(recv) + offset * element,
            static_cast<int>(n), mpi::datatype_of(dtype), mpi::op_of(op, dtype), comm, request);
      },
      average_after(*state_, recv, count, dtype, op), packed, pieces_of(count, piece));
}

std::unique_ptr<PendingOperation> MpiBackend::all_reduce(const void* send, void* recv,
                                                         std::size_t count, DType dtype,
                                                         ReduceOp op, const std::string& problem) {
  const CollectiveCall call{Collective::all_reduce, dtype, static_cast<std::int64_t>(count), -1,
                            static_cast<std::int64_t>(op)};
  const std::size_t element = size_of(dtype);
  const std::size_t piece = piece_elements(element);
  // Piece k is elements [k * piece, (k + 1) * piece) of the buffers: slices, nothing to pack.
  const std::size_t pieces = pieces_of(count, piece);
  return start(
      state_, call, problem, "MPI_Iallreduce",
      [=, comm = pieces > 1 ? state_->lane_comm.get() : state_->comm.get()](MPI_Request* request,
                                                                            std::size_t k) {
        const std::size_t offset = k * piece;
        const std::size_t n = std::min(piece, count - offset);
        auto* to = static_cast<unsigned char*>(recv) + offset * element;
        return MPI_Iallreduce(
            send == recv ? MPI_IN_PLACE
                         : static_cast<const unsigned char*>(send) + offset * element,
            to, static_cast<int>(n), mpi::datatype_of(dtype), mpi::op_of(op, dtype), comm, request);
      },
      average_after(*state_, recv, count, dtype, op), {}, pieces);
}

std::unique_ptr<PendingOperation> MpiBackend::broadcast(void* data, std::size_t count, DType dtype,
                                                        int root, const std::string& problem) {
  return start(state_, broadcast_call(count, dtype, root), problem, "MPI_Ibcast",
               [=, comm = state_->comm.get()](MPI_Request* request, std::size_t) {
                 return MPI_Ibcast(data, static_cast<int>(count), mpi::datatype_of(dtype), root,
                                   comm, request);
               });
}

std::unique_ptr<PendingOperation> MpiBackend::barrier() {
  return start(state_, CollectiveCall{}, "", "MPI_Ibarrier",
               [=, comm = state_->comm.get()](MPI_Request* request, std::size_t) {
                 return MPI_Ibarrier(comm, request);
               });
}

void MpiBackend::expect(std::size_t count, DType dtype, int root) {
  MpiGroupState& state = *state_;
  if (!checks_ahead()) {
    return;
  }
  const CollectiveCall call =
      root >= 0 ? broadcast_call(count, dtype, root) : all_gather_call(count, dtype);
  state.guard.ensure_usable(call.collective);  // before waiting for room on a broken group
  state.make_room_for_a_check();
  state.expected.push_back({call, state.guard.start_check(call, "")});
}

bool MpiBackend::checks_ahead() const {
  return state_->guard.options().check_arguments;
}

std::shared_ptr<Backend> MpiBackend::split(int color, int key) const {
  auto split =
      std::make_shared<MpiBackend>(state_->comm.split(color, key), state_->guard.options());
  split->state_->guard.share_notices_with(state_->guard);
  return split;
}

std::shared_ptr<Backend> MpiBackend::split_node_local() const {
  return std::make_shared<MpiBackend>(state_->comm.split_node_local(), state_->guard.options());
}

}  // namespace fsdp
