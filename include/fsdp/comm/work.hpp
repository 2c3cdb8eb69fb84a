// Work: the handle of a non-blocking collective.
#pragma once

#include <memory>
#include <vector>

namespace fsdp {

// What a backend implements for one operation in flight.
class PendingOperation {
 public:
  virtual ~PendingOperation() = default;
  // Makes progress; true once the operation completed (and its results are in place).
  virtual bool test() = 0;
  // Blocks until complete; throws fsdp::Error on failure or timeout.
  virtual void wait() = 0;
};

// Returned by every *_async collective. Keeps the buffers it was given (Views are held by value)
// alive until the operation completes, so the caller may drop its own references. Destroying a Work
// that has not completed waits for it first: the buffers must outlive the transfer.
class Work {
 public:
  Work() = default;  // an already-completed operation
  explicit Work(std::unique_ptr<PendingOperation> operation);
  Work(Work&&) noexcept = default;
  Work& operator=(Work&& other) noexcept;
  Work(const Work&) = delete;
  Work& operator=(const Work&) = delete;
  ~Work();

  // Blocks until the operation has completed; rethrows its failure. Idempotent.
  void wait();
  // Non-blocking: makes progress and returns true once complete; rethrows its failure, after
  // which it counts as completed, as after wait().
  bool test();
  bool completed() const { return operation_ == nullptr; }

  // Holds resource until completion (used by the View overloads of ProcessGroup).
  void keep_alive(std::shared_ptr<const void> resource);

 private:
  void finish();
  void wait_noexcept() noexcept;

  std::unique_ptr<PendingOperation> operation_;
  std::vector<std::shared_ptr<const void>> resources_;
};

// Waits for every handle in order; the first failure is rethrown after all were waited on.
void wait_all(std::vector<Work>& works);

}  // namespace fsdp
