#include "gather_exchange.hpp"

#include <cstring>
#include <mutex>

#include "mpi_types.hpp"

namespace fsdp::detail {
namespace {

// A block's tag: the collective's number, whether the sender's check is folded into its blocks,
// and its dtype (the DType values fit 3 bits).
constexpr int kDtypeBits = 3;
constexpr int kFoldedBit = 1 << kDtypeBits;
constexpr int kCallBits = kDtypeBits + 1;

// The first tag of collective `sequence`'s blocks. A rank's probe for one collective's block can
// meet another collective's only from a rank at least this many collectives ahead, and no rank
// gets 2 * CollectiveGuard::kChecksInFlight ahead of another's unfinished check (each rank has
// fewer than kChecksInFlight unfinished, and a check finishes only once every rank has started
// it): twice that leaves room. 16384 tags, within the 32767 that MPI promises.
int first_tag(std::int64_t sequence) {
  return static_cast<int>(sequence % (4 * CollectiveGuard::kChecksInFlight)) << kCallBits;
}

}  // namespace

bool gathers_by_exchange(const CollectiveCall& call, int ranks) {
  return call.collective == Collective::all_gather && ranks >= 2 && ranks <= kExchangeMaxRanks &&
         call.count >= 0 &&
         static_cast<std::uint64_t>(call.count) <= kExchangeMaxBytes / size_of(call.dtype);
}

std::vector<bool> exchange_senders(const SignatureCheck& check, int ranks) {
  std::vector<bool> senders(static_cast<std::size_t>(ranks), false);
  if (!check.signatures.empty()) {
    for (int r = 0; r < ranks; ++r) {
      senders[static_cast<std::size_t>(r)] =
          !signature_complains(check, r) && gathers_by_exchange(signature_call(check, r), ranks);
    }
  }
  return senders;
}

GatherExchange::GatherExchange(const Communicator& comm, std::int64_t sequence)
    : comm_(comm.get()),
      first_tag_(first_tag(sequence)),
      rank_(comm.rank()),
      awaited_(static_cast<std::size_t>(comm.size()), false),
      calls_(static_cast<std::size_t>(comm.size())) {
  requests_.reserve(2 * awaited_.size());
}

GatherExchange::GatherExchange(const Communicator& comm, std::int64_t sequence,
                               const CollectiveCall& call, bool folded, const void* send,
                               void* recv, bool host_copy)
    : GatherExchange(comm, sequence) {
  bytes_ = static_cast<std::size_t>(call.count) * size_of(call.dtype);
  recv_ = static_cast<unsigned char*>(recv);
  calls_[static_cast<std::size_t>(rank_)] = call;
  const int tag = first_tag_ + (folded ? kFoldedBit : 0) + static_cast<int>(call.dtype);
  const int ranks = comm.size();
  const int n = static_cast<int>(bytes_);
  for (int step = 1; step < ranks; ++step) {
    const int peer = (rank_ + step) % ranks;
    awaited_[static_cast<std::size_t>(peer)] = true;
    ++awaiting_;
    requests_.push_back(MPI_REQUEST_NULL);
    mpi::check(MPI_Isend(send, n, MPI_BYTE, peer, tag, comm_, &requests_.back()),
               "MPI_Isend (all_gather exchange)", rank_);
  }
  unsigned char* mine = recv_ + static_cast<std::size_t>(rank_) * bytes_;
  if (host_copy) {
    if (mine != send && bytes_ > 0) {
      std::memcpy(mine, send, bytes_);
    }
    return;
  }
  requests_.push_back(MPI_REQUEST_NULL);
  mpi::check(MPI_Irecv(mine, n, MPI_BYTE, rank_, tag, comm_, &requests_.back()),
             "MPI_Irecv (all_gather exchange)", rank_);
  requests_.push_back(MPI_REQUEST_NULL);
  mpi::check(MPI_Isend(send, n, MPI_BYTE, rank_, tag, comm_, &requests_.back()),
             "MPI_Isend (all_gather exchange)", rank_);
}

std::unique_ptr<GatherExchange> GatherExchange::drain(const Communicator& comm,
                                                      std::int64_t sequence,
                                                      const std::vector<bool>& senders) {
  std::unique_ptr<GatherExchange> exchange(new GatherExchange(comm, sequence));
  for (int r = 0; r < comm.size(); ++r) {
    if (r != comm.rank() && senders[static_cast<std::size_t>(r)]) {
      exchange->awaited_[static_cast<std::size_t>(r)] = true;
      ++exchange->awaiting_;
    }
  }
  return exchange;
}

void GatherExchange::settle(const std::vector<bool>& senders) {
  recv_ = nullptr;  // what arrives now is received to be discarded, whatever its size
  for (std::size_t r = 0; r < awaited_.size(); ++r) {
    if (awaited_[r] && !senders[r]) {
      awaited_[r] = false;
      --awaiting_;
    }
  }
}

void GatherExchange::look_for(int peer) {
  // Any tag: a block of another dtype is this collective's too, and says the ranks disagree.
  // The earliest message from peer may be a later collective's, which waits for its own turn.
  int arrived = 0;
  MPI_Status status;
  mpi::check(MPI_Iprobe(peer, MPI_ANY_TAG, comm_, &arrived, &status),
             "MPI_Iprobe (all_gather exchange)", rank_);
  if (!arrived || status.MPI_TAG >> kCallBits != first_tag_ >> kCallBits) {
    return;
  }
  MPI_Message message = MPI_MESSAGE_NULL;
  mpi::check(MPI_Improbe(peer, status.MPI_TAG, comm_, &arrived, &message, &status),
             "MPI_Improbe (all_gather exchange)", rank_);
  int size = 0;
  mpi::check(MPI_Get_count(&status, MPI_BYTE, &size), "MPI_Get_count (all_gather exchange)", rank_);
  const auto bytes = static_cast<std::size_t>(size);
  const auto dtype = static_cast<DType>(status.MPI_TAG & (kFoldedBit - 1));
  if (!(status.MPI_TAG & kFoldedBit)) {
    all_folded_ = false;
  }
  CollectiveCall& call = calls_[static_cast<std::size_t>(peer)];
  call = {Collective::all_gather, dtype,
          static_cast<std::int64_t>(dtype <= DType::i64 ? bytes / size_of(dtype) : bytes)};
  unsigned char* to = nullptr;
  if (recv_ != nullptr && call == calls_[static_cast<std::size_t>(rank_)]) {
    to = recv_ + static_cast<std::size_t>(peer) * bytes_;
  } else {
    if (recv_ != nullptr && problem_.empty()) {
      problem_ = "all_gather on rank " + std::to_string(rank_) + ": rank " + std::to_string(peer) +
                 " sent a block of " + std::to_string(bytes) + " bytes of " +
                 (dtype <= DType::i64 ? name_of(dtype) : "an unknown dtype") +
                 " where this rank's is " + std::to_string(bytes_) + " bytes of " +
                 name_of(calls_[static_cast<std::size_t>(rank_)].dtype) +
                 "; every rank must call all_gather with the same count and dtype (with "
                 "FSDP_CHECK_COLLECTIVES=1 every rank says which rank called what)";
    }
    scratch_.emplace_back(bytes);
    to = scratch_.back().data();
  }
  requests_.push_back(MPI_REQUEST_NULL);
  mpi::check(MPI_Imrecv(to, size, MPI_BYTE, &message, &requests_.back()),
             "MPI_Imrecv (all_gather exchange)", rank_);
  awaited_[static_cast<std::size_t>(peer)] = false;
  --awaiting_;
}

bool GatherExchange::poll() {
  if (done_) {
    return true;
  }
  for (std::size_t r = 0; r < awaited_.size() && awaiting_ > 0; ++r) {
    if (awaited_[r]) {
      look_for(static_cast<int>(r));
    }
  }
  if (awaiting_ > 0) {
    return false;
  }
  int complete = 0;
  mpi::check(MPI_Testall(static_cast<int>(requests_.size()), requests_.data(), &complete,
                         MPI_STATUSES_IGNORE),
             "MPI_Testall (all_gather exchange)", rank_);
  done_ = complete != 0;
  return done_;
}

void GatherExchange::abandon(std::unique_ptr<GatherExchange> exchange) {
  if (exchange && !exchange->done_) {
    static std::mutex mutex;
    static std::vector<std::unique_ptr<GatherExchange>> abandoned;
    const std::lock_guard<std::mutex> lock(mutex);
    abandoned.push_back(std::move(exchange));
  }
}

}  // namespace fsdp::detail
