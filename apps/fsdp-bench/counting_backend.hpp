// CountingBackend: a Backend that forwards every collective to another one (MPI) and counts the
// bytes this rank sends in it, as the ring algorithms of docs/plans.md ("Bytes sent per step")
// move them (fsdp/comm/ring_traffic.hpp). It counts what the units actually issue (each
// collective's count, dtype, root and group size), not what MPI puts on the wire: MPI may choose
// other algorithms (recursive doubling, Bruck, shared memory), which move other amounts for the
// same collective.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "fsdp/comm/forwarding_backend.hpp"
#include "fsdp/comm/process_group.hpp"
#include "fsdp/comm/ring_traffic.hpp"

namespace fsdp::bench {

// Bytes one rank sent, by kind of collective.
struct SentBytes {
  std::int64_t gathers = 0;     // all_gather, all_gather_v, broadcast, scatter_v
  std::int64_t reductions = 0;  // reduce_scatter, reduce, all_reduce
  std::int64_t collectives = 0;
  std::int64_t total() const { return gathers + reductions; }
  SentBytes operator-(const SentBytes& before) const {
    return {gathers - before.gathers, reductions - before.reductions,
            collectives - before.collectives};
  }
};

class CountingBackend final : public ForwardingBackend {
 public:
  explicit CountingBackend(std::shared_ptr<Backend> inner) : ForwardingBackend(std::move(inner)) {}

  // Over the life of this backend; its splits count on their own.
  const SentBytes& sent() const { return sent_; }

  std::unique_ptr<PendingOperation> all_gather(const void* send, void* recv, std::size_t count,
                                               DType dtype, const std::string& problem) override {
    count_gather(ring::all_gather(count, size()), dtype, problem);
    return ForwardingBackend::all_gather(send, recv, count, dtype, problem);
  }
  std::unique_ptr<PendingOperation> all_gather_v(const void* send, std::size_t send_count,
                                                 void* recv, const std::vector<std::size_t>& counts,
                                                 DType dtype, const std::string& problem) override {
    count_gather(ring::all_gather_v(counts, size()), dtype, problem);
    return ForwardingBackend::all_gather_v(send, send_count, recv, counts, dtype, problem);
  }
  std::unique_ptr<PendingOperation> reduce_scatter(const void* send, void* recv, std::size_t count,
                                                   DType dtype, ReduceOp op,
                                                   const std::string& problem) override {
    count_reduction(ring::reduce_scatter(count, size()), dtype, problem);
    return ForwardingBackend::reduce_scatter(send, recv, count, dtype, op, problem);
  }
  std::unique_ptr<PendingOperation> all_reduce(const void* send, void* recv, std::size_t count,
                                               DType dtype, ReduceOp op,
                                               const std::string& problem) override {
    count_reduction(ring::all_reduce(count, size()), dtype, problem);
    return ForwardingBackend::all_reduce(send, recv, count, dtype, op, problem);
  }
  std::unique_ptr<PendingOperation> broadcast(void* data, std::size_t count, DType dtype, int root,
                                              const std::string& problem) override {
    count_gather(ring::broadcast(count, size(), root == rank()), dtype, problem);
    return ForwardingBackend::broadcast(data, count, dtype, root, problem);
  }
  std::unique_ptr<PendingOperation> reduce(const void* send, void* recv, std::size_t count,
                                           DType dtype, ReduceOp op, int root,
                                           const std::string& problem) override {
    count_reduction(ring::reduce(count, size(), root == rank()), dtype, problem);
    return ForwardingBackend::reduce(send, recv, count, dtype, op, root, problem);
  }
  std::unique_ptr<PendingOperation> scatter_v(const void* send,
                                              const std::vector<std::size_t>& counts, void* recv,
                                              std::size_t recv_count, DType dtype, int root,
                                              const std::string& problem) override {
    count_gather(ring::scatter_v(counts, root, rank()), dtype, problem);
    return ForwardingBackend::scatter_v(send, counts, recv, recv_count, dtype, root, problem);
  }

 protected:
  std::shared_ptr<Backend> wrap(std::shared_ptr<Backend> inner) const override {
    return std::make_shared<CountingBackend>(std::move(inner));
  }

 private:
  // A collective refused for its arguments (problem) moves nothing.
  void count_gather(std::int64_t elements, DType dtype, const std::string& problem) {
    if (problem.empty()) {
      sent_.gathers += elements * static_cast<std::int64_t>(size_of(dtype));
      ++sent_.collectives;
    }
  }
  void count_reduction(std::int64_t elements, DType dtype, const std::string& problem) {
    if (problem.empty()) {
      sent_.reductions += elements * static_cast<std::int64_t>(size_of(dtype));
      ++sent_.collectives;
    }
  }

  SentBytes sent_;
};

// A group on MPI whose collectives count their bytes (CountingBackend); its splits do too.
inline ProcessGroup counting_group(
    MPI_Comm comm, const CollectiveOptions& options = CollectiveOptions::from_environment()) {
  return ProcessGroup(std::make_shared<CountingBackend>(ProcessGroup(comm, options).backend()));
}

// The bytes a group made by counting_group (or split from one) sent so far; zero for a group on
// another backend.
inline SentBytes sent_by(const ProcessGroup& group) {
  const auto* counting = dynamic_cast<const CountingBackend*>(group.backend().get());
  return counting != nullptr ? counting->sent() : SentBytes{};
}

}  // namespace fsdp::bench
