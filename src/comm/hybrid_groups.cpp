#include "fsdp/comm/hybrid_groups.hpp"

#include <string>

#include "fsdp/core/error.hpp"

namespace fsdp {

HybridGroups make_hybrid_groups(ProcessGroup group, int shard_group_size) {
  const int n = group.size();
  // Every rank passed the same size, or the splits below would not pair up: the guard's argument
  // check cannot see this, so compare first.
  int sizes[2] = {shard_group_size, -shard_group_size};
  group.all_reduce(Kokkos::DefaultHostExecutionSpace(), host_view(sizes, 2), ReduceOp::max);
  require(sizes[0] == -sizes[1], "the ranks were given different shard group sizes (from " +
                                     std::to_string(-sizes[1]) + " to " + std::to_string(sizes[0]) +
                                     "); give every rank the same");
  require(shard_group_size >= 0, "shard group size " + std::to_string(shard_group_size) +
                                     " is negative; give a size that divides the " +
                                     std::to_string(n) + " ranks, or 0 for the ranks of each node");
  if (shard_group_size > 0) {
    require(n % shard_group_size == 0,
            "shard group size " + std::to_string(shard_group_size) + " does not divide the " +
                std::to_string(n) + " ranks; give a divisor of " + std::to_string(n) +
                " (shard groups of G ranks, " + std::to_string(n) + " / G replicas)");
    const int rank = group.rank();
    return HybridGroups{group.split(rank / shard_group_size, rank),
                        group.split(rank % shard_group_size, rank)};
  }
  ProcessGroup shard = group.node_local();
  int counts[2] = {shard.size(), -shard.size()};
  group.all_reduce(Kokkos::DefaultHostExecutionSpace(), host_view(counts, 2), ReduceOp::max);
  require(counts[0] == -counts[1],
          "the nodes hold different numbers of ranks (from " + std::to_string(-counts[1]) + " to " +
              std::to_string(counts[0]) +
              "), so node-local shard groups would differ in size; give a shard group size");
  ProcessGroup replicate = group.split(shard.rank(), group.rank());
  return HybridGroups{std::move(shard), std::move(replicate)};
}

}  // namespace fsdp
