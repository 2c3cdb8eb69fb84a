// The NCCL implementation of Backend: device buffers, operations enqueued on a CUDA stream,
// completion observed through CUDA events. Bootstrap and the collective guard run over MPI.
#include <cuda_runtime.h>
#include <nccl.h>

#include <string>
#include <utility>

#include "collective_guard.hpp"
#include "fsdp/comm/process_group.hpp"
#include "fsdp/core/error.hpp"
#include "mpi_types.hpp"

#if NCCL_VERSION_CODE < NCCL_VERSION(2, 13, 0)
#error "fsdp's NCCL backend needs NCCL 2.13 or newer (ncclAvg, ncclBfloat16, ncclGetLastError)"
#endif

namespace fsdp {
namespace {

void check_cuda(cudaError_t rc, const char* operation, int rank) {
  if (rc != cudaSuccess) {
    throw Error(std::string("fsdp: ") + operation + " on rank " + std::to_string(rank) +
                " failed: " + cudaGetErrorName(rc) + ": " + cudaGetErrorString(rc));
  }
}

void check_nccl(ncclResult_t rc, const char* operation, int rank, ncclComm_t comm = nullptr) {
  if (rc != ncclSuccess && rc != ncclInProgress) {
    std::string detail = comm ? ncclGetLastError(comm) : "";
    throw Error(std::string("fsdp: ") + operation + " on rank " + std::to_string(rank) +
                " failed: " + ncclGetErrorString(rc) + (detail.empty() ? "" : " (" + detail + ")"));
  }
}

ncclDataType_t nccl_type(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return ncclFloat32;
    case DType::f64:
      return ncclFloat64;
    case DType::bf16:
      return ncclBfloat16;
    case DType::f16:
      return ncclFloat16;
    case DType::i32:
      return ncclInt32;
    case DType::i64:
      return ncclInt64;
  }
  throw Error("fsdp: invalid DType value " + std::to_string(static_cast<int>(dtype)));
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
      return ncclSum;
    case ReduceOp::avg:
      return ncclAvg;
    case ReduceOp::max:
      return ncclMax;
    case ReduceOp::min:
      return ncclMin;
  }
  throw Error("fsdp: invalid ReduceOp value " + std::to_string(static_cast<int>(op)));
}

struct NcclGroupState {
  MPI_Comm comm = MPI_COMM_NULL;  // private duplicate: bootstrap, barrier, split
  int rank = 0;
  int size = 1;
  int device = 0;
  cudaStream_t stream = nullptr;
  ncclComm_t nccl = nullptr;
  bool aborted = false;
  std::unique_ptr<CollectiveGuard> guard;

  ~NcclGroupState() {
    if (nccl) {
      if (aborted) {
        ncclCommAbort(nccl);
      } else {
        ncclCommDestroy(nccl);
      }
    }
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized && comm != MPI_COMM_NULL) {
      MPI_Comm_free(&comm);
    }
  }
};

// A CUDA event recorded on the stream after the NCCL call: complete when the event is.
class NcclOperation final : public PendingOperation {
 public:
  NcclOperation(std::shared_ptr<NcclGroupState> state, OperationId id)
      : state_(std::move(state)), id_(id) {
    check_cuda(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming), "cudaEventCreate",
               state_->rank);
    check_cuda(cudaEventRecord(event_, state_->stream), "cudaEventRecord", state_->rank);
  }
  ~NcclOperation() override {
    if (event_) {
      cudaEventDestroy(event_);
    }
  }

  bool test() override {
    if (!done_) {
      const cudaError_t rc = cudaEventQuery(event_);
      if (rc == cudaSuccess) {
        done_ = true;
      } else if (rc != cudaErrorNotReady) {
        check_cuda(rc, name_of(id_.collective), state_->rank);
      } else {
        ncclResult_t async_error = ncclSuccess;
        check_nccl(ncclCommGetAsyncError(state_->nccl, &async_error), "ncclCommGetAsyncError",
                   state_->rank, state_->nccl);
        check_nccl(async_error, name_of(id_.collective), state_->rank, state_->nccl);
      }
    }
    return done_;
  }

  void wait() override {
    try {
      state_->guard->wait_until(id_, [this] { return test(); });
    } catch (...) {
      // Abort so that the stream does not stay blocked on peers that will never come.
      if (!state_->aborted) {
        state_->aborted = true;
        ncclCommAbort(state_->nccl);
        state_->nccl = nullptr;
      }
      throw;
    }
  }

 private:
  std::shared_ptr<NcclGroupState> state_;
  OperationId id_;
  cudaEvent_t event_ = nullptr;
  bool done_ = false;
};

class NcclBackend final : public Backend {
 public:
  NcclBackend(MPI_Comm comm, cudaStream_t stream, const CollectiveOptions& options)
      : state_(std::make_shared<NcclGroupState>()) {
    require(comm != MPI_COMM_NULL, "fsdp: ProcessGroup::nccl needs a valid communicator");
    mpi::check(MPI_Comm_dup(comm, &state_->comm), "MPI_Comm_dup");
    mpi::check(MPI_Comm_set_errhandler(state_->comm, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
    mpi::check(MPI_Comm_rank(state_->comm, &state_->rank), "MPI_Comm_rank");
    mpi::check(MPI_Comm_size(state_->comm, &state_->size), "MPI_Comm_size");
    state_->stream = stream;
    state_->guard = std::make_unique<CollectiveGuard>(state_->comm, options);

    // Every rank learns whether all ranks have a device before any of them calls into NCCL, so
    // that a rank without a GPU cannot leave the others blocked in ncclCommInitRank.
    int device_count = 0;
    const cudaError_t rc = cudaGetDeviceCount(&device_count);
    int have_device = (rc == cudaSuccess && device_count > 0) ? 1 : 0;
    int all_have_device = 0;
    mpi::check(MPI_Allreduce(&have_device, &all_have_device, 1, MPI_INT, MPI_MIN, state_->comm),
               "MPI_Allreduce (NCCL bootstrap)", state_->rank);
    if (!all_have_device) {
      throw Error("fsdp: ProcessGroup::nccl: " +
                  std::string(have_device
                                  ? "another rank has"
                                  : "this rank (" + std::to_string(state_->rank) + ") has") +
                  " no CUDA device (" + cudaGetErrorString(rc) +
                  "); run one rank per GPU or use the MPI ProcessGroup");
    }
    check_cuda(cudaGetDevice(&state_->device), "cudaGetDevice", state_->rank);

    ncclUniqueId id{};
    if (state_->rank == 0) {
      check_nccl(ncclGetUniqueId(&id), "ncclGetUniqueId", state_->rank);
    }
    mpi::check(MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, state_->comm), "MPI_Bcast (ncclUniqueId)",
               state_->rank);
    check_nccl(ncclCommInitRank(&state_->nccl, state_->size, id, state_->rank), "ncclCommInitRank",
               state_->rank);
    mpi::check(MPI_Barrier(state_->comm), "MPI_Barrier (after ncclCommInitRank)", state_->rank);
  }

  const char* name() const override { return "nccl"; }
  MemoryKind memory_kind() const override { return MemoryKind::cuda_device; }
  int rank() const override { return state_->rank; }
  int size() const override { return state_->size; }
  MPI_Comm mpi_comm() const override { return state_->comm; }

  std::unique_ptr<PendingOperation> all_gather(const void* send, void* recv, std::size_t count,
                                               DType dtype) override {
    return start({Collective::all_gather, dtype, static_cast<std::int64_t>(count)}, "", [&] {
      return ncclAllGather(send, recv, count, nccl_type(dtype), state_->nccl, state_->stream);
    });
  }

  std::unique_ptr<PendingOperation> all_gather_v(const void* send, std::size_t send_count,
                                                 void* recv, const std::vector<std::size_t>& counts,
                                                 DType dtype) override {
    const std::string problem =
        uneven_problem(Collective::all_gather_v, counts, send_count, state_->rank, state_->size);
    // One broadcast per rank inside a group: NCCL has no all-gather with uneven counts.
    return start(uneven_call(Collective::all_gather_v, counts, send_count, dtype), problem, [&] {
      ncclResult_t rc = ncclGroupStart();
      std::size_t offset = 0;
      const std::size_t bytes = size_of(dtype);
      for (int r = 0; r < state_->size && rc == ncclSuccess; ++r) {
        const std::size_t count = counts[static_cast<std::size_t>(r)];
        char* out = static_cast<char*>(recv) + offset * bytes;
        rc = ncclBroadcast(r == state_->rank ? send : out, out, count, nccl_type(dtype), r,
                           state_->nccl, state_->stream);
        offset += count;
      }
      const ncclResult_t end = ncclGroupEnd();
      return rc != ncclSuccess ? rc : end;
    });
  }

  std::unique_ptr<PendingOperation> reduce_scatter(const void* send, void* recv, std::size_t count,
                                                   DType dtype, ReduceOp op) override {
    return start({Collective::reduce_scatter, dtype, static_cast<std::int64_t>(count), -1,
                  static_cast<std::int64_t>(op)},
                 reduce_problem(Collective::reduce_scatter, dtype, op, state_->rank), [&] {
                   return ncclReduceScatter(send, recv, count, nccl_type(dtype), nccl_op(op),
                                            state_->nccl, state_->stream);
                 });
  }

  std::unique_ptr<PendingOperation> all_reduce(const void* send, void* recv, std::size_t count,
                                               DType dtype, ReduceOp op) override {
    return start({Collective::all_reduce, dtype, static_cast<std::int64_t>(count), -1,
                  static_cast<std::int64_t>(op)},
                 reduce_problem(Collective::all_reduce, dtype, op, state_->rank), [&] {
                   return ncclAllReduce(send, recv, count, nccl_type(dtype), nccl_op(op),
                                        state_->nccl, state_->stream);
                 });
  }

  std::unique_ptr<PendingOperation> broadcast(void* data, std::size_t count, DType dtype,
                                              int root) override {
    const std::string problem =
        root_problem(Collective::broadcast, root, state_->rank, state_->size);
    return start({Collective::broadcast, dtype, static_cast<std::int64_t>(count), root}, problem,
                 [&] {
                   return ncclBroadcast(data, data, count, nccl_type(dtype), root, state_->nccl,
                                        state_->stream);
                 });
  }

  std::unique_ptr<PendingOperation> reduce(const void* send, void* recv, std::size_t count,
                                           DType dtype, ReduceOp op, int root) override {
    const std::string problem =
        first_problem({root_problem(Collective::reduce, root, state_->rank, state_->size),
                       reduce_problem(Collective::reduce, dtype, op, state_->rank)});
    return start({Collective::reduce, dtype, static_cast<std::int64_t>(count), root,
                  static_cast<std::int64_t>(op)},
                 problem, [&] {
                   return ncclReduce(send, recv, count, nccl_type(dtype), nccl_op(op), root,
                                     state_->nccl, state_->stream);
                 });
  }

  std::unique_ptr<PendingOperation> scatter_v(const void* send,
                                              const std::vector<std::size_t>& counts, void* recv,
                                              std::size_t recv_count, DType dtype,
                                              int root) override {
    std::string problem = root_problem(Collective::scatter_v, root, state_->rank, state_->size);
    if (problem.empty()) {
      problem =
          uneven_problem(Collective::scatter_v, counts, recv_count, state_->rank, state_->size);
    }
    // Point-to-point inside a group: NCCL has no scatter.
    return start(uneven_call(Collective::scatter_v, counts, recv_count, dtype, root), problem, [&] {
      ncclResult_t rc = ncclGroupStart();
      const std::size_t bytes = size_of(dtype);
      if (state_->rank == root) {
        std::size_t offset = 0;
        for (int r = 0; r < state_->size && rc == ncclSuccess; ++r) {
          const std::size_t count = counts[static_cast<std::size_t>(r)];
          const char* from = static_cast<const char*>(send) + offset * bytes;
          rc = ncclSend(from, count, nccl_type(dtype), r, state_->nccl, state_->stream);
          offset += count;
        }
      }
      if (rc == ncclSuccess) {
        rc = ncclRecv(recv, recv_count, nccl_type(dtype), root, state_->nccl, state_->stream);
      }
      const ncclResult_t end = ncclGroupEnd();
      return rc != ncclSuccess ? rc : end;
    });
  }

  std::unique_ptr<PendingOperation> barrier() override {
    // The stream's work first, then the ranks: a barrier orders host code across ranks.
    const OperationId id = state_->guard->begin(CollectiveCall{}, "");
    check_cuda(cudaStreamSynchronize(state_->stream), "cudaStreamSynchronize", state_->rank);
    MPI_Request request = MPI_REQUEST_NULL;
    mpi::check(MPI_Ibarrier(state_->comm, &request), "MPI_Ibarrier", state_->rank);
    state_->guard->wait(id, request);
    return std::make_unique<NcclOperation>(state_, id);
  }

  std::shared_ptr<Backend> split(int color, int key) const override {
    require(color >= 0, "fsdp: ProcessGroup::split: color must be >= 0");
    MPI_Comm sub = MPI_COMM_NULL;
    mpi::check(MPI_Comm_split(state_->comm, color, key, &sub), "MPI_Comm_split", state_->rank);
    auto backend = std::make_shared<NcclBackend>(sub, state_->stream, state_->guard->options());
    MPI_Comm_free(&sub);
    return backend;
  }

  std::shared_ptr<Backend> split_node_local() const override {
    MPI_Comm sub = MPI_COMM_NULL;
    mpi::check(
        MPI_Comm_split_type(state_->comm, MPI_COMM_TYPE_SHARED, state_->rank, MPI_INFO_NULL, &sub),
        "MPI_Comm_split_type", state_->rank);
    auto backend = std::make_shared<NcclBackend>(sub, state_->stream, state_->guard->options());
    MPI_Comm_free(&sub);
    return backend;
  }

 private:
  template <class Enqueue>
  std::unique_ptr<PendingOperation> start(const CollectiveCall& call, const std::string& problem,
                                          Enqueue&& enqueue) {
    const OperationId id = state_->guard->begin(call, problem);
    require(state_->nccl != nullptr,
            std::string("fsdp: ") + name_of(call.collective) + " on an aborted NCCL group");
    check_nccl(enqueue(), name_of(call.collective), state_->rank, state_->nccl);
    return std::make_unique<NcclOperation>(state_, id);
  }

  std::shared_ptr<NcclGroupState> state_;
};

}  // namespace

ProcessGroup ProcessGroup::nccl(MPI_Comm comm, void* cuda_stream,
                                const CollectiveOptions& options) {
  return ProcessGroup(
      std::make_shared<NcclBackend>(comm, static_cast<cudaStream_t>(cuda_stream), options));
}

}  // namespace fsdp
