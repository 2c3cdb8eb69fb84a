// BlockExchange: a small all_gather, or a reduce_scatter on 2 ranks, by direct messages, which
// moves its bytes while the collective's signature check runs instead of after it, and on 2 ranks
// is the check.
//
// The check costs one exchange of 16 bytes, and waiting for it before MPI_Iallgather added its
// latency to every collective: +25 % to an all_gather of 64 KiB on 2 ranks here (+8 % to a
// reduce_scatter). MPI's own collective cannot start before the check, since a collective whose
// ranks disagree on the sizes corrupts memory (Open MPI 4.1 even writes a too-long point-to-point
// message past the end of the receive buffer once it exceeds the eager limit). Direct messages
// can: each rank sends its block to every other rank at once (all_gather: its own block;
// reduce_scatter: the chunk the other rank keeps), with the call and the collective's number in
// the tag, and receives a block only after a probe has shown its tag and size, into its place
// when both are the ones expected and into scratch memory otherwise. A block of another call is
// then only a disagreement to report; nothing is written out of bounds. The data of an exchange
// whose ranks disagree are left in recv (the result is then unspecified), and every block sent is
// received, so that the group stays usable: settle() tells each rank which others sent to it,
// which every rank learns from the signatures that a failed check gathers.
//
// A reduce_scatter adds the other rank's chunk to its own here, on the host: on 2 ranks a + b is
// b + a to the bit, so the result is MPI's (the 16-bit types through mpi_types.hpp's one rule).
// With more ranks the order of the sum would be fsdp's, not MPI's: those go to MPI.
//
// A block's tag and size say the sender's call (collective, dtype, count, sum or average), so on
// 2 ranks the blocks are the signature check, and no message of its own is sent
// (CollectiveGuard::start_check, "folded"). With more ranks the check's messages run beside the
// blocks.
//
// Sending before receiving lets the other rank's receive find the block already announced: on 2
// ranks of the development machine a checked exchange of 64 KiB per rank took 12 to 14 us where
// a checked MPI_Iallgather took 18 to 28, and the check's share fell from +25 % to 0
// (docs/performance.md, "The collective signature check").
#pragma once

#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "collective_guard.hpp"
#include "communicator.hpp"

namespace fsdp::detail {

// The groups and sizes that go by exchange: an all_gather of at most kExchangeMaxGatherBytes per
// rank on 2 to kExchangeMaxRanks ranks (every rank sends its block to each other one: as many
// bytes as a ring moves, in one step), and a reduce_scatter (sum or avg) of at most
// kExchangeMaxReduceBytes per rank on 2 ranks in host memory. The exchange was faster than a
// checked MPI_Iallgather up to 4 MiB (docs/performance.md): a unit's gather of 12.6 and 50 MB on
// 2 ranks, whose large parameters' pieces are 0.5 to 8 MB, came at 0.70-0.98 of one raw
// MPI_Allgather with the limit at 1 MiB and at 0.97-1.45 with it at 4 MiB. Beyond that MPI's
// algorithms keep the large ones.
//
// Reduce_scatters were once limited to 64 KiB, because every MPI_Reduce_scatter_block of the
// process that came after reduce_scatters by exchange of 96 KiB or more took 3 to 30 times as
// long. That was glibc's malloc, not the exchange: Open MPI allocates a temporary buffer of the
// whole send size in each reduce_scatter, and whether glibc serves it by a fresh mmap (a page fault
// per page, every call) depends on the dynamic mmap and trim thresholds that the process's earlier
// frees set. With them fixed (GLIBC_TUNABLES=glibc.malloc.mmap_threshold=67108864:
// glibc.malloc.trim_threshold=268435456), the raw call took the same time with exchanges in the
// process as without, and the slow rank's minor page faults fell from 21,817 to 2,383
// (docs/performance.md, "The collective signature check").
inline constexpr int kExchangeMaxRanks = 4;
inline constexpr std::size_t kExchangeMaxGatherBytes = std::size_t{4} << 20;
inline constexpr std::size_t kExchangeMaxReduceBytes = std::size_t{1} << 20;

// Whether `call`, issued with valid arguments on a group of `ranks`, goes by BlockExchange;
// host_memory: the backend's buffers are host memory (MpiGroupState::packs_on_host, the same on
// every rank). A rule of the call and the group: each rank tells from another's signature whether
// that rank sent to it.
bool goes_by_exchange(const CollectiveCall& call, int ranks, bool host_memory);

// Which ranks sent this rank an exchange's blocks, from a finished check: those whose own call,
// as check.signatures holds it, goes by exchange. None when every rank's arguments were invalid
// alike (the check gathered no signatures) or the check was off.
std::vector<bool> exchange_senders(const SignatureCheck& check, int ranks, bool host_memory);

class BlockExchange {
 public:
  // Sends this rank's blocks of `call` to every other rank of comm, tagged with the collective's
  // number `sequence`, the call (collective, dtype, sum or avg) and whether this rank's check is
  // folded into the blocks.
  //  - all_gather: its block (count elements of dtype at send) to every rank, and to its own slot
  //    of recv (rank r's block at recv + r * its bytes): with memcpy when host_copy, else by a
  //    message to itself (device memory under CUDA-aware MPI);
  //  - reduce_scatter (2 ranks, host memory): chunk p of send (send + p * count elements) to rank
  //    p; once the other rank's chunk of this rank has arrived, recv is this rank's chunk plus it
  //    (the division of avg is the caller's, as after MPI's sum).
  BlockExchange(const Communicator& comm, std::int64_t sequence, const CollectiveCall& call,
                bool folded, const void* send, void* recv, bool host_copy);
  // Receives, into scratch memory, the blocks that `senders` sent for collective `sequence` and
  // nothing else: a rank whose collective did not go by exchange, after a failed check.
  static std::unique_ptr<BlockExchange> drain(const Communicator& comm, std::int64_t sequence,
                                              const std::vector<bool>& senders);
  BlockExchange(const BlockExchange&) = delete;
  BlockExchange& operator=(const BlockExchange&) = delete;

  // Advances; true once every block expected has arrived and every block sent was received.
  // Throws fsdp::Error for MPI's own errors.
  bool poll();
  // After a failed check: receives only from `senders` (one entry per rank), whose blocks
  // are received whatever their size; the ranks that sent nothing are no longer waited for.
  void settle(const std::vector<bool>& senders);
  // Whether every other rank's block has been matched, and then each rank's call as its block's
  // tag and size say (this rank's own as given).
  bool matched_all() const { return awaiting_ == 0; }
  const std::vector<CollectiveCall>& calls() const { return calls_; }
  // Whether every block matched came from a rank whose check is folded into its blocks (one that
  // announced the collective checks the ordinary way, and waits for this rank's words).
  bool all_folded() const { return all_folded_; }
  // A block of another call than this rank's arrived (the ranks disagree), or empty.
  const std::string& problem() const { return problem_; }
  bool done() const { return done_; }

  // Keeps an exchange that did not finish (a wait that timed out) until the process exits: MPI
  // may still write into its scratch memory.
  static void abandon(std::unique_ptr<BlockExchange> exchange);

 private:
  BlockExchange(const Communicator& comm, std::int64_t sequence);
  // Matches rank peer's block if it has arrived.
  void look_for(int peer);

  MPI_Comm comm_;
  int first_tag_;  // this collective's tags: first_tag_ + the call's bits
  int rank_ = 0;
  std::size_t bytes_ = 0;
  unsigned char* recv_ = nullptr;  // null: every block goes to scratch memory
  std::vector<bool> awaited_;      // ranks whose block has not been matched yet
  int awaiting_ = 0;               // how many
  std::vector<CollectiveCall> calls_;
  std::vector<MPI_Request> requests_;
  std::vector<std::vector<unsigned char>> scratch_;  // blocks not received into recv
  const unsigned char* own_chunk_ = nullptr;         // reduce_scatter: this rank's chunk of send
  std::string problem_;
  bool all_folded_ = true;
  bool done_ = false;
};

}  // namespace fsdp::detail
