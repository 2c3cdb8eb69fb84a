#include "mpi_backend.hpp"

#include <algorithm>
#include <deque>
#include <exception>
#include <functional>
#include <utility>

#include "collective_guard.hpp"
#include "fsdp/core/error.hpp"
#include "mpi_types.hpp"

namespace fsdp {

class MpiOperation;

struct MpiGroupState {
  detail::Communicator comm;  // declared first: the guard goes before the communicator
  CollectiveGuard guard;
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
      : comm(std::move(owned)), guard(comm.get(), options) {}
  ~MpiGroupState();

  // Starts, in order, the operations whose checks have finished.
  void start_checked();
  // Before a new check: finishes the oldest one while kChecksInFlight - 1 are unfinished.
  void make_room_for_a_check();
  // The check of a collective being issued: the one expect() started for it, or a new one.
  std::unique_ptr<SignatureCheck> check_for(const CollectiveCall& call, const std::string& problem);
};

namespace {

using Issue = std::function<int(MPI_Request*)>;

}  // namespace

// One collective: its signature check, then one MPI request in flight, plus what must happen
// when it completes (the division of avg) and what must live until then (all_gather_v's int
// count arrays).
//
// The caller does not wait for the check: the collective is started by whichever poll of this
// group (test or wait of any of its operations) finds the check finished. A rank that runs
// ahead of the others goes on computing instead of waiting for them at the start of every
// collective, as it would without the check; the bytes move at the next poll, which is when
// MPI moves them anyway (Open MPI progresses non-blocking collectives inside MPI calls only).
class MpiOperation final : public PendingOperation {
 public:
  MpiOperation(std::shared_ptr<MpiGroupState> state, std::unique_ptr<SignatureCheck> check,
               const char* mpi_name, Issue issue, std::function<void()> on_complete,
               std::shared_ptr<void> scratch)
      : state_(std::move(state)),
        check_(std::move(check)),
        mpi_name_(mpi_name),
        issue_(std::move(issue)),
        on_complete_(std::move(on_complete)),
        scratch_(std::move(scratch)) {}

  ~MpiOperation() override {
    // Only after a failed wait (a timeout) can an operation go before it started.
    auto& unstarted = state_->unstarted;
    unstarted.erase(std::remove(unstarted.begin(), unstarted.end(), this), unstarted.end());
    state_->guard.abandon(std::move(check_));
  }

  const SignatureCheck& check() const { return *check_; }
  SignatureCheck& check() { return *check_; }

  // Once the check is done: the collective, or the check's failure kept for test and wait.
  // Called in the order the operations were issued.
  void start() {
    started_ = true;
    failure_ = check_->failure;
    if (!failure_) {
      try {
        mpi::check(issue_(&request_), mpi_name_, state_->comm.rank());
      } catch (...) {
        failure_ = std::current_exception();
      }
    }
    issue_ = nullptr;  // what it captured is no longer needed
  }

  bool test() override {
    // Every poll of the group also starts the collectives issued after this one whose checks have
    // finished: a runtime that waits for one gather while the next is prefetched would otherwise
    // start the next only when it waits for it, and lose the overlap.
    state_->start_checked();
    if (failure_) {
      std::rethrow_exception(failure_);
    }
    if (!started_) {
      return false;
    }
    if (!done_) {
      int flag = 0;
      mpi::check(MPI_Test(&request_, &flag, MPI_STATUS_IGNORE), name_of(check_->id.collective),
                 state_->comm.rank());
      if (flag) {
        complete();
      }
    }
    return done_;
  }

  void wait() override {
    if (!done_) {
      state_->guard.wait_until(check_->id, [this] { return test(); });
    }
  }

 private:
  void complete() {
    done_ = true;
    if (on_complete_) {
      on_complete_();
    }
    scratch_.reset();
  }

  std::shared_ptr<MpiGroupState> state_;
  std::unique_ptr<SignatureCheck> check_;  // its id names the operation in messages
  const char* mpi_name_;
  Issue issue_;
  std::function<void()> on_complete_;
  std::shared_ptr<void> scratch_;
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

void MpiGroupState::start_checked() {
  while (!unstarted.empty() && guard.poll(unstarted.front()->check())) {
    MpiOperation* operation = unstarted.front();
    unstarted.pop_front();
    operation->start();
  }
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
                                        std::shared_ptr<void> scratch = {}) {
  state->guard.ensure_usable(call.collective);
  auto operation =
      std::make_unique<MpiOperation>(state, state->check_for(call, problem), mpi_name,
                                     std::move(issue), std::move(on_complete), std::move(scratch));
  state->unstarted.push_back(operation.get());
  // Issuing is a poll too: earlier collectives whose checks have finished start now, and with
  // checks off this one starts straight away.
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
  return start(state_, all_gather_call(count, dtype), problem, "MPI_Iallgather",
               [=, comm = state_->comm.get()](MPI_Request* request) {
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
      [=, comm = state_->comm.get()](MPI_Request* request) {
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
      [=, comm = state_->comm.get()](MPI_Request* request) {
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
      [=, comm = state_->comm.get()](MPI_Request* request) {
        return MPI_Ireduce(at_root && send == recv ? MPI_IN_PLACE : send, recv,
                           static_cast<int>(count), mpi::datatype_of(dtype), mpi::op_of(op, dtype),
                           root, comm, request);
      },
      at_root ? average_after(*state_, recv, count, dtype, op) : std::function<void()>{});
}

std::unique_ptr<PendingOperation> MpiBackend::reduce_scatter(const void* send, void* recv,
                                                             std::size_t count, DType dtype,
                                                             ReduceOp op,
                                                             const std::string& problem) {
  const CollectiveCall call{Collective::reduce_scatter, dtype, static_cast<std::int64_t>(count), -1,
                            static_cast<std::int64_t>(op)};
  return start(
      state_, call, problem, "MPI_Ireduce_scatter_block",
      [=, comm = state_->comm.get()](MPI_Request* request) {
        return MPI_Ireduce_scatter_block(send, recv, static_cast<int>(count),
                                         mpi::datatype_of(dtype), mpi::op_of(op, dtype), comm,
                                         request);
      },
      average_after(*state_, recv, count, dtype, op));
}

std::unique_ptr<PendingOperation> MpiBackend::all_reduce(const void* send, void* recv,
                                                         std::size_t count, DType dtype,
                                                         ReduceOp op, const std::string& problem) {
  const CollectiveCall call{Collective::all_reduce, dtype, static_cast<std::int64_t>(count), -1,
                            static_cast<std::int64_t>(op)};
  return start(
      state_, call, problem, "MPI_Iallreduce",
      [=, comm = state_->comm.get()](MPI_Request* request) {
        return MPI_Iallreduce(send == recv ? MPI_IN_PLACE : send, recv, static_cast<int>(count),
                              mpi::datatype_of(dtype), mpi::op_of(op, dtype), comm, request);
      },
      average_after(*state_, recv, count, dtype, op));
}

std::unique_ptr<PendingOperation> MpiBackend::broadcast(void* data, std::size_t count, DType dtype,
                                                        int root, const std::string& problem) {
  return start(state_, broadcast_call(count, dtype, root), problem, "MPI_Ibcast",
               [=, comm = state_->comm.get()](MPI_Request* request) {
                 return MPI_Ibcast(data, static_cast<int>(count), mpi::datatype_of(dtype), root,
                                   comm, request);
               });
}

std::unique_ptr<PendingOperation> MpiBackend::barrier() {
  return start(
      state_, CollectiveCall{}, "", "MPI_Ibarrier",
      [=, comm = state_->comm.get()](MPI_Request* request) { return MPI_Ibarrier(comm, request); });
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
