#include "pairwise_minimum.hpp"

#include <algorithm>

#include "mpi_types.hpp"

namespace fsdp::detail {

PairwiseMinimum::PairwiseMinimum(MPI_Comm comm, int tag, const std::int64_t (&words)[2])
    : comm_(comm), tag_(tag), value_{words[0], words[1]} {
  int size = 0;
  mpi::check(MPI_Comm_rank(comm, &rank_), "MPI_Comm_rank (signature check)");
  mpi::check(MPI_Comm_size(comm, &size), "MPI_Comm_size (signature check)", rank_);
  int power = 1;
  while (power * 2 <= size) {
    power *= 2;
  }
  const int extra = size - power;  // ranks 0 .. 2 * extra - 1 pair up first
  int position = -1;               // among the power ranks that exchange; -1 for those that wait
  if (rank_ < 2 * extra) {
    if (rank_ % 2 == 0) {
      steps_.push_back({rank_ + 1, true, false, false});
    } else {
      steps_.push_back({rank_ - 1, false, true, false});
      position = rank_ / 2;
    }
  } else {
    position = rank_ - extra;
  }
  if (position >= 0) {
    for (int mask = 1; mask < power; mask *= 2) {
      const int partner = position ^ mask;
      steps_.push_back({partner < extra ? partner * 2 + 1 : partner + extra, true, true, false});
    }
  }
  if (rank_ < 2 * extra) {
    steps_.push_back(rank_ % 2 == 0 ? Step{rank_ + 1, false, true, true}
                                    : Step{rank_ - 1, true, false, false});
  }
  // Only the first step goes out now. A later step goes out when a poll finds the one before it
  // done, which keeps the messages of minimums that share a tag in their order (see the header).
  if (!steps_.empty()) {
    post();
  }
}

void PairwiseMinimum::post() {
  const Step& step = steps_[next_];
  if (step.receives) {
    mpi::check(MPI_Irecv(incoming_, 2, MPI_INT64_T, step.peer, tag_, comm_, &requests_[0]),
               "MPI_Irecv (signature check)", rank_);
  }
  if (step.sends) {
    std::copy(value_, value_ + 2, outgoing_);
    mpi::check(MPI_Isend(outgoing_, 2, MPI_INT64_T, step.peer, tag_, comm_, &requests_[1]),
               "MPI_Isend (signature check)", rank_);
  }
  posted_ = true;
}

bool PairwiseMinimum::poll() {
  while (next_ < steps_.size()) {
    if (!posted_) {
      post();
    }
    int done = 0;
    mpi::check(MPI_Testall(2, requests_, &done, MPI_STATUSES_IGNORE),
               "MPI_Testall (signature check)", rank_);
    if (!done) {
      return false;
    }
    const Step& step = steps_[next_];
    if (step.receives) {
      for (int i = 0; i < 2; ++i) {
        value_[i] = step.result ? incoming_[i] : std::min(value_[i], incoming_[i]);
      }
    }
    posted_ = false;
    ++next_;
  }
  return true;
}

}  // namespace fsdp::detail
