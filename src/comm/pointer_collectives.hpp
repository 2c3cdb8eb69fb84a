// The collectives of a ProcessGroup on raw bytes, for the tests of the argument checks (a dtype or
// a ReduceOp out of range, counts that do not fit MPI's int, mismatched signatures), which the
// View forms cannot express, and of the backends' data paths per dtype. Not installed: users call
// the View forms.
#pragma once

#include <cstddef>
#include <utility>
#include <vector>

#include "fsdp/comm/process_group.hpp"

namespace fsdp::detail {

class PointerCollectives {
 public:
  explicit PointerCollectives(ProcessGroup group) : group_(std::move(group)) {}

  // ---- untyped: counts in elements of dtype ----
  Work all_gather_async(const void* send, void* recv, std::size_t count, DType dtype) {
    return group_.all_gather_async(send, recv, count, dtype);
  }
  Work all_gather_v_async(const void* send, std::size_t send_count, void* recv,
                          const std::vector<std::size_t>& counts, DType dtype) {
    return group_.all_gather_v_async(send, send_count, recv, counts, dtype);
  }
  Work reduce_scatter_async(const void* send, void* recv, std::size_t count, DType dtype,
                            ReduceOp op) {
    return group_.reduce_scatter_async(send, recv, count, dtype, op);
  }
  Work all_reduce_async(const void* send, void* recv, std::size_t count, DType dtype, ReduceOp op) {
    return group_.all_reduce_async(send, recv, count, dtype, op);
  }
  Work broadcast_async(void* data, std::size_t count, DType dtype, int root) {
    return group_.broadcast_async(data, count, dtype, root);
  }
  Work reduce_async(const void* send, void* recv, std::size_t count, DType dtype, ReduceOp op,
                    int root) {
    return group_.reduce_async(send, recv, count, dtype, op, root);
  }
  Work scatter_v_async(const void* send, const std::vector<std::size_t>& counts, void* recv,
                       std::size_t recv_count, DType dtype, int root) {
    return group_.scatter_v_async(send, counts, recv, recv_count, dtype, root);
  }

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

  // ---- typed pointers: the dtype from T ----
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

 private:
  ProcessGroup group_;
};

}  // namespace fsdp::detail
