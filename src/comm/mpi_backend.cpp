#include "mpi_backend.hpp"

#include <functional>
#include <utility>

#include "collective_guard.hpp"
#include "fsdp/core/error.hpp"
#include "mpi_types.hpp"

namespace fsdp {

struct MpiGroupState {
  detail::Communicator comm;  // declared first: the guard goes before the communicator
  CollectiveGuard guard;

  MpiGroupState(detail::Communicator owned, const CollectiveOptions& options)
      : comm(std::move(owned)), guard(comm.get(), options) {}
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
                 state_->comm.rank());
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
  mpi::check(issue(operation->request()), mpi_name, state->comm.rank());
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
  const CollectiveCall call{Collective::all_gather, dtype, static_cast<std::int64_t>(count)};
  return start(state_, call, problem, "MPI_Iallgather", [&](MPI_Request* request) {
    const int n = static_cast<int>(count);
    return MPI_Iallgather(send, n, mpi::datatype_of(dtype), recv, n, mpi::datatype_of(dtype),
                          state_->comm.get(), request);
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
      [&](MPI_Request* request) {
        layout->fill(counts);
        return MPI_Iallgatherv(send, static_cast<int>(send_count), mpi::datatype_of(dtype), recv,
                               layout->counts.data(), layout->displacements.data(),
                               mpi::datatype_of(dtype), state_->comm.get(), request);
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
      [&](MPI_Request* request) {
        layout->fill(counts);
        return MPI_Iscatterv(send, layout->counts.data(), layout->displacements.data(),
                             mpi::datatype_of(dtype), recv, static_cast<int>(recv_count),
                             mpi::datatype_of(dtype), root, state_->comm.get(), request);
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
      [&](MPI_Request* request) {
        return MPI_Ireduce(at_root && send == recv ? MPI_IN_PLACE : send, recv,
                           static_cast<int>(count), mpi::datatype_of(dtype), mpi::op_of(op, dtype),
                           root, state_->comm.get(), request);
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
      [&](MPI_Request* request) {
        return MPI_Ireduce_scatter_block(send, recv, static_cast<int>(count),
                                         mpi::datatype_of(dtype), mpi::op_of(op, dtype),
                                         state_->comm.get(), request);
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
      [&](MPI_Request* request) {
        return MPI_Iallreduce(send == recv ? MPI_IN_PLACE : send, recv, static_cast<int>(count),
                              mpi::datatype_of(dtype), mpi::op_of(op, dtype), state_->comm.get(),
                              request);
      },
      average_after(*state_, recv, count, dtype, op));
}

std::unique_ptr<PendingOperation> MpiBackend::broadcast(void* data, std::size_t count, DType dtype,
                                                        int root, const std::string& problem) {
  const CollectiveCall call{Collective::broadcast, dtype, static_cast<std::int64_t>(count), root};
  return start(state_, call, problem, "MPI_Ibcast", [&](MPI_Request* request) {
    return MPI_Ibcast(data, static_cast<int>(count), mpi::datatype_of(dtype), root,
                      state_->comm.get(), request);
  });
}

std::unique_ptr<PendingOperation> MpiBackend::barrier() {
  return start(state_, CollectiveCall{}, "", "MPI_Ibarrier",
               [&](MPI_Request* request) { return MPI_Ibarrier(state_->comm.get(), request); });
}

std::shared_ptr<Backend> MpiBackend::split(int color, int key) const {
  return std::make_shared<MpiBackend>(state_->comm.split(color, key), state_->guard.options());
}

std::shared_ptr<Backend> MpiBackend::split_node_local() const {
  return std::make_shared<MpiBackend>(state_->comm.split_node_local(), state_->guard.options());
}

}  // namespace fsdp
