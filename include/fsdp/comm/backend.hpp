// Backend: the interface a communication library (MPI, NCCL) implements for ProcessGroup.
// Sharding code talks to ProcessGroup only and never learns which backend moves the bytes.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "fsdp/comm/reduce_op.hpp"
#include "fsdp/comm/work.hpp"
#include "fsdp/core/dtype.hpp"

namespace fsdp {

// Where a backend expects its buffers to live.
enum class MemoryKind { host, cuda_device };

class Backend {
 public:
  virtual ~Backend() = default;

  virtual const char* name() const = 0;
  virtual MemoryKind memory_kind() const = 0;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // The MPI communicator the backend was built on (a duplicate private to fsdp): for MPI interop
  // such as parallel HDF5, and for backends' own bootstrap.
  virtual MPI_Comm mpi_comm() const = 0;

  // Counts are elements of dtype. Buffers must stay valid until the returned operation completes;
  // ProcessGroup takes care of that for Views.
  //
  // ProcessGroup checks every collective's arguments before calling a backend (roots, counts,
  // dtypes, reduce ops, int count limits) and passes what it found as `problem`: empty when the
  // arguments are valid, else the error text. A backend checks no arguments itself: it hands
  // `problem` to its collective guard before moving any bytes, which makes the collective fail
  // on every rank instead of leaving the other ranks waiting.

  // recv holds size() * count elements, rank r's chunk at r * count.
  virtual std::unique_ptr<PendingOperation> all_gather(const void* send, void* recv,
                                                       std::size_t count, DType dtype,
                                                       const std::string& problem) = 0;
  // Rank r contributes counts[r] elements (send_count must equal counts[rank()]); recv holds their
  // sum, rank r's chunk at the sum of counts[0..r).
  virtual std::unique_ptr<PendingOperation> all_gather_v(const void* send, std::size_t send_count,
                                                         void* recv,
                                                         const std::vector<std::size_t>& counts,
                                                         DType dtype,
                                                         const std::string& problem) = 0;
  // send holds size() * count elements; rank r receives the reduction of every rank's chunk r.
  virtual std::unique_ptr<PendingOperation> reduce_scatter(const void* send, void* recv,
                                                           std::size_t count, DType dtype,
                                                           ReduceOp op,
                                                           const std::string& problem) = 0;
  // send may equal recv (in place).
  virtual std::unique_ptr<PendingOperation> all_reduce(const void* send, void* recv,
                                                       std::size_t count, DType dtype, ReduceOp op,
                                                       const std::string& problem) = 0;
  virtual std::unique_ptr<PendingOperation> broadcast(void* data, std::size_t count, DType dtype,
                                                      int root, const std::string& problem) = 0;
  // The reduction of every rank's send lands in root's recv (recv is ignored elsewhere).
  virtual std::unique_ptr<PendingOperation> reduce(const void* send, void* recv, std::size_t count,
                                                   DType dtype, ReduceOp op, int root,
                                                   const std::string& problem) = 0;
  // root's send holds the sum of counts, rank r's chunk at the sum of counts[0..r); rank r
  // receives counts[r] elements (recv_count must equal counts[rank()]). send is ignored elsewhere.
  virtual std::unique_ptr<PendingOperation> scatter_v(const void* send,
                                                      const std::vector<std::size_t>& counts,
                                                      void* recv, std::size_t recv_count,
                                                      DType dtype, int root,
                                                      const std::string& problem) = 0;
  virtual std::unique_ptr<PendingOperation> barrier() = 0;

  // Checks ahead: announces the all_gather or broadcast (root >= 0) that this rank will issue
  // next on this group, after those it announced before, with this count and dtype. A backend
  // that checks signatures ahead (checks_ahead()) starts the collective's signature check now, so
  // that the other ranks have answered it by the time it is issued and it starts at once. The
  // collective must then be issued with exactly this signature and valid arguments, and before
  // any other collective on this group: else it fails on this rank, which makes the group
  // unusable there. The default does nothing: the check runs when the collective is issued.
  virtual void expect(std::size_t /*count*/, DType /*dtype*/, int /*root*/) {}
  virtual bool checks_ahead() const { return false; }

  // Collectives started between begin_batch() and end_batch() may be launched together. Nested
  // calls are allowed. A backend that launches each collective at once does nothing (MPI).
  virtual void begin_batch() {}
  virtual void end_batch() {}

  // New backends of the same kind over sub-communicators; collective over this group. color is
  // >= 0 (ProcessGroup checks).
  virtual std::shared_ptr<Backend> split(int color, int key) const = 0;
  virtual std::shared_ptr<Backend> split_node_local() const = 0;
};

}  // namespace fsdp
