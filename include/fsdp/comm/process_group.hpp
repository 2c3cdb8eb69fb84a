// ProcessGroup: the ranks that communicate together, and the collectives fsdp is built on.
#pragma once

#include <mpi.h>

#include <Kokkos_Core.hpp>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "fsdp/comm/backend.hpp"
#include "fsdp/comm/collective_options.hpp"
#include "fsdp/comm/host_staging.hpp"
#include "fsdp/comm/reduce_op.hpp"
#include "fsdp/comm/transport.hpp"
#include "fsdp/comm/work.hpp"
#include "fsdp/config.hpp"
#include "fsdp/core/dtype.hpp"
#include "fsdp/core/error.hpp"
#include "fsdp/core/memory_space.hpp"

namespace fsdp {

namespace detail {
class PointerCollectives;
}

// A cheap-to-copy handle on a communicator. Copies share the backend. Every collective must be
// called by all ranks of the group in the same order with matching arguments (the same count,
// dtype and root); CollectiveOptions turns a mismatch or a missing rank into fsdp::Error.
//
// Each collective takes the execution space instance that wrote its data, then contiguous Kokkos
// Views (as kokkos-comm's do), and comes blocking and as *_async, which returns a Work.
//
// The group decides once, when it is made, what carries the bytes of fsdp's buffers
// (transport()): NCCL, CUDA-aware MPI, MPI through host staging buffers, or MPI on host memory.
class ProcessGroup {
 public:
  // The MPI backend over MPI_Comm_dup(comm), with MPI_ERRORS_RETURN on the duplicate. Collective
  // over comm. Never uses MPI_COMM_WORLD unless comm is MPI_COMM_WORLD.
  explicit ProcessGroup(MPI_Comm comm,
                        const CollectiveOptions& options = CollectiveOptions::from_environment());
  // A group on any backend; of options, only stage_host_buffers is read here (the backend has
  // its own guard options).
  explicit ProcessGroup(std::shared_ptr<Backend> backend,
                        const CollectiveOptions& options = CollectiveOptions::from_environment());

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

  // What carries the bytes of fsdp's buffers (fsdp::MemorySpace) on this group, chosen when the
  // group was made from the backend, the memory space and mpi_is_cuda_aware() (mpi_staged also
  // when CollectiveOptions::stage_host_buffers forces staging): transport_for<MemorySpace>().
  // Throws fsdp::Error, saying what to do, when fsdp's buffers cannot use this group (host memory
  // on an NCCL group); making the group does not, so that a group can exist before anything is
  // sharded over it.
  Transport transport() const;
  const char* transport_name() const {
    return name_of(transport());
  }
  // What carries the bytes of Views in memory space Space through this group's collectives:
  // NCCL on an NCCL group (host Views through device staging buffers); on an MPI group, MPI on the
  // memory itself when host code can read it (staged when forced) or MPI is CUDA-aware, else
  // staging through host buffers.
  template <class Space>
  Transport transport_for() const {
    if (memory_kind() != MemoryKind::host) {
      return Transport::nccl;  // host Views go through device memory (stages())
    }
    const Transport chosen = choose_transport(
        MemoryKind::host, Kokkos::SpaceAccessibility<Kokkos::HostSpace, Space>::accessible,
        transport_->cuda_aware_mpi);
    return chosen == Transport::mpi_host && transport_->stage_host_buffers ? Transport::mpi_staged
                                                                           : chosen;
  }
  // For whatever shards fsdp's buffers over this group: throws transport()'s error, if any.
  void require_transport_for_buffers() const {
    static_cast<void>(transport());
  }
  // Bytes the collectives copied through staging buffers, both ways, over the life of this group
  // (its copies included). 0 when nothing was staged.
  std::uint64_t staged_bytes() const {
    return transport_->staged_bytes.load();
  }

  // Runs fn(), in which this rank starts collectives (the *_async forms) that the backend may
  // launch together: NCCL puts them in one ncclGroupStart/ncclGroupEnd, MPI starts each at once.
  // Wait for them after batch() returns: a batch's NCCL collectives start only when it ends.
  template <class Fn>
  void batch(Fn&& fn) {
    backend_->begin_batch();
    try {
      fn();
    } catch (...) {
      // fn's failure is the one to report; the batch must still be closed.
      try {
        backend_->end_batch();
      } catch (...) {
      }
      throw;
    }
    backend_->end_batch();
  }

  // Checking ahead (docs/collectives.md, "Checking ahead"): announces the all_gather or
  // broadcast this rank will issue next on this group, after those it announced before, so that
  // its signature check runs now and the collective starts as soon as it is issued, instead of at
  // the first poll after the other ranks have answered. The announced collectives must be issued
  // next, in order, exactly as announced; one that is not fails on this rank and leaves the group
  // unusable there. checks_ahead(): whether the backend does anything with them (the MPI backend
  // with signature checks on); where it does not, these calls do nothing.
  void expect_all_gather(std::size_t count, DType dtype) {
    backend_->expect(count, dtype, -1);
  }
  void expect_broadcast(std::size_t count, DType dtype, int root);
  bool checks_ahead() const {
    return backend_->checks_ahead();
  }

  // Sub-groups; collective over this group. Ranks with the same color form a group, ordered by
  // key then by rank here. color must be >= 0.
  ProcessGroup split(int color, int key) const;
  // The ranks that share a node with this one (MPI_Comm_split_type, MPI_COMM_TYPE_SHARED).
  ProcessGroup node_local() const;

  // ---- the collectives: contiguous Kokkos Views of any rank, the execution space first ----
  // space is the execution space instance whose kernels wrote the Views (the stream they ran
  // on): only it is fenced before the bytes move, so work on other instances keeps running, and
  // copies through staging buffers run on it. Host values go as host Views
  // (host_view(&x, 1), with Kokkos::DefaultHostExecutionSpace()). Views the group cannot move
  // where they are are copied through staging buffers (transport_for): device Views on an MPI
  // library without CUDA support through pinned host memory, host Views on an NCCL group through
  // device memory. The *_async forms return a Work that keeps the Views alive until it completes.

  // recv.size() == size() * send.size()
  template <class Space, class SendView, class RecvView>
  Work all_gather_async(const Space& space, const SendView& send, const RecvView& recv) {
    check_views(send, recv, "all_gather");
    require(recv.size() == send.size() * static_cast<std::size_t>(size()), [&] {
      return "all_gather: recv View " + label_of(recv) + " has " + std::to_string(recv.size()) +
             " elements; it must hold size() * send.size() = " +
             std::to_string(send.size() * static_cast<std::size_t>(size()));
    });
    return transfer(space, send, recv, Copies{true, true}, [&](const void* from, void* to) {
      return all_gather_async(from, to, send.size(), element_dtype(send));
    });
  }
  // recv.size() == sum of counts; send.size() == counts[rank()]
  template <class Space, class SendView, class RecvView>
  Work all_gather_v_async(const Space& space, const SendView& send, const RecvView& recv,
                          const std::vector<std::size_t>& counts) {
    check_views(send, recv, "all_gather_v");
    return transfer(space, send, recv, Copies{true, true}, [&](const void* from, void* to) {
      return all_gather_v_async(from, send.size(), to, counts, element_dtype(send));
    });
  }
  // send.size() == size() * recv.size()
  template <class Space, class SendView, class RecvView>
  Work reduce_scatter_async(const Space& space, const SendView& send, const RecvView& recv,
                            ReduceOp op) {
    check_views(send, recv, "reduce_scatter");
    require(send.size() == recv.size() * static_cast<std::size_t>(size()), [&] {
      return "reduce_scatter: send View " + label_of(send) + " has " + std::to_string(send.size()) +
             " elements; it must hold size() * recv.size() = " +
             std::to_string(recv.size() * static_cast<std::size_t>(size()));
    });
    return transfer(space, send, recv, Copies{true, true}, [&](const void* from, void* to) {
      return reduce_scatter_async(from, to, recv.size(), element_dtype(send), op);
    });
  }
  // In place.
  template <class Space, class View>
  Work all_reduce_async(const Space& space, const View& data, ReduceOp op) {
    check_views(data, data, "all_reduce");
    return transfer(space, data, data, Copies{true, true}, [&](const void* from, void* to) {
      return all_reduce_async(from, to, data.size(), element_dtype(data), op);
    });
  }
  // root's data replaces the others'.
  template <class Space, class View>
  Work broadcast_async(const Space& space, const View& data, int root) {
    check_views(data, data, "broadcast");
    // Only the root's bytes go out, and only the others' change.
    return transfer(space, data, data, Copies{rank() == root, rank() != root},
                    [&](const void*, void* to) {
                      return broadcast_async(to, data.size(), element_dtype(data), root);
                    });
  }
  // The reduction lands in root's recv (recv is not written elsewhere); send may be recv.
  template <class Space, class SendView, class RecvView>
  Work reduce_async(const Space& space, const SendView& send, const RecvView& recv, ReduceOp op,
                    int root) {
    check_views(send, recv, "reduce");
    return transfer(space, send, recv, Copies{true, rank() == root},
                    [&](const void* from, void* to) {
                      return reduce_async(from, to, send.size(), element_dtype(send), op, root);
                    });
  }
  // root's send holds the sum of counts (ignored elsewhere); recv.size() == counts[rank()].
  template <class Space, class SendView, class RecvView>
  Work scatter_v_async(const Space& space, const SendView& send,
                       const std::vector<std::size_t>& counts, const RecvView& recv, int root) {
    check_views(send, recv, "scatter_v");
    return transfer(
        space, send, recv, Copies{rank() == root, true}, [&](const void* from, void* to) {
          return scatter_v_async(from, counts, to, recv.size(), element_dtype(send), root);
        });
  }
  Work barrier_async();

  // The same, blocking until complete.
  template <class Space, class SendView, class RecvView>
  void all_gather(const Space& space, const SendView& send, const RecvView& recv) {
    all_gather_async(space, send, recv).wait();
  }
  template <class Space, class SendView, class RecvView>
  void all_gather_v(const Space& space, const SendView& send, const RecvView& recv,
                    const std::vector<std::size_t>& counts) {
    all_gather_v_async(space, send, recv, counts).wait();
  }
  template <class Space, class SendView, class RecvView>
  void reduce_scatter(const Space& space, const SendView& send, const RecvView& recv,
                      ReduceOp op = ReduceOp::sum) {
    reduce_scatter_async(space, send, recv, op).wait();
  }
  template <class Space, class View>
  void all_reduce(const Space& space, const View& data, ReduceOp op = ReduceOp::sum) {
    all_reduce_async(space, data, op).wait();
  }
  template <class Space, class View>
  void broadcast(const Space& space, const View& data, int root) {
    broadcast_async(space, data, root).wait();
  }
  template <class Space, class SendView, class RecvView>
  void reduce(const Space& space, const SendView& send, const RecvView& recv, ReduceOp op,
              int root) {
    reduce_async(space, send, recv, op, root).wait();
  }
  template <class Space, class SendView, class RecvView>
  void scatter_v(const Space& space, const SendView& send, const std::vector<std::size_t>& counts,
                 const RecvView& recv, int root) {
    scatter_v_async(space, send, counts, recv, root).wait();
  }
  void barrier() {
    barrier_async().wait();
  }

 private:
  friend class detail::PointerCollectives;

  ProcessGroup(std::shared_ptr<Backend> backend, bool stage_host_buffers);

  // The collectives on raw bytes, counts in elements of dtype: what the View forms start once
  // their bytes are where the backend reads them. Every backend gets its arguments checked here,
  // and only here (see Backend). The tests of the checks reach them through
  // detail::PointerCollectives (src/comm/pointer_collectives.hpp).
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

  // Decided once, when the group is made; shared by copies.
  struct TransportChoice {
    std::string problem;  // why fsdp::MemorySpace cannot use this group; empty when it can
    bool cuda_aware_mpi = false;
    bool stage_host_buffers = false;  // MPI groups only
    std::atomic<std::uint64_t> staged_bytes{0};
  };

  // Which of a collective's copies through staging buffers carry bytes: in (send to the
  // staging buffer) and back (staging buffer to recv).
  struct Copies {
    bool in;
    bool back;
  };

  template <class View>
  static DType element_dtype(const View&) {
    return dtype_of<typename View::non_const_value_type>();
  }
  template <class View>
  static std::string label_of(const View& view) {
    return "'" + view.label() + "'";
  }
  template <class SendView, class RecvView>
  static void check_views(const SendView& send, const RecvView& recv, const char* operation) {
    static_assert(Kokkos::is_view<SendView>::value && Kokkos::is_view<RecvView>::value,
                  "fsdp: the collectives take Kokkos::View arguments after the execution space "
                  "(host values: host_view(pointer, count))");
    static_assert(std::is_same_v<typename SendView::non_const_value_type,
                                 typename RecvView::non_const_value_type>,
                  "fsdp: send and recv Views must have the same element type");
    static_assert(
        std::is_same_v<typename RecvView::value_type, typename RecvView::non_const_value_type>,
        "fsdp: the receiving View must not be const");
    require(send.span_is_contiguous() && recv.span_is_contiguous(), [&] {
      return std::string(operation) + ": Views " + label_of(send) + " and " + label_of(recv) +
             " must be contiguous; deep_copy a strided View into a " + "contiguous one first";
    });
  }

  // Whether a View in memory space Space goes through staging buffers on this group: device
  // memory that MPI cannot read, or memory an NCCL group's kernels cannot reach (host Views).
  template <class Space>
  bool stages() const {
    if (memory_kind() == MemoryKind::host) {
      return transport_for<Space>() == Transport::mpi_staged;
    }
    return !Kokkos::SpaceAccessibility<ExecutionSpace, Space>::accessible;
  }

  // A View's elements as a flat unmanaged View in its own memory space, for deep_copy.
  template <class View>
  static auto flat(const View& view) {
    return Kokkos::View<typename View::value_type*, typename View::memory_space,
                        Kokkos::MemoryTraits<Kokkos::Unmanaged>>(view.data(), view.size());
  }

  // Runs start(send bytes, recv bytes) on the Views themselves, or on staging buffers when
  // either View stages (then send is copied in before and recv copied back on completion, as far
  // as `copies` says). send and recv are the same View for in-place collectives: one buffer.
  // Kernels still writing the Views must finish before the backend touches the bytes: space is
  // fenced first.
  template <class Space, class SendView, class RecvView, class Start>
  Work transfer(const Space& space, const SendView& send, const RecvView& recv, Copies copies,
                Start&& start) {
    static_assert(Kokkos::is_execution_space<Space>::value,
                  "fsdp: the first argument of a collective is the Kokkos execution space "
                  "instance whose kernels wrote the Views");
    space.fence();
    if (!stages<typename SendView::memory_space>() && !stages<typename RecvView::memory_space>()) {
      Work work = start(send.data(), recv.data());
      hold(work, send, recv);
      return work;
    }
    // MPI reads pinned host memory; NCCL reads the device memory of fsdp's buffers.
    if (memory_kind() == MemoryKind::host) {
      return transfer_staged<StagingMemorySpace>(space, send, recv, copies, start);
    }
    return transfer_staged<MemorySpace>(space, send, recv, copies, start);
  }

  template <class StagingSpace, class Space, class SendView, class RecvView, class Start>
  Work transfer_staged(const Space& space, const SendView& send, const RecvView& recv,
                       Copies copies, Start& start) {
    using Element = typename RecvView::non_const_value_type;
    using Staging = Kokkos::View<Element*, StagingSpace>;
    const bool in_place = static_cast<const void*>(send.data()) == recv.data();
    Staging send_staged(Kokkos::view_alloc(Kokkos::WithoutInitializing, "fsdp::staged_send"),
                        in_place ? 0 : send.size());
    Staging recv_staged(Kokkos::view_alloc(Kokkos::WithoutInitializing, "fsdp::staged_recv"),
                        recv.size());
    if (in_place) {
      send_staged = recv_staged;
    }
    if (copies.in) {
      Kokkos::deep_copy(space, send_staged, flat(send));
      space.fence();  // the backend reads send_staged as soon as it starts
      transport_->staged_bytes += send.size() * sizeof(Element);
    }
    Work transferred = start(send_staged.data(), recv_staged.data());
    std::function<void()> copy_back;
    if (copies.back) {
      copy_back = [space, to = flat(recv), recv_staged, choice = transport_] {
        Kokkos::deep_copy(space, to, recv_staged);
        space.fence();  // the results are in place when the operation reports completion
        choice->staged_bytes += to.size() * sizeof(Element);
      };
    }
    Work work(std::make_unique<StagedOperation>(std::move(transferred), std::move(copy_back)));
    hold(work, send, recv);
    work.keep_alive(std::make_shared<Staging>(send_staged));
    work.keep_alive(std::make_shared<Staging>(recv_staged));
    return work;
  }

  template <class SendView, class RecvView>
  static void hold(Work& work, const SendView& send, const RecvView& recv) {
    if (!work.completed()) {
      work.keep_alive(std::make_shared<SendView>(send));
      work.keep_alive(std::make_shared<RecvView>(recv));
    }
  }

  std::shared_ptr<Backend> backend_;
  std::shared_ptr<TransportChoice> transport_;
};

}  // namespace fsdp
