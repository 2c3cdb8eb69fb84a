#include "fsdp/comm/process_group.hpp"

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

ProcessGroup::ProcessGroup(MPI_Comm comm, const CollectiveOptions& options)
    : backend_(std::make_shared<MpiBackend>(comm, options)) {}

ProcessGroup::ProcessGroup(std::shared_ptr<Backend> backend) : backend_(std::move(backend)) {
  require(backend_ != nullptr, "fsdp: ProcessGroup needs a backend, got nullptr");
}

ProcessGroup ProcessGroup::split(int color, int key) const {
  return ProcessGroup(backend_->split(color, key));
}

ProcessGroup ProcessGroup::node_local() const {
  return ProcessGroup(backend_->split_node_local());
}

Work ProcessGroup::all_gather_async(const void* send, void* recv, std::size_t count, DType dtype) {
  return Work(backend_->all_gather(send, recv, count, dtype));
}

Work ProcessGroup::all_gather_v_async(const void* send, std::size_t send_count, void* recv,
                                      const std::vector<std::size_t>& counts, DType dtype) {
  return Work(backend_->all_gather_v(send, send_count, recv, counts, dtype));
}

Work ProcessGroup::reduce_scatter_async(const void* send, void* recv, std::size_t count,
                                        DType dtype, ReduceOp op) {
  return Work(backend_->reduce_scatter(send, recv, count, dtype, op));
}

Work ProcessGroup::all_reduce_async(const void* send, void* recv, std::size_t count, DType dtype,
                                    ReduceOp op) {
  return Work(backend_->all_reduce(send, recv, count, dtype, op));
}

Work ProcessGroup::broadcast_async(void* data, std::size_t count, DType dtype, int root) {
  return Work(backend_->broadcast(data, count, dtype, root));
}

Work ProcessGroup::reduce_async(const void* send, void* recv, std::size_t count, DType dtype,
                                ReduceOp op, int root) {
  return Work(backend_->reduce(send, recv, count, dtype, op, root));
}

Work ProcessGroup::scatter_v_async(const void* send, const std::vector<std::size_t>& counts,
                                   void* recv, std::size_t recv_count, DType dtype, int root) {
  return Work(backend_->scatter_v(send, counts, recv, recv_count, dtype, root));
}

Work ProcessGroup::barrier_async() {
  return Work(backend_->barrier());
}

}  // namespace fsdp
