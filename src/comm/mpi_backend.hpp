// The MPI implementation of Backend: non-blocking MPI collectives on a communicator private to
// fsdp, with optional argument agreement checks and a timeout on every wait.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <memory>
#include <string>

#include "communicator.hpp"
#include "fsdp/comm/backend.hpp"
#include "fsdp/comm/collective_options.hpp"

namespace fsdp {

struct MpiGroupState;  // shared by the backend and its operations in flight

class MpiBackend final : public Backend {
 public:
  // Reductions of more bytes than this are reduced piece by piece, one piece of at most this
  // many bytes in flight at a time: an all_reduce's buffer cut in slices, a reduce_scatter's
  // send buffer (over the whole group) packed slice by slice when it is in host memory. Open MPI
  // 4.1's reductions slow down 10-40x once a call's buffers pass about 8 MiB (on 2 and 4 ranks
  // here; docs/performance.md), and pieces of 1-4 MiB one after the other stay at the memory's
  // speed.
  static constexpr std::size_t kReductionPieceBytes = std::size_t{2} << 20;

  // Works on comm (a duplicate or split private to this backend). Collective over comm.
  MpiBackend(detail::Communicator comm, const CollectiveOptions& options);
  ~MpiBackend() override;

  const char* name() const override { return "mpi"; }
  MemoryKind memory_kind() const override { return MemoryKind::host; }
  int rank() const override;
  int size() const override;
  MPI_Comm mpi_comm() const override;

  std::unique_ptr<PendingOperation> all_gather(const void* send, void* recv, std::size_t count,
                                               DType dtype, const std::string& problem) override;
  std::unique_ptr<PendingOperation> all_gather_v(const void* send, std::size_t send_count,
                                                 void* recv, const std::vector<std::size_t>& counts,
                                                 DType dtype, const std::string& problem) override;
  std::unique_ptr<PendingOperation> reduce_scatter(const void* send, void* recv, std::size_t count,
                                                   DType dtype, ReduceOp op,
                                                   const std::string& problem) override;
  std::unique_ptr<PendingOperation> all_reduce(const void* send, void* recv, std::size_t count,
                                               DType dtype, ReduceOp op,
                                               const std::string& problem) override;
  std::unique_ptr<PendingOperation> broadcast(void* data, std::size_t count, DType dtype, int root,
                                              const std::string& problem) override;
  std::unique_ptr<PendingOperation> reduce(const void* send, void* recv, std::size_t count,
                                           DType dtype, ReduceOp op, int root,
                                           const std::string& problem) override;
  std::unique_ptr<PendingOperation> scatter_v(const void* send,
                                              const std::vector<std::size_t>& counts, void* recv,
                                              std::size_t recv_count, DType dtype, int root,
                                              const std::string& problem) override;
  std::unique_ptr<PendingOperation> barrier() override;

  void expect(std::size_t count, DType dtype, int root) override;
  bool checks_ahead() const override;

  std::shared_ptr<Backend> split(int color, int key) const override;
  std::shared_ptr<Backend> split_node_local() const override;

 private:
  std::shared_ptr<MpiGroupState> state_;
};

}  // namespace fsdp
