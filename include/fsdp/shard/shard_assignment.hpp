// ShardAssignment: one contiguous piece of a flattened parameter and the rank that holds it.
#pragma once

#include <cstdint>

namespace fsdp {

struct ShardAssignment {
  int owner_rank = 0;
  int shard_index = 0;     // the piece's position among the parameter's pieces
  std::int64_t start = 0;  // first element of the piece in the flattened parameter
  std::int64_t size = 0;   // elements; 0 for the empty trailing pieces of a short parameter

  std::int64_t end() const { return start + size; }
  bool operator==(const ShardAssignment& o) const {
    return owner_rank == o.owner_rank && shard_index == o.shard_index && start == o.start &&
           size == o.size;
  }
  bool operator!=(const ShardAssignment& o) const { return !(*this == o); }
};

}  // namespace fsdp
