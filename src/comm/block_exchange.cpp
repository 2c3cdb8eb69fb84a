#include "block_exchange.hpp"

#include <cstring>
#include <mutex>

#include "mpi_types.hpp"

namespace fsdp::detail {
namespace {

// A block's tag: the collective's number, then the sender's call in kCallBits bits: its dtype (the
// DType values fit 3 bits), whether it is a reduce_scatter (else an all_gather) and an average
// (else a sum), and whether the sender's check is folded into its blocks.
constexpr int kDtypeBits = 3;
constexpr int kReduceScatterBit = 1 << kDtypeBits;
constexpr int kAverageBit = 1 << (kDtypeBits + 1);
constexpr int kFoldedBit = 1 << (kDtypeBits + 2);
constexpr int kCallBits = kDtypeBits + 3;

int call_bits(const CollectiveCall& call) {
  return static_cast<int>(call.dtype) +
         (call.collective == Collective::reduce_scatter ? kReduceScatterBit : 0) +
         (call.reduce == static_cast<std::int64_t>(ReduceOp::avg) ? kAverageBit : 0);
}

// The first tag of collective `sequence`'s blocks. A rank's probe for one collective's block can
// meet another collective's only from a rank at least this many collectives ahead, and no rank
// gets 2 * CollectiveGuard::kChecksInFlight ahead of another's unfinished check (each rank has
// fewer than kChecksInFlight unfinished, and a check finishes only once every rank has started
// it). 512 numbers of 64 tags: tags 0 to 32767, the range that MPI promises.
int first_tag(std::int64_t sequence) {
  static_assert((2 * CollectiveGuard::kChecksInFlight << kCallBits) - 1 <= 32767);
  return static_cast<int>(sequence % (2 * CollectiveGuard::kChecksInFlight)) << kCallBits;
}

}  // namespace

bool goes_by_exchange(const CollectiveCall& call, int ranks, bool host_memory) {
  const auto at_most = [&](std::size_t bytes) {
    return call.count >= 0 && static_cast<std::uint64_t>(call.count) <= bytes / size_of(call.dtype);
  };
  if (call.collective == Collective::all_gather) {
    return at_most(kExchangeMaxGatherBytes) && ranks >= 2 && ranks <= kExchangeMaxRanks;
  }
  const bool sum = call.reduce == static_cast<std::int64_t>(ReduceOp::sum) ||
                   call.reduce == static_cast<std::int64_t>(ReduceOp::avg);
  return call.collective == Collective::reduce_scatter && at_most(kExchangeMaxReduceBytes) && sum &&
         ranks == 2 && host_memory;
}

std::vector<bool> exchange_senders(const SignatureCheck& check, int ranks, bool host_memory) {
  std::vector<bool> senders(static_cast<std::size_t>(ranks), false);
  if (!check.signatures.empty()) {
    for (int r = 0; r < ranks; ++r) {
      senders[static_cast<std::size_t>(r)] =
          !signature_complains(check, r) &&
          goes_by_exchange(signature_call(check, r), ranks, host_memory);
    }
  }
  return senders;
}

BlockExchange::BlockExchange(const Communicator& comm, std::int64_t sequence)
    : comm_(comm.get()),
      first_tag_(first_tag(sequence)),
      rank_(comm.rank()),
      awaited_(static_cast<std::size_t>(comm.size()), false),
      calls_(static_cast<std::size_t>(comm.size())) {
  requests_.reserve(2 * awaited_.size());
}

BlockExchange::BlockExchange(const Communicator& comm, std::int64_t sequence,
                             const CollectiveCall& call, bool folded, const void* send, void* recv,
                             bool host_copy)
    : BlockExchange(comm, sequence) {
  bytes_ = static_cast<std::size_t>(call.count) * size_of(call.dtype);
  recv_ = static_cast<unsigned char*>(recv);
  calls_[static_cast<std::size_t>(rank_)] = call;
  const int tag = first_tag_ + (folded ? kFoldedBit : 0) + call_bits(call);
  const int ranks = comm.size();
  const int n = static_cast<int>(bytes_);
  const bool reduces = call.collective == Collective::reduce_scatter;
  const auto* chunks = static_cast<const unsigned char*>(send);
  for (int step = 1; step < ranks; ++step) {
    const int peer = (rank_ + step) % ranks;
    awaited_[static_cast<std::size_t>(peer)] = true;
    ++awaiting_;
    requests_.push_back(MPI_REQUEST_NULL);
    const void* block = reduces ? chunks + static_cast<std::size_t>(peer) * bytes_ : send;
    mpi::check(MPI_Isend(block, n, MPI_BYTE, peer, tag, comm_, &requests_.back()),
               "MPI_Isend (block exchange)", rank_);
  }
  if (reduces) {
    own_chunk_ = chunks + static_cast<std::size_t>(rank_) * bytes_;
    return;
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
             "MPI_Irecv (block exchange)", rank_);
  requests_.push_back(MPI_REQUEST_NULL);
  mpi::check(MPI_Isend(send, n, MPI_BYTE, rank_, tag, comm_, &requests_.back()),
             "MPI_Isend (block exchange)", rank_);
}

std::unique_ptr<BlockExchange> BlockExchange::drain(const Communicator& comm, std::int64_t sequence,
                                                    const std::vector<bool>& senders) {
  std::unique_ptr<BlockExchange> exchange(new BlockExchange(comm, sequence));
  for (int r = 0; r < comm.size(); ++r) {
    if (r != comm.rank() && senders[static_cast<std::size_t>(r)]) {
      exchange->awaited_[static_cast<std::size_t>(r)] = true;
      ++exchange->awaiting_;
    }
  }
  return exchange;
}

void BlockExchange::settle(const std::vector<bool>& senders) {
  recv_ = nullptr;  // what arrives now is received to be discarded, whatever its size
  for (std::size_t r = 0; r < awaited_.size(); ++r) {
    if (awaited_[r] && !senders[r]) {
      awaited_[r] = false;
      --awaiting_;
    }
  }
}

namespace {

// "a reduce_scatter (avg) block of 20 bytes of fp32": what a block says of its sender's call.
std::string block_text(const CollectiveCall& call, std::size_t bytes) {
  const bool known = call.dtype <= DType::i64;
  std::string text = std::string("an ") + name_of(call.collective);
  if (call.collective == Collective::reduce_scatter) {
    text = std::string("a ") + name_of(call.collective) + " (" +
           name_of(static_cast<ReduceOp>(call.reduce)) + ")";
  }
  return text + " block of " + std::to_string(bytes) + " bytes of " +
         (known ? name_of(call.dtype) : "an unknown dtype");
}

}  // namespace

void BlockExchange::look_for(int peer) {
  // Any tag: a block of another call is this collective's too, and says the ranks disagree.
  // The earliest message from peer may be a later collective's, which waits for its own turn.
  int arrived = 0;
  MPI_Status status;
  mpi::check(MPI_Iprobe(peer, MPI_ANY_TAG, comm_, &arrived, &status), "MPI_Iprobe (block exchange)",
             rank_);
  if (!arrived || status.MPI_TAG >> kCallBits != first_tag_ >> kCallBits) {
    return;
  }
  MPI_Message message = MPI_MESSAGE_NULL;
  mpi::check(MPI_Improbe(peer, status.MPI_TAG, comm_, &arrived, &message, &status),
             "MPI_Improbe (block exchange)", rank_);
  int size = 0;
  mpi::check(MPI_Get_count(&status, MPI_BYTE, &size), "MPI_Get_count (block exchange)", rank_);
  const auto bytes = static_cast<std::size_t>(size);
  const int bits = status.MPI_TAG & ((1 << kCallBits) - 1);
  if (!(bits & kFoldedBit)) {
    all_folded_ = false;
  }
  // The sender's call, as the backend builds it for ProcessGroup (root -1; reduce -1 for a gather).
  CollectiveCall& call = calls_[static_cast<std::size_t>(peer)];
  call = CollectiveCall{};
  call.dtype = static_cast<DType>(bits & ((1 << kDtypeBits) - 1));
  call.count =
      static_cast<std::int64_t>(call.dtype <= DType::i64 ? bytes / size_of(call.dtype) : bytes);
  if (bits & kReduceScatterBit) {
    call.collective = Collective::reduce_scatter;
    call.reduce = static_cast<std::int64_t>(bits & kAverageBit ? ReduceOp::avg : ReduceOp::sum);
  } else {
    call.collective = Collective::all_gather;
  }
  const CollectiveCall& mine = calls_[static_cast<std::size_t>(rank_)];
  unsigned char* to = nullptr;
  if (recv_ != nullptr && call == mine && bytes == bytes_) {
    // reduce_scatter: the other rank's chunk lands in recv, and this rank's is added to it (a
    // buffer of its own per collective made every MPI call of the process slower: Open MPI's
    // registration cache is invalidated at each munmap of glibc's large allocations).
    to = own_chunk_ != nullptr ? recv_ : recv_ + static_cast<std::size_t>(peer) * bytes_;
  } else {
    if (recv_ != nullptr && problem_.empty()) {
      problem_ = std::string(name_of(mine.collective)) + " on rank " + std::to_string(rank_) +
                 ": rank " + std::to_string(peer) + " sent " + block_text(call, bytes) +
                 " where this rank's is " + block_text(mine, bytes_) +
                 "; every rank must call the same collective with the same count, dtype and op "
                 "(with FSDP_CHECK_COLLECTIVES=1 every rank says which rank called what)";
    }
    scratch_.emplace_back(bytes);
    to = scratch_.back().data();
  }
  requests_.push_back(MPI_REQUEST_NULL);
  mpi::check(MPI_Imrecv(to, size, MPI_BYTE, &message, &requests_.back()),
             "MPI_Imrecv (block exchange)", rank_);
  awaited_[static_cast<std::size_t>(peer)] = false;
  --awaiting_;
}

bool BlockExchange::poll() {
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
             "MPI_Testall (block exchange)", rank_);
  if (complete && own_chunk_ != nullptr && recv_ != nullptr && problem_.empty()) {
    // reduce_scatter: this rank's chunk plus the other rank's, as MPI's sum of two adds them.
    mpi::sum_into(own_chunk_, recv_,
                  bytes_ / size_of(calls_[static_cast<std::size_t>(rank_)].dtype),
                  calls_[static_cast<std::size_t>(rank_)].dtype);
  }
  done_ = complete != 0;
  return done_;
}

void BlockExchange::abandon(std::unique_ptr<BlockExchange> exchange) {
  if (exchange && !exchange->done_) {
    static std::mutex mutex;
    static std::vector<std::unique_ptr<BlockExchange>> abandoned;
    const std::lock_guard<std::mutex> lock(mutex);
    abandoned.push_back(std::move(exchange));
  }
}

}  // namespace fsdp::detail
