// The global L2 norm of the gradients across all pieces and ranks, and clipping by it.
#pragma once

#include "fsdp/unit/sharded_model.hpp"

namespace fsdp {

// sqrt of the sum of squares of every gradient element of the model, each counted once: the
// pieces of sharded parameters and whole parameters on the ranks that hold them, replicated
// parameters once. Padding is never counted. Collective (one all_reduce of one double).
template <class T>
double grad_norm(ShardedModel<T>& model);

// Scales every gradient piece by max_norm / (norm + 1e-6) when the global norm exceeds
// max_norm (as torch.nn.utils.clip_grad_norm_). Returns the norm before clipping. Collective.
template <class T>
double clip_grad_norm(ShardedModel<T>& model, double max_norm);

}  // namespace fsdp
