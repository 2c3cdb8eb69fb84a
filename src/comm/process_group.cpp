#include "fsdp/comm/process_group.hpp"

#include "fsdp/core/memory_space.hpp"

#include "argument_check.hpp"
#include "communicator.hpp"
#include "dialled_backend.hpp"
#include "mpi_backend.hpp"

namespace fsdp {

const char* name_of(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
      return "sum";
    case ReduceOp::avg:
      return "avg";
    case ReduceOp::max:
      return "max";
    case ReduceOp::min:
      return "min";
  }
  return "invalid";
}

namespace {

// The MPI backend, behind the dialled network when one is given. A network out of range is
// raised with the environment's problems, on every rank of the group, as the group is made.
std::shared_ptr<Backend> mpi_backend(MPI_Comm comm, CollectiveOptions options) {
  const DialledNetwork& network = options.network;
  if (!(network.bytes_per_s >= 0 && network.latency_s >= 0)) {
    options.environment_error += (options.environment_error.empty() ? "" : "; ") +
                                 std::string("CollectiveOptions::network ") + network.text() +
                                 " out of range: give bytes_per_s > 0 (0: off) and latency_s >= 0";
  }
  std::shared_ptr<Backend> mpi =
      std::make_shared<MpiBackend>(detail::Communicator::duplicate(comm, "ProcessGroup"), options);
  return network.on() ? detail::dialled_backend(std::move(mpi), network) : mpi;
}

}  // namespace

ProcessGroup::ProcessGroup(MPI_Comm comm, const CollectiveOptions& options)
    : ProcessGroup(mpi_backend(comm, options), options.stage_host_buffers) {}

ProcessGroup::ProcessGroup(std::shared_ptr<Backend> backend, const CollectiveOptions& options)
    : ProcessGroup(std::move(backend), options.stage_host_buffers) {}

ProcessGroup::ProcessGroup(std::shared_ptr<Backend> backend, bool stage_host_buffers)
    : backend_(std::move(backend)), transport_(std::make_shared<TransportChoice>()) {
  require(backend_ != nullptr, "ProcessGroup needs a backend, got nullptr");
  const MemoryKind kind = backend_->memory_kind();
  // NCCL moves device memory itself: what MPI can do and staging concern MPI groups only.
  transport_->cuda_aware_mpi = kind == MemoryKind::host && mpi_is_cuda_aware();
  transport_->stage_host_buffers = kind == MemoryKind::host && stage_host_buffers;
  try {
    choose_transport(kind, kHostAccessible, transport_->cuda_aware_mpi);
  } catch (const Error& error) {
    // Kept, not thrown: the group may serve other buffers; a model sharded over it asks.
    transport_->problem = error.what();
  }
}

Transport ProcessGroup::transport() const {
  if (!transport_->problem.empty()) {
    throw Error(transport_->problem);
  }
  return transport_for<MemorySpace>();
}

ProcessGroup ProcessGroup::split(int color, int key) const {
  require(color >= 0, "ProcessGroup::split: color must be >= 0, got " + std::to_string(color));
  return ProcessGroup(backend_->split(color, key), transport_->stage_host_buffers);
}

void ProcessGroup::expect_broadcast(std::size_t count, DType dtype, int root) {
  require(root >= 0 && root < size(), [&] {
    return "ProcessGroup::expect_broadcast: root " + std::to_string(root) +
           " is not a rank of this group of " + std::to_string(size());
  });
  backend_->expect(count, dtype, root);
}

ProcessGroup ProcessGroup::node_local() const {
  return ProcessGroup(backend_->split_node_local(), transport_->stage_host_buffers);
}

// Every backend gets the arguments checked here, and only here (see Backend).

Work ProcessGroup::all_gather_async(const void* send, void* recv, std::size_t count, DType dtype) {
  const std::string problem =
      ArgumentCheck(Collective::all_gather, rank(), size())
          .dtype(dtype)
          .fits_int(count * static_cast<std::size_t>(size()), "receive size")
          .problem();
  return Work(backend_->all_gather(send, recv, count, dtype, problem));
}

Work ProcessGroup::all_gather_v_async(const void* send, std::size_t send_count, void* recv,
                                      const std::vector<std::size_t>& counts, DType dtype) {
  const std::string problem = ArgumentCheck(Collective::all_gather_v, rank(), size())
                                  .dtype(dtype)
                                  .uneven_counts(counts, send_count)
                                  .problem();
  return Work(backend_->all_gather_v(send, send_count, recv, counts, dtype, problem));
}

Work ProcessGroup::reduce_scatter_async(const void* send, void* recv, std::size_t count,
                                        DType dtype, ReduceOp op) {
  const std::string problem = ArgumentCheck(Collective::reduce_scatter, rank(), size())
                                  .dtype(dtype)
                                  .reduction(dtype, op)
                                  .fits_int(count * static_cast<std::size_t>(size()), "send size")
                                  .problem();
  return Work(backend_->reduce_scatter(send, recv, count, dtype, op, problem));
}

Work ProcessGroup::all_reduce_async(const void* send, void* recv, std::size_t count, DType dtype,
                                    ReduceOp op) {
  const std::string problem = ArgumentCheck(Collective::all_reduce, rank(), size())
                                  .dtype(dtype)
                                  .reduction(dtype, op)
                                  .fits_int(count, "count")
                                  .problem();
  return Work(backend_->all_reduce(send, recv, count, dtype, op, problem));
}

Work ProcessGroup::broadcast_async(void* data, std::size_t count, DType dtype, int root) {
  const std::string problem = ArgumentCheck(Collective::broadcast, rank(), size())
                                  .dtype(dtype)
                                  .root(root)
                                  .fits_int(count, "count")
                                  .problem();
  return Work(backend_->broadcast(data, count, dtype, root, problem));
}

Work ProcessGroup::reduce_async(const void* send, void* recv, std::size_t count, DType dtype,
                                ReduceOp op, int root) {
  const std::string problem = ArgumentCheck(Collective::reduce, rank(), size())
                                  .dtype(dtype)
                                  .root(root)
                                  .reduction(dtype, op)
                                  .fits_int(count, "count")
                                  .problem();
  return Work(backend_->reduce(send, recv, count, dtype, op, root, problem));
}

Work ProcessGroup::scatter_v_async(const void* send, const std::vector<std::size_t>& counts,
                                   void* recv, std::size_t recv_count, DType dtype, int root) {
  const std::string problem = ArgumentCheck(Collective::scatter_v, rank(), size())
                                  .dtype(dtype)
                                  .root(root)
                                  .uneven_counts(counts, recv_count)
                                  .problem();
  return Work(backend_->scatter_v(send, counts, recv, recv_count, dtype, root, problem));
}

Work ProcessGroup::barrier_async() {
  return Work(backend_->barrier());
}

}  // namespace fsdp
