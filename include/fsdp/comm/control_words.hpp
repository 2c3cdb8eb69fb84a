// Small control messages (flags, lengths, hashes, text) between the ranks of a ProcessGroup, on
// any backend: host words go as host Views, which an NCCL group moves through device memory.
// Agreement checks, on_root and raise_on_every_rank run on the same groups as the model, so they
// must travel where it does. Each goes through the group's collectives, so the signature check
// and the timeout cover it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "fsdp/comm/process_group.hpp"

namespace fsdp {

// Collective over group: words[0..count) reduced element-wise with op, in place, on every rank.
void all_reduce_words(ProcessGroup& group, std::int64_t* words, std::size_t count, ReduceOp op);
// Collective over group: root's words[0..count) replace the others'.
void broadcast_words(ProcessGroup& group, std::int64_t* words, std::size_t count, int root);
// Collective over group: sums[0..count) added element-wise modulo 2^64, in place, on every rank
// (checksums that must wrap, which a signed sum does not promise). Any number of ranks below 2^31.
void all_reduce_wrapping_sums(ProcessGroup& group, std::uint64_t* sums, std::size_t count);

}  // namespace fsdp
