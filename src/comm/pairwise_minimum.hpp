// PairwiseMinimum: the element-wise minimum of two 64-bit words over the ranks of a communicator,
// non-blocking, by recursive doubling on point-to-point messages.
//
// It carries the collective signature check, which runs before every collective. Open MPI's
// MPI_Iallreduce of two words took 0.84 us in a tight loop on 2 ranks of the development machine,
// a point-to-point exchange 0.32 us (the schedule of a non-blocking collective costs more than
// the message). It is non-blocking, not MPI_Allreduce, so that the caller of a collective goes on
// while its check runs, and the guard's wait can give up after its timeout and say which ranks
// never arrived.
//
// The algorithm is MPICH's for small all-reduces: with p the largest power of two <= n and
// r = n - p, ranks below 2r pair up first (the even one hands its words to the odd one and waits
// for the result), the p remaining ranks exchange with rank ^ 1, ^ 2, ^ 4, ... and combine, and
// the odd ranks below 2r send the result back. ceil(log2 n) + 2 steps at most, two words each.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <vector>

namespace fsdp::detail {

class PairwiseMinimum {
 public:
  // Starts computing the minimum of words over comm: a collective call, every rank must start
  // one. Minimums that share comm and tag must be started in the same order on every rank, and
  // each polled until done before the next one is polled (their messages then meet in order;
  // CollectiveGuard does so, and gives each of kChecksInFlight consecutive checks a tag of its
  // own besides). The object holds MPI's buffers until done: it must not move or be destroyed
  // while a step is in flight.
  PairwiseMinimum(MPI_Comm comm, int tag, const std::int64_t (&words)[2]);
  PairwiseMinimum(const PairwiseMinimum&) = delete;
  PairwiseMinimum& operator=(const PairwiseMinimum&) = delete;

  // Advances; true once words() holds the minimum over every rank. Throws fsdp::Error for MPI's
  // errors.
  bool poll();
  const std::int64_t* words() const { return value_; }

 private:
  struct Step {
    int peer;
    bool sends;     // this rank's words to peer
    bool receives;  // words from peer, combined into this rank's (or, for result, replacing them)
    bool result;
  };
  void post();

  MPI_Comm comm_;
  int tag_;
  int rank_;
  std::vector<Step> steps_;
  std::size_t next_ = 0;  // the step in flight, or the next to post
  bool posted_ = false;
  std::int64_t value_[2];
  std::int64_t outgoing_[2] = {};
  std::int64_t incoming_[2] = {};
  MPI_Request requests_[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
};

}  // namespace fsdp::detail
