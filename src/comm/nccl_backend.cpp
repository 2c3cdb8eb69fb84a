// The NCCL implementation of Backend: device buffers, operations enqueued on a CUDA stream,
// completion observed through CUDA events. Bootstrap and the collective guard run over MPI.
#include <cuda_runtime.h>
#include <nccl.h>

#include <string>
#include <utility>

#include "collective_guard.hpp"
#include "communicator.hpp"
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
    throw Error(ErrorKind::communication,
                std::string(operation) + " on rank " + std::to_string(rank) +
                    " failed: " + cudaGetErrorName(rc) + ": " + cudaGetErrorString(rc));
  }
}

void check_nccl(ncclResult_t rc, const char* operation, int rank, ncclComm_t comm = nullptr) {
  if (rc != ncclSuccess && rc != ncclInProgress) {
    std::string detail = comm ? ncclGetLastError(comm) : "";
    throw Error(ErrorKind::communication,
                std::string(operation) + " on rank " + std::to_string(rank) + " failed: " +
                    ncclGetErrorString(rc) + (detail.empty() ? "" : " (" + detail + ")"));
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
  throw Error("invalid DType value " + std::to_string(static_cast<int>(dtype)));
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
  throw Error("invalid ReduceOp value " + std::to_string(static_cast<int>(op)));
}

// A CUDA event that marks the end of enqueued work on the group's stream. Collectives started
// inside a batch are launched by NCCL only at the batch's ncclGroupEnd, so their shared event is
// recorded then, not when each is started.
struct StreamMark {
  cudaEvent_t event = nullptr;
  bool recorded = false;

  explicit StreamMark(int rank) {
    check_cuda(cudaEventCreateWithFlags(&event, cudaEventDisableTiming), "cudaEventCreate", rank);
  }
  ~StreamMark() {
    if (event) {
      cudaEventDestroy(event);
    }
  }
  StreamMark(const StreamMark&) = delete;
  StreamMark& operator=(const StreamMark&) = delete;

  void record(cudaStream_t stream, int rank) {
    check_cuda(cudaEventRecord(event, stream), "cudaEventRecord", rank);
    recorded = true;
  }
};

struct NcclGroupState {
  detail::Communicator comm;  // bootstrap, barrier, split; outlives everything below
  int device = 0;
  cudaStream_t stream = nullptr;
  ncclComm_t nccl = nullptr;
  bool aborted = false;
  std::unique_ptr<CollectiveGuard> guard;
  int batch_depth = 0;                     // nesting of begin_batch() calls
  std::shared_ptr<StreamMark> batch_mark;  // the open batch's completion mark

  ~NcclGroupState() {
    if (nccl) {
      if (aborted) {
        ncclCommAbort(nccl);
      } else {
        ncclCommDestroy(nccl);
      }
    }
  }
};

// Complete when the stream passes its mark: the mark recorded right after the NCCL call, or at
// the end of the batch the call was part of.
class NcclOperation final : public PendingOperation {
 public:
  NcclOperation(std::shared_ptr<NcclGroupState> state, OperationId id)
      : state_(std::move(state)), id_(id) {
    if (state_->batch_depth > 0) {
      mark_ = state_->batch_mark;
    } else {
      mark_ = std::make_shared<StreamMark>(state_->comm.rank());
      mark_->record(state_->stream, state_->comm.rank());
    }
  }

  bool test() override {
    if (!done_ && mark_->recorded) {
      const cudaError_t rc = cudaEventQuery(mark_->event);
      if (rc == cudaSuccess) {
        done_ = true;
      } else if (rc != cudaErrorNotReady) {
        check_cuda(rc, name_of(id_.collective), state_->comm.rank());
      } else {
        ncclResult_t async_error = ncclSuccess;
        check_nccl(ncclCommGetAsyncError(state_->nccl, &async_error), "ncclCommGetAsyncError",
                   state_->comm.rank(), state_->nccl);
        check_nccl(async_error, name_of(id_.collective), state_->comm.rank(), state_->nccl);
      }
    }
    return done_;
  }

  void wait() override {
    // Waiting inside the batch would wait forever: NCCL has not launched the collective yet.
    require(done_ || mark_->recorded, [&] {
      return std::string(name_of(id_.collective)) + " #" + std::to_string(id_.sequence) +
             " was waited on inside ProcessGroup::batch; NCCL launches a batch's collectives "
             "when the batch ends: start them with the *_async forms and wait after batch() "
             "returns";
    });
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
  std::shared_ptr<StreamMark> mark_;
  bool done_ = false;
};

class NcclBackend final : public Backend {
 public:
  // Works on comm (a duplicate or split private to this backend). Collective over comm.
  NcclBackend(detail::Communicator comm, cudaStream_t stream, const CollectiveOptions& options)
      : state_(std::make_shared<NcclGroupState>()) {
    state_->comm = std::move(comm);
    state_->stream = stream;
    state_->guard = std::make_unique<CollectiveGuard>(state_->comm.get(), options);

    // Every rank learns whether all ranks have a device before any of them calls into NCCL, so
    // that a rank without a GPU cannot leave the others blocked in ncclCommInitRank.
    int device_count = 0;
    const cudaError_t rc = cudaGetDeviceCount(&device_count);
    int have_device = (rc == cudaSuccess && device_count > 0) ? 1 : 0;
    int all_have_device = 0;
    mpi::check(
        MPI_Allreduce(&have_device, &all_have_device, 1, MPI_INT, MPI_MIN, state_->comm.get()),
        "MPI_Allreduce (NCCL bootstrap)", state_->comm.rank());
    if (!all_have_device) {
      throw Error("ProcessGroup::nccl: " +
                  std::string(have_device
                                  ? "another rank has"
                                  : "this rank (" + std::to_string(state_->comm.rank()) + ") has") +
                  " no CUDA device (" + cudaGetErrorString(rc) +
                  "); run one rank per GPU or use the MPI ProcessGroup");
    }
    check_cuda(cudaGetDevice(&state_->device), "cudaGetDevice", state_->comm.rank());

    ncclUniqueId id{};
    if (state_->comm.rank() == 0) {
      check_nccl(ncclGetUniqueId(&id), "ncclGetUniqueId", state_->comm.rank());
    }
    mpi::check(MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, state_->comm.get()),
               "MPI_Bcast (ncclUniqueId)", state_->comm.rank());
    check_nccl(ncclCommInitRank(&state_->nccl, state_->comm.size(), id, state_->comm.rank()),
               "ncclCommInitRank", state_->comm.rank());
    mpi::check(MPI_Barrier(state_->comm.get()), "MPI_Barrier (after ncclCommInitRank)",
               state_->comm.rank());
  }

  const char* name() const override { return "nccl"; }
  MemoryKind memory_kind() const override { return MemoryKind::cuda_device; }
  int rank() const override { return state_->comm.rank(); }
  int size() const override { return state_->comm.size(); }
  MPI_Comm mpi_comm() const override { return state_->comm.get(); }

  std::unique_ptr<PendingOperation> all_gather(const void* send, void* recv, std::size_t count,
                                               DType dtype, const std::string& problem) override {
    return start({Collective::all_gather, dtype, static_cast<std::int64_t>(count)}, problem, [&] {
      return ncclAllGather(send, recv, count, nccl_type(dtype), state_->nccl, state_->stream);
    });
  }

  std::unique_ptr<PendingOperation> all_gather_v(const void* send, std::size_t send_count,
                                                 void* recv, const std::vector<std::size_t>& counts,
                                                 DType dtype, const std::string& problem) override {
    // One broadcast per rank inside a group: NCCL has no all-gather with uneven counts.
    return start(uneven_call(Collective::all_gather_v, counts, send_count, dtype), problem, [&] {
      ncclResult_t rc = ncclGroupStart();
      std::size_t offset = 0;
      const std::size_t bytes = size_of(dtype);
      for (int r = 0; r < state_->comm.size() && rc == ncclSuccess; ++r) {
        const std::size_t count = counts[static_cast<std::size_t>(r)];
        char* out = static_cast<char*>(recv) + offset * bytes;
        rc = ncclBroadcast(r == state_->comm.rank() ? send : out, out, count, nccl_type(dtype), r,
                           state_->nccl, state_->stream);
        offset += count;
      }
      const ncclResult_t end = ncclGroupEnd();
      return rc != ncclSuccess ? rc : end;
    });
  }

  std::unique_ptr<PendingOperation> reduce_scatter(const void* send, void* recv, std::size_t count,
                                                   DType dtype, ReduceOp op,
                                                   const std::string& problem) override {
    return start({Collective::reduce_scatter, dtype, static_cast<std::int64_t>(count), -1,
                  static_cast<std::int64_t>(op)},
                 problem, [&] {
                   return ncclReduceScatter(send, recv, count, nccl_type(dtype), nccl_op(op),
                                            state_->nccl, state_->stream);
                 });
  }

  std::unique_ptr<PendingOperation> all_reduce(const void* send, void* recv, std::size_t count,
                                               DType dtype, ReduceOp op,
                                               const std::string& problem) override {
    return start({Collective::all_reduce, dtype, static_cast<std::int64_t>(count), -1,
                  static_cast<std::int64_t>(op)},
                 problem, [&] {
                   return ncclAllReduce(send, recv, count, nccl_type(dtype), nccl_op(op),
                                        state_->nccl, state_->stream);
                 });
  }

  std::unique_ptr<PendingOperation> broadcast(void* data, std::size_t count, DType dtype, int root,
                                              const std::string& problem) override {
    return start({Collective::broadcast, dtype, static_cast<std::int64_t>(count), root}, problem,
                 [&] {
                   return ncclBroadcast(data, data, count, nccl_type(dtype), root, state_->nccl,
                                        state_->stream);
                 });
  }

  std::unique_ptr<PendingOperation> reduce(const void* send, void* recv, std::size_t count,
                                           DType dtype, ReduceOp op, int root,
                                           const std::string& problem) override {
    return start({Collective::reduce, dtype, static_cast<std::int64_t>(count), root,
                  static_cast<std::int64_t>(op)},
                 problem, [&] {
                   return ncclReduce(send, recv, count, nccl_type(dtype), nccl_op(op), root,
                                     state_->nccl, state_->stream);
                 });
  }

  std::unique_ptr<PendingOperation> scatter_v(const void* send,
                                              const std::vector<std::size_t>& counts, void* recv,
                                              std::size_t recv_count, DType dtype, int root,
                                              const std::string& problem) override {
    // Point-to-point inside a group: NCCL has no scatter.
    return start(uneven_call(Collective::scatter_v, counts, recv_count, dtype, root), problem, [&] {
      ncclResult_t rc = ncclGroupStart();
      const std::size_t bytes = size_of(dtype);
      if (state_->comm.rank() == root) {
        std::size_t offset = 0;
        for (int r = 0; r < state_->comm.size() && rc == ncclSuccess; ++r) {
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
    require(state_->batch_depth == 0,
            "barrier inside ProcessGroup::batch; a barrier waits for the stream, which has "
            "not received the batch's collectives yet: call it after batch() returns");
    // The stream's work first, then the ranks: a barrier orders host code across ranks.
    const OperationId id = state_->guard->begin(CollectiveCall{}, "");
    check_cuda(cudaStreamSynchronize(state_->stream), "cudaStreamSynchronize", state_->comm.rank());
    MPI_Request request = MPI_REQUEST_NULL;
    mpi::check(MPI_Ibarrier(state_->comm.get(), &request), "MPI_Ibarrier", state_->comm.rank());
    state_->guard->wait(id, request);
    return std::make_unique<NcclOperation>(state_, id);
  }

  void begin_batch() override {
    check_nccl(ncclGroupStart(), "ncclGroupStart", state_->comm.rank());
    if (state_->batch_depth++ == 0) {
      state_->batch_mark = std::make_shared<StreamMark>(state_->comm.rank());
    }
  }

  void end_batch() override {
    require(state_->batch_depth > 0, "end_batch without begin_batch on an NCCL group");
    const bool outermost = --state_->batch_depth == 0;
    const ncclResult_t rc = ncclGroupEnd();
    if (outermost) {
      // The batch's collectives are on the stream now (or failed to get there): mark them.
      std::shared_ptr<StreamMark> mark = std::move(state_->batch_mark);
      mark->record(state_->stream, state_->comm.rank());
    }
    check_nccl(rc, "ncclGroupEnd", state_->comm.rank(), state_->nccl);
  }

  std::shared_ptr<Backend> split(int color, int key) const override {
    return std::make_shared<NcclBackend>(state_->comm.split(color, key), state_->stream,
                                         state_->guard->options());
  }

  std::shared_ptr<Backend> split_node_local() const override {
    return std::make_shared<NcclBackend>(state_->comm.split_node_local(), state_->stream,
                                         state_->guard->options());
  }

 private:
  template <class Enqueue>
  std::unique_ptr<PendingOperation> start(const CollectiveCall& call, const std::string& problem,
                                          Enqueue&& enqueue) {
    const OperationId id = state_->guard->begin(call, problem);
    require(state_->nccl != nullptr,
            [&] { return std::string(name_of(call.collective)) + " on an aborted NCCL group"; });
    check_nccl(enqueue(), name_of(call.collective), state_->comm.rank(), state_->nccl);
    return std::make_unique<NcclOperation>(state_, id);
  }

  std::shared_ptr<NcclGroupState> state_;
};

}  // namespace

ProcessGroup ProcessGroup::nccl(MPI_Comm comm, void* cuda_stream,
                                const CollectiveOptions& options) {
  return ProcessGroup(
      std::make_shared<NcclBackend>(detail::Communicator::duplicate(comm, "ProcessGroup::nccl"),
                                    static_cast<cudaStream_t>(cuda_stream), options));
}

}  // namespace fsdp
