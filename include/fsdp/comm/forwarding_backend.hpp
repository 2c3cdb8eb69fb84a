// ForwardingBackend: a Backend that hands every call to another one. A decorator derives from it
// and overrides what it changes: fsdp-bench counts each collective's bytes, a dialled network
// (dialled_network.hpp) delays each collective's completion.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "fsdp/comm/backend.hpp"

namespace fsdp {

class ForwardingBackend : public Backend {
 public:
  explicit ForwardingBackend(std::shared_ptr<Backend> inner) : inner_(std::move(inner)) {}

  const char* name() const override { return inner_->name(); }
  MemoryKind memory_kind() const override { return inner_->memory_kind(); }
  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  MPI_Comm mpi_comm() const override { return inner_->mpi_comm(); }

  std::unique_ptr<PendingOperation> all_gather(const void* send, void* recv, std::size_t count,
                                               DType dtype, const std::string& problem) override {
    return inner_->all_gather(send, recv, count, dtype, problem);
  }
  std::unique_ptr<PendingOperation> all_gather_v(const void* send, std::size_t send_count,
                                                 void* recv, const std::vector<std::size_t>& counts,
                                                 DType dtype, const std::string& problem) override {
    return inner_->all_gather_v(send, send_count, recv, counts, dtype, problem);
  }
  std::unique_ptr<PendingOperation> reduce_scatter(const void* send, void* recv, std::size_t count,
                                                   DType dtype, ReduceOp op,
                                                   const std::string& problem) override {
    return inner_->reduce_scatter(send, recv, count, dtype, op, problem);
  }
  std::unique_ptr<PendingOperation> all_reduce(const void* send, void* recv, std::size_t count,
                                               DType dtype, ReduceOp op,
                                               const std::string& problem) override {
    return inner_->all_reduce(send, recv, count, dtype, op, problem);
  }
  std::unique_ptr<PendingOperation> broadcast(void* data, std::size_t count, DType dtype, int root,
                                              const std::string& problem) override {
    return inner_->broadcast(data, count, dtype, root, problem);
  }
  std::unique_ptr<PendingOperation> reduce(const void* send, void* recv, std::size_t count,
                                           DType dtype, ReduceOp op, int root,
                                           const std::string& problem) override {
    return inner_->reduce(send, recv, count, dtype, op, root, problem);
  }
  std::unique_ptr<PendingOperation> scatter_v(const void* send,
                                              const std::vector<std::size_t>& counts, void* recv,
                                              std::size_t recv_count, DType dtype, int root,
                                              const std::string& problem) override {
    return inner_->scatter_v(send, counts, recv, recv_count, dtype, root, problem);
  }
  std::unique_ptr<PendingOperation> barrier() override { return inner_->barrier(); }
  void expect(std::size_t count, DType dtype, int root) override {
    inner_->expect(count, dtype, root);
  }
  bool checks_ahead() const override { return inner_->checks_ahead(); }
  void begin_batch() override { inner_->begin_batch(); }
  void end_batch() override { inner_->end_batch(); }

  std::shared_ptr<Backend> split(int color, int key) const override {
    return wrap(inner_->split(color, key));
  }
  std::shared_ptr<Backend> split_node_local() const override {
    return wrap(inner_->split_node_local());
  }

 protected:
  // The same decorator over a split of the backend underneath (what it shares with this one is
  // its own choice).
  virtual std::shared_ptr<Backend> wrap(std::shared_ptr<Backend> inner) const = 0;

 private:
  std::shared_ptr<Backend> inner_;
};

}  // namespace fsdp
