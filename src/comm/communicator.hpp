// detail::Communicator: the one owner of every MPI communicator fsdp creates (duplicates of the
// caller's, and splits of those). MPI_ERRORS_RETURN is set on each, so failures come back as
// return codes and become fsdp::Error instead of aborting the job.
#pragma once

#include <mpi.h>

namespace fsdp::detail {

class Communicator {
 public:
  Communicator() = default;  // holds MPI_COMM_NULL

  // MPI_Comm_dup(comm). Collective over comm. `who` names the caller in errors about comm itself
  // (MPI_COMM_NULL, MPI not initialized).
  static Communicator duplicate(MPI_Comm comm, const char* who);
  // MPI_Comm_split of this communicator (color >= 0). Collective over it.
  Communicator split(int color, int key) const;
  // The ranks that share a node with this one (MPI_COMM_TYPE_SHARED). Collective over it.
  Communicator split_node_local() const;

  // Frees the communicator unless MPI is already finalized: a group may outlive MPI_Finalize
  // (a static, or one destroyed after the test fixture), and MPI_Comm_free is erroneous then.
  ~Communicator();
  Communicator(Communicator&& other) noexcept;
  Communicator& operator=(Communicator&& other) noexcept;
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  MPI_Comm get() const { return comm_; }
  int rank() const { return rank_; }
  int size() const { return size_; }

  // Stops owning the communicator without freeing it: for one that may still carry messages
  // no rank will ever receive (after a timeout). MPI_Finalize or MPI_Abort reclaims it.
  void abandon();

 private:
  // Takes ownership of comm_ as just created: sets MPI_ERRORS_RETURN, reads rank and size.
  void adopt_created();
  void free();

  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0;
  int size_ = 0;
};

}  // namespace fsdp::detail
