// ProcessGroup: the ranks that communicate together, and the collectives fsdp is built on.
#pragma once

#include <mpi.h>

#include <Kokkos_Core.hpp>
#include <cstddef>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "fsdp/comm/backend.hpp"
#include "fsdp/comm/collective_options.hpp"
#include "fsdp/comm/reduce_op.hpp"
#include "fsdp/comm/work.hpp"
#include "fsdp/config.hpp"
#include "fsdp/core/dtype.hpp"
#include "fsdp/core/error.hpp"

namespace fsdp {

// A cheap-to-copy handle on a communicator. Copies share the backend. Every collective must be
// called by all ranks of the group in the same order with matching arguments (the same count,
// dtype and root); CollectiveOptions turns a mismatch or a missing rank into fsdp::Error.
//
// Each collective comes in three forms: pointer + count + DType, typed pointer + count, and
// Kokkos Views (contiguous; the View's execution space is fenced before the bytes move). The
// *_async forms return a Work that keeps the Views alive until it completes.
class ProcessGroup {
 public:
  // The MPI backend over MPI_Comm_dup(comm), with MPI_ERRORS_RETURN on the duplicate. Collective
  // over comm. Never uses MPI_COMM_WORLD unless comm is MPI_COMM_WORLD.
  explicit ProcessGroup(MPI_Comm comm,
                        const CollectiveOptions& options = CollectiveOptions::from_environment());
  explicit ProcessGroup(std::shared_ptr<Backend> backend);

#ifdef FSDP_HAVE_NCCL
  // The NCCL backend over the ranks of comm: rank 0 creates the ncclUniqueId, MPI broadcasts it,
  // every rank calls ncclCommInitRank on its current CUDA device. Buffers are device pointers;
  // operations are enqueued on cuda_stream (a cudaStream_t; nullptr for the default stream).
  static ProcessGroup nccl(
      MPI_Comm comm, void* cuda_stream = nullptr,
      const CollectiveOptions& options = CollectiveOptions::from_environment());
#endif

  int rank() const {
    return backend_->rank();
  }
  int size() const {
    return backend_->size();
  }
  const char* backend_name() const {
    return backend_->name();
  }
  MemoryKind memory_kind() const {
    return backend_->memory_kind();
  }
  MPI_Comm mpi_comm() const {
    return backend_->mpi_comm();
  }
  const std::shared_ptr<Backend>& backend() const {
    return backend_;
  }

  // Sub-groups; collective over this group. Ranks with the same color form a group, ordered by
  // key then by rank here. color must be >= 0.
  ProcessGroup split(int color, int key) const;
  // The ranks that share a node with this one (MPI_Comm_split_type, MPI_COMM_TYPE_SHARED).
  ProcessGroup node_local() const;

  // ---- untyped: counts in elements of dtype ----
  Work all_gather_async(const void* send, void* recv, std::size_t count, DType dtype);
  Work all_gather_v_async(const void* send, std::size_t send_count, void* recv,
                          const std::vector<std::size_t>& counts, DType dtype);
  Work reduce_scatter_async(const void* send, void* recv, std::size_t count, DType dtype,
                            ReduceOp op);
  Work all_reduce_async(const void* send, void* recv, std::size_t count, DType dtype, ReduceOp op);
  Work broadcast_async(void* data, std::size_t count, DType dtype, int root);
  Work reduce_async(const void* send, void* recv, std::size_t count, DType dtype, ReduceOp op,
                    int root);
  Work scatter_v_async(const void* send, const std::vector<std::size_t>& counts, void* recv,
                       std::size_t recv_count, DType dtype, int root);
  Work barrier_async();

  void all_gather(const void* send, void* recv, std::size_t count, DType dtype) {
    all_gather_async(send, recv, count, dtype).wait();
  }
  void all_gather_v(const void* send, std::size_t send_count, void* recv,
                    const std::vector<std::size_t>& counts, DType dtype) {
    all_gather_v_async(send, send_count, recv, counts, dtype).wait();
  }
  void reduce_scatter(const void* send, void* recv, std::size_t count, DType dtype, ReduceOp op) {
    reduce_scatter_async(send, recv, count, dtype, op).wait();
  }
  void all_reduce(const void* send, void* recv, std::size_t count, DType dtype, ReduceOp op) {
    all_reduce_async(send, recv, count, dtype, op).wait();
  }
  void broadcast(void* data, std::size_t count, DType dtype, int root) {
    broadcast_async(data, count, dtype, root).wait();
  }
  void reduce(const void* send, void* recv, std::size_t count, DType dtype, ReduceOp op, int root) {
    reduce_async(send, recv, count, dtype, op, root).wait();
  }
  void scatter_v(const void* send, const std::vector<std::size_t>& counts, void* recv,
                 std::size_t recv_count, DType dtype, int root) {
    scatter_v_async(send, counts, recv, recv_count, dtype, root).wait();
  }
  void barrier() {
    barrier_async().wait();
  }

  // ---- typed pointers ----
  template <class T>
  void all_gather(const T* send, T* recv, std::size_t count) {
    all_gather(send, recv, count, dtype_of<T>());
  }
  template <class T>
  void all_gather_v(const T* send, std::size_t send_count, T* recv,
                    const std::vector<std::size_t>& counts) {
    all_gather_v(send, send_count, recv, counts, dtype_of<T>());
  }
  template <class T>
  void reduce_scatter(const T* send, T* recv, std::size_t count, ReduceOp op = ReduceOp::sum) {
    reduce_scatter(send, recv, count, dtype_of<T>(), op);
  }
  template <class T>
  void all_reduce(T* data, std::size_t count, ReduceOp op = ReduceOp::sum) {
    all_reduce(data, data, count, dtype_of<T>(), op);
  }
  template <class T>
  void broadcast(T* data, std::size_t count, int root) {
    broadcast(data, count, dtype_of<T>(), root);
  }
  template <class T>
  void reduce(const T* send, T* recv, std::size_t count, ReduceOp op, int root) {
    reduce(send, recv, count, dtype_of<T>(), op, root);
  }
  template <class T>
  void scatter_v(const T* send, const std::vector<std::size_t>& counts, T* recv,
                 std::size_t recv_count, int root) {
    scatter_v(send, counts, recv, recv_count, dtype_of<T>(), root);
  }

  // ---- Kokkos Views (any rank, contiguous) ----
  // recv.size() == size() * send.size()
  template <class SendView, class RecvView>
  Work all_gather_async(const SendView& send, const RecvView& recv) {
    check_views(send, recv, "all_gather");
    require(recv.size() == send.size() * static_cast<std::size_t>(size()),
            "fsdp: all_gather: recv View " + label_of(recv) + " has " +
                std::to_string(recv.size()) + " elements; it must hold size() * send.size() = " +
                std::to_string(send.size() * static_cast<std::size_t>(size())));
    Work work = all_gather_async(send.data(), recv.data(), send.size(), element_dtype(send));
    hold(work, send, recv);
    return work;
  }
  // recv.size() == sum of counts; send.size() == counts[rank()]
  template <class SendView, class RecvView>
  Work all_gather_v_async(const SendView& send, const RecvView& recv,
                          const std::vector<std::size_t>& counts) {
    check_views(send, recv, "all_gather_v");
    Work work =
        all_gather_v_async(send.data(), send.size(), recv.data(), counts, element_dtype(send));
    hold(work, send, recv);
    return work;
  }
  // send.size() == size() * recv.size()
  template <class SendView, class RecvView>
  Work reduce_scatter_async(const SendView& send, const RecvView& recv, ReduceOp op) {
    check_views(send, recv, "reduce_scatter");
    require(send.size() == recv.size() * static_cast<std::size_t>(size()),
            "fsdp: reduce_scatter: send View " + label_of(send) + " has " +
                std::to_string(send.size()) + " elements; it must hold size() * recv.size() = " +
                std::to_string(recv.size() * static_cast<std::size_t>(size())));
    Work work =
        reduce_scatter_async(send.data(), recv.data(), recv.size(), element_dtype(send), op);
    hold(work, send, recv);
    return work;
  }
  // In place.
  template <class View>
  Work all_reduce_async(const View& data, ReduceOp op) {
    check_views(data, data, "all_reduce");
    Work work = all_reduce_async(data.data(), data.data(), data.size(), element_dtype(data), op);
    hold(work, data, data);
    return work;
  }
  template <class View>
  Work broadcast_async(const View& data, int root) {
    check_views(data, data, "broadcast");
    Work work = broadcast_async(data.data(), data.size(), element_dtype(data), root);
    hold(work, data, data);
    return work;
  }

  template <class SendView, class RecvView,
            class = std::enable_if_t<Kokkos::is_view<SendView>::value>>
  void all_gather(const SendView& send, const RecvView& recv) {
    all_gather_async(send, recv).wait();
  }
  template <class SendView, class RecvView,
            class = std::enable_if_t<Kokkos::is_view<SendView>::value>>
  void all_gather_v(const SendView& send, const RecvView& recv,
                    const std::vector<std::size_t>& counts) {
    all_gather_v_async(send, recv, counts).wait();
  }
  template <class SendView, class RecvView,
            class = std::enable_if_t<Kokkos::is_view<SendView>::value>>
  void reduce_scatter(const SendView& send, const RecvView& recv, ReduceOp op = ReduceOp::sum) {
    reduce_scatter_async(send, recv, op).wait();
  }
  template <class View, class = std::enable_if_t<Kokkos::is_view<View>::value>>
  void all_reduce(const View& data, ReduceOp op = ReduceOp::sum) {
    all_reduce_async(data, op).wait();
  }
  template <class View, class = std::enable_if_t<Kokkos::is_view<View>::value>>
  void broadcast(const View& data, int root) {
    broadcast_async(data, root).wait();
  }

 private:
  template <class View>
  static DType element_dtype(const View&) {
    return dtype_of<typename View::non_const_value_type>();
  }
  template <class View>
  static std::string label_of(const View& view) {
    return "'" + view.label() + "'";
  }
  template <class SendView, class RecvView>
  void check_views(const SendView& send, const RecvView& recv, const char* operation) const {
    static_assert(Kokkos::is_view<SendView>::value && Kokkos::is_view<RecvView>::value,
                  "fsdp: the View overloads take Kokkos::View arguments");
    static_assert(std::is_same_v<typename SendView::non_const_value_type,
                                 typename RecvView::non_const_value_type>,
                  "fsdp: send and recv Views must have the same element type");
    static_assert(
        std::is_same_v<typename RecvView::value_type, typename RecvView::non_const_value_type>,
        "fsdp: the receiving View must not be const");
    require(send.span_is_contiguous() && recv.span_is_contiguous(),
            std::string("fsdp: ") + operation + ": Views " + label_of(send) + " and " +
                label_of(recv) + " must be contiguous; deep_copy a strided View into a " +
                "contiguous one first");
    if constexpr (!Kokkos::SpaceAccessibility<Kokkos::HostSpace,
                                              typename RecvView::memory_space>::accessible) {
      require(memory_kind() == MemoryKind::cuda_device,
              std::string("fsdp: ") + operation + ": the " + backend_name() +
                  " backend needs host-accessible Views; use a ProcessGroup::nccl group for " +
                  "device memory or copy to a HostSpace mirror");
    }
    // Kernels still writing either View must finish before the backend touches the bytes.
    typename SendView::execution_space().fence();
    if constexpr (!std::is_same_v<typename SendView::execution_space,
                                  typename RecvView::execution_space>) {
      typename RecvView::execution_space().fence();
    }
  }
  template <class SendView, class RecvView>
  static void hold(Work& work, const SendView& send, const RecvView& recv) {
    if (!work.completed()) {
      work.keep_alive(std::make_shared<SendView>(send));
      work.keep_alive(std::make_shared<RecvView>(recv));
    }
  }

  std::shared_ptr<Backend> backend_;
};

}  // namespace fsdp
