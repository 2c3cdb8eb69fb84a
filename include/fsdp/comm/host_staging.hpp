// Host staging: how a collective moves device Views through an MPI library that cannot read
// device memory. The bytes are copied into host buffers, MPI moves those, and the result is
// copied back into the caller's View when the operation completes.
#pragma once

#include <Kokkos_Core.hpp>
#include <functional>
#include <utility>

#include "fsdp/comm/work.hpp"

namespace fsdp {

// Where staging buffers live: pinned host memory, which the GPU copies to and from at full
// bandwidth and asynchronously. Kokkos 4 names it SharedHostPinnedSpace in every build (HostSpace
// when there is no device); Kokkos 3 only has the CUDA one.
#if KOKKOS_VERSION >= 40000
using StagingMemorySpace = Kokkos::SharedHostPinnedSpace;
#elif defined(KOKKOS_ENABLE_CUDA)
using StagingMemorySpace = Kokkos::CudaHostPinnedSpace;
#else
using StagingMemorySpace = Kokkos::HostSpace;
#endif

// A transfer on staging buffers, and the copy of its result back into the caller's View. The copy
// runs exactly once, by the first test() that sees the transfer complete or by wait(), so the
// results are in place when either reports completion, as for any other operation.
class StagedOperation final : public PendingOperation {
 public:
  StagedOperation(Work transfer, std::function<void()> copy_back)
      : transfer_(std::move(transfer)), copy_back_(std::move(copy_back)) {}

  bool test() override {
    if (!done_ && transfer_.test()) {
      finish();
    }
    return done_;
  }

  void wait() override {
    if (!done_) {
      transfer_.wait();
      finish();
    }
  }

 private:
  void finish() {
    done_ = true;  // first: a copy that throws is reported once, not retried by the next wait
    if (copy_back_) {
      copy_back_();
    }
  }

  Work transfer_;
  std::function<void()> copy_back_;
  bool done_ = false;
};

}  // namespace fsdp
