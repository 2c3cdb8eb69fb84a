// Hybrid-sharded data parallel (HSDP): the ranks of a group arranged as R replicas x G shards.
// A model shards over its shard group and averages its gradient pieces over its replica group
// (the ranks holding the same pieces in the other shard groups).
#pragma once

#include "fsdp/comm/process_group.hpp"

namespace fsdp {

struct HybridGroups {
  ProcessGroup shard;      // G ranks that split the model between them
  ProcessGroup replicate;  // R ranks, one per shard group, holding the same pieces
};

// Collective over group. shard_group_size G > 0: groups of G consecutive ranks (rank / G), which
// must divide group.size(). G == 0: the ranks of each node (node_local()); every node must have
// as many. Every rank gets the same Error (kind usage) when the sizes do not fit, naming them.
HybridGroups make_hybrid_groups(ProcessGroup group, int shard_group_size);

}  // namespace fsdp
