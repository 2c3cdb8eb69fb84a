#include "mpi_backend.hpp"

#include <functional>
#include <numeric>
#include <utility>

#include "collective_guard.hpp"
#include "fsdp/core/error.hpp"
#include "mpi_types.hpp"

namespace fsdp {

struct MpiGroupState {
  MPI_Comm comm = MPI_COMM_NULL;
  int rank = 0;
  int size = 1;
  CollectiveGuard guard;

  MpiGroupState(MPI_Comm owned, const CollectiveOptions& options)
      : comm(owned), guard(owned, options) {
    mpi::check(MPI_Comm_rank(comm, &rank), "MPI_Comm_rank");
    mpi::check(MPI_Comm_size(comm, &size), "MPI_Comm_size");
  }
  ~MpiGroupState() {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized && comm != MPI_COMM_NULL) {
      MPI_Comm_free(&comm);
    }
  }
  MpiGroupState(const MpiGroupState&) = delete;
  MpiGroupState& operator=(const MpiGroupState&) = delete;
};

namespace {

// One MPI request in flight, plus what must happen when it completes (the division of avg) and
// what must live until then (all_gather_v's int count arrays).
class MpiOperation final : public PendingOperation {
 public:
  MpiOperation(std::shared_ptr<MpiGroupState> state, OperationId id,
               std::function<void()> on_complete, std::shared_ptr<void> scratch)
      : state_(std::move(state)),
        id_(id),
        on_complete_(std::move(on_complete)),
        scratch_(std::move(scratch)) {}

  MPI_Request* request() { return &request_; }

  bool test() override {
    if (!done_) {
      int flag = 0;
      mpi::check(MPI_Test(&request_, &flag, MPI_STATUS_IGNORE), name_of(id_.collective),
                 state_->rank);
      if (flag) {
        complete();
      }
    }
    return done_;
  }

  void wait() override {
    if (!done_) {
      state_->guard.wait(id_, request_);
      complete();
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
  OperationId id_;
  std::function<void()> on_complete_;
  std::shared_ptr<void> scratch_;
  MPI_Request request_ = MPI_REQUEST_NULL;
  bool done_ = false;
};

// Issues the request through issue() after the guard's checks, and wraps it.
template <class Issue>
std::unique_ptr<PendingOperation> start(const std::shared_ptr<MpiGroupState>& state,
                                        const CollectiveCall& call, const std::string& problem,
                                        const char* mpi_name, Issue&& issue,
                                        std::function<void()> on_complete = {},
                                        std::shared_ptr<void> scratch = {}) {
  const OperationId id = state->guard.begin(call, problem);
  auto operation =
      std::make_unique<MpiOperation>(state, id, std::move(on_complete), std::move(scratch));
  mpi::check(issue(operation->request()), mpi_name, state->rank);
  return operation;
}

// int counts and displacements for the v-collectives, alive until the operation completes.
struct IntLayout {
  std::vector<int> counts;
  std::vector<int> displacements;
  // Empty when every count and displacement fits an int, else the problem.
  std::string fill(const std::vector<std::size_t>& sizes, const char* operation, int rank) {
    const std::size_t total = std::accumulate(sizes.begin(), sizes.end(), std::size_t{0});
    std::string problem = mpi::count_problem(total, operation, rank);
    if (problem.empty()) {
      std::size_t offset = 0;
      for (std::size_t size : sizes) {
        counts.push_back(static_cast<int>(size));
        displacements.push_back(static_cast<int>(offset));
        offset += size;
      }
    }
    return problem;
  }
};

std::function<void()> average_after(const MpiGroupState& state, void* data, std::size_t count,
                                    DType dtype, ReduceOp op) {
  if (op != ReduceOp::avg) {
    return {};
  }
  const double factor = 1.0 / state.size;
  return [=] { mpi::scale(data, count, dtype, factor); };
}

}  // namespace

MpiBackend::MpiBackend(MPI_Comm comm, const CollectiveOptions& options) {
  require(comm != MPI_COMM_NULL,
          "fsdp: ProcessGroup needs a valid communicator, got MPI_COMM_NULL");
  int initialized = 0;
  MPI_Initialized(&initialized);
  require(initialized != 0,
          "fsdp: ProcessGroup created before MPI_Init; initialize MPI (and Kokkos) first");
  MPI_Comm duplicate = MPI_COMM_NULL;
  mpi::check(MPI_Comm_dup(comm, &duplicate), "MPI_Comm_dup");
  mpi::check(MPI_Comm_set_errhandler(duplicate, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
  state_ = std::make_shared<MpiGroupState>(duplicate, options);
}

MpiBackend::MpiBackend(Adopt, MPI_Comm owned, const CollectiveOptions& options) {
  mpi::check(MPI_Comm_set_errhandler(owned, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
  state_ = std::make_shared<MpiGroupState>(owned, options);
}

MpiBackend::~MpiBackend() = default;

int MpiBackend::rank() const {
  return state_->rank;
}
int MpiBackend::size() const {
  return state_->size;
}
MPI_Comm MpiBackend::mpi_comm() const {
  return state_->comm;
}

// Counts are converted to int only after the guard has passed: a count that does not fit is a
// problem reported through it.
std::unique_ptr<PendingOperation> MpiBackend::all_gather(const void* send, void* recv,
                                                         std::size_t count, DType dtype) {
  const CollectiveCall call{Collective::all_gather, dtype, static_cast<std::int64_t>(count)};
  const std::string problem = mpi::count_problem(count * static_cast<std::size_t>(state_->size),
                                                 "all_gather (receive size)", state_->rank);
  return start(state_, call, problem, "MPI_Iallgather", [&](MPI_Request* request) {
    const int n = static_cast<int>(count);
    return MPI_Iallgather(send, n, mpi::datatype_of(dtype), recv, n, mpi::datatype_of(dtype),
                          state_->comm, request);
  });
}

std::unique_ptr<PendingOperation> MpiBackend::all_gather_v(const void* send, std::size_t send_count,
                                                           void* recv,
                                                           const std::vector<std::size_t>& counts,
                                                           DType dtype) {
  auto layout = std::make_shared<IntLayout>();
  const std::string problem = first_problem(
      {uneven_problem(Collective::all_gather_v, counts, send_count, state_->rank, state_->size),
       layout->fill(counts, "all_gather_v", state_->rank)});
  return start(
      state_, uneven_call(Collective::all_gather_v, counts, send_count, dtype), problem,
      "MPI_Iallgatherv",
      [&](MPI_Request* request) {
        return MPI_Iallgatherv(send, static_cast<int>(send_count), mpi::datatype_of(dtype), recv,
                               layout->counts.data(), layout->displacements.data(),
                               mpi::datatype_of(dtype), state_->comm, request);
      },
      {}, layout);
}

std::unique_ptr<PendingOperation> MpiBackend::scatter_v(const void* send,
                                                        const std::vector<std::size_t>& counts,
                                                        void* recv, std::size_t recv_count,
                                                        DType dtype, int root) {
  auto layout = std::make_shared<IntLayout>();
  const std::string problem = first_problem(
      {root_problem(Collective::scatter_v, root, state_->rank, state_->size),
       uneven_problem(Collective::scatter_v, counts, recv_count, state_->rank, state_->size),
       layout->fill(counts, "scatter_v", state_->rank)});
  return start(
      state_, uneven_call(Collective::scatter_v, counts, recv_count, dtype, root), problem,
      "MPI_Iscatterv",
      [&](MPI_Request* request) {
        return MPI_Iscatterv(send, layout->counts.data(), layout->displacements.data(),
                             mpi::datatype_of(dtype), recv, static_cast<int>(recv_count),
                             mpi::datatype_of(dtype), root, state_->comm, request);
      },
      {}, layout);
}

std::unique_ptr<PendingOperation> MpiBackend::reduce(const void* send, void* recv,
                                                     std::size_t count, DType dtype, ReduceOp op,
                                                     int root) {
  const CollectiveCall call{Collective::reduce, dtype, static_cast<std::int64_t>(count), root,
                            static_cast<std::int64_t>(op)};
  const std::string problem =
      first_problem({root_problem(Collective::reduce, root, state_->rank, state_->size),
                     reduce_problem(Collective::reduce, dtype, op, state_->rank),
                     mpi::count_problem(count, "reduce", state_->rank)});
  const bool at_root = state_->rank == root;
  return start(
      state_, call, problem, "MPI_Ireduce",
      [&](MPI_Request* request) {
        return MPI_Ireduce(at_root && send == recv ? MPI_IN_PLACE : send, recv,
                           static_cast<int>(count), mpi::datatype_of(dtype), mpi::op_of(op, dtype),
                           root, state_->comm, request);
      },
      at_root ? average_after(*state_, recv, count, dtype, op) : std::function<void()>{});
}

std::unique_ptr<PendingOperation> MpiBackend::reduce_scatter(const void* send, void* recv,
                                                             std::size_t count, DType dtype,
                                                             ReduceOp op) {
  const CollectiveCall call{Collective::reduce_scatter, dtype, static_cast<std::int64_t>(count), -1,
                            static_cast<std::int64_t>(op)};
  const std::string problem =
      first_problem({reduce_problem(Collective::reduce_scatter, dtype, op, state_->rank),
                     mpi::count_problem(count * static_cast<std::size_t>(state_->size),
                                        "reduce_scatter (send size)", state_->rank)});
  return start(
      state_, call, problem, "MPI_Ireduce_scatter_block",
      [&](MPI_Request* request) {
        return MPI_Ireduce_scatter_block(send, recv, static_cast<int>(count),
                                         mpi::datatype_of(dtype), mpi::op_of(op, dtype),
                                         state_->comm, request);
      },
      average_after(*state_, recv, count, dtype, op));
}

std::unique_ptr<PendingOperation> MpiBackend::all_reduce(const void* send, void* recv,
                                                         std::size_t count, DType dtype,
                                                         ReduceOp op) {
  const CollectiveCall call{Collective::all_reduce, dtype, static_cast<std::int64_t>(count), -1,
                            static_cast<std::int64_t>(op)};
  const std::string problem =
      first_problem({reduce_problem(Collective::all_reduce, dtype, op, state_->rank),
                     mpi::count_problem(count, "all_reduce", state_->rank)});
  return start(
      state_, call, problem, "MPI_Iallreduce",
      [&](MPI_Request* request) {
        return MPI_Iallreduce(send == recv ? MPI_IN_PLACE : send, recv, static_cast<int>(count),
                              mpi::datatype_of(dtype), mpi::op_of(op, dtype), state_->comm,
                              request);
      },
      average_after(*state_, recv, count, dtype, op));
}

std::unique_ptr<PendingOperation> MpiBackend::broadcast(void* data, std::size_t count, DType dtype,
                                                        int root) {
  const CollectiveCall call{Collective::broadcast, dtype, static_cast<std::int64_t>(count), root};
  const std::string problem =
      first_problem({root_problem(Collective::broadcast, root, state_->rank, state_->size),
                     mpi::count_problem(count, "broadcast", state_->rank)});
  return start(state_, call, problem, "MPI_Ibcast", [&](MPI_Request* request) {
    return MPI_Ibcast(data, static_cast<int>(count), mpi::datatype_of(dtype), root, state_->comm,
                      request);
  });
}

std::unique_ptr<PendingOperation> MpiBackend::barrier() {
  return start(state_, CollectiveCall{}, "", "MPI_Ibarrier",
               [&](MPI_Request* request) { return MPI_Ibarrier(state_->comm, request); });
}

std::shared_ptr<Backend> MpiBackend::split(int color, int key) const {
  require(color >= 0,
          "fsdp: ProcessGroup::split: color must be >= 0, got " + std::to_string(color));
  MPI_Comm sub = MPI_COMM_NULL;
  mpi::check(MPI_Comm_split(state_->comm, color, key, &sub), "MPI_Comm_split", state_->rank);
  return std::shared_ptr<Backend>(new MpiBackend(Adopt{}, sub, state_->guard.options()));
}

std::shared_ptr<Backend> MpiBackend::split_node_local() const {
  MPI_Comm sub = MPI_COMM_NULL;
  mpi::check(
      MPI_Comm_split_type(state_->comm, MPI_COMM_TYPE_SHARED, state_->rank, MPI_INFO_NULL, &sub),
      "MPI_Comm_split_type", state_->rank);
  return std::shared_ptr<Backend>(new MpiBackend(Adopt{}, sub, state_->guard.options()));
}

}  // namespace fsdp
