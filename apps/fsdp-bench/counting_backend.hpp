// CountingBackend: a Backend that forwards every collective to another one (MPI) and counts the
// bytes this rank sends in it, as the ring algorithms of docs/plans.md ("Bytes sent per step")
// move them. It counts what the units actually issue (each collective's count, dtype, root and
// group size), not what MPI puts on the wire: MPI may choose other algorithms (recursive doubling,
// Bruck, shared memory), which move other amounts for the same collective.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "fsdp/comm/backend.hpp"
#include "fsdp/comm/process_group.hpp"

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

// Ring algorithms over n ranks in blocks of ceil(count / n) elements, as docs/plans.md counts
// them. Every function is 0 on one rank.
namespace ring {
inline std::int64_t block(std::size_t count, int n) {
  return (static_cast<std::int64_t>(count) + n - 1) / n;
}
// n - 1 steps, each forwarding one rank's chunk of count elements.
inline std::int64_t all_gather(std::size_t count, int n) {
  return (n - 1) * static_cast<std::int64_t>(count);
}
// n - 1 steps, each sending one partial sum of a chunk of count elements.
inline std::int64_t reduce_scatter(std::size_t count, int n) {
  return (n - 1) * static_cast<std::int64_t>(count);
}
// Reduce-scatter then all-gather of blocks.
inline std::int64_t all_reduce(std::size_t count, int n) {
  return 2 * (n - 1) * block(count, n);
}
// Scatter (the root sends n - 1 blocks) then ring all-gather of the blocks.
inline std::int64_t broadcast(std::size_t count, int n, bool root) {
  return (root ? 2 : 1) * (n - 1) * block(count, n);
}
// Ring reduce-scatter of blocks, then every other rank sends its block to the root.
inline std::int64_t reduce(std::size_t count, int n, bool root) {
  return (root ? n - 1 : n) * block(count, n);
}
}  // namespace ring

class CountingBackend final : public Backend {
 public:
  explicit CountingBackend(std::shared_ptr<Backend> inner) : inner_(std::move(inner)) {}

  // Over the life of this backend; its splits count on their own.
  const SentBytes& sent() const { return sent_; }

  const char* name() const override { return inner_->name(); }
  MemoryKind memory_kind() const override { return inner_->memory_kind(); }
  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  MPI_Comm mpi_comm() const override { return inner_->mpi_comm(); }

  std::unique_ptr<PendingOperation> all_gather(const void* send, void* recv, std::size_t count,
                                               DType dtype, const std::string& problem) override {
    count_gather(ring::all_gather(count, size()), dtype, problem);
    return inner_->all_gather(send, recv, count, dtype, problem);
  }
  std::unique_ptr<PendingOperation> all_gather_v(const void* send, std::size_t send_count,
                                                 void* recv, const std::vector<std::size_t>& counts,
                                                 DType dtype, const std::string& problem) override {
    // A ring moves every chunk padded to the largest.
    const std::size_t largest =
        counts.empty() ? 0 : *std::max_element(counts.begin(), counts.end());
    count_gather(ring::all_gather(largest, size()), dtype, problem);
    return inner_->all_gather_v(send, send_count, recv, counts, dtype, problem);
  }
  std::unique_ptr<PendingOperation> reduce_scatter(const void* send, void* recv, std::size_t count,
                                                   DType dtype, ReduceOp op,
                                                   const std::string& problem) override {
    count_reduction(ring::reduce_scatter(count, size()), dtype, problem);
    return inner_->reduce_scatter(send, recv, count, dtype, op, problem);
  }
  std::unique_ptr<PendingOperation> all_reduce(const void* send, void* recv, std::size_t count,
                                               DType dtype, ReduceOp op,
                                               const std::string& problem) override {
    count_reduction(ring::all_reduce(count, size()), dtype, problem);
    return inner_->all_reduce(send, recv, count, dtype, op, problem);
  }
  std::unique_ptr<PendingOperation> broadcast(void* data, std::size_t count, DType dtype, int root,
                                              const std::string& problem) override {
    count_gather(ring::broadcast(count, size(), root == rank()), dtype, problem);
    return inner_->broadcast(data, count, dtype, root, problem);
  }
  std::unique_ptr<PendingOperation> reduce(const void* send, void* recv, std::size_t count,
                                           DType dtype, ReduceOp op, int root,
                                           const std::string& problem) override {
    count_reduction(ring::reduce(count, size(), root == rank()), dtype, problem);
    return inner_->reduce(send, recv, count, dtype, op, root, problem);
  }
  std::unique_ptr<PendingOperation> scatter_v(const void* send,
                                              const std::vector<std::size_t>& counts, void* recv,
                                              std::size_t recv_count, DType dtype, int root,
                                              const std::string& problem) override {
    // The root sends every other rank its chunk.
    const std::size_t all = std::accumulate(counts.begin(), counts.end(), std::size_t{0});
    const bool me = root == rank() && static_cast<std::size_t>(root) < counts.size();
    count_gather(me ? static_cast<std::int64_t>(all - counts[static_cast<std::size_t>(root)]) : 0,
                 dtype, problem);
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
    return std::make_shared<CountingBackend>(inner_->split(color, key));
  }
  std::shared_ptr<Backend> split_node_local() const override {
    return std::make_shared<CountingBackend>(inner_->split_node_local());
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

  std::shared_ptr<Backend> inner_;
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
