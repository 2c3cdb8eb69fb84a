// A barrier for ranks that have nothing to do while another rank computes alone (fsdp-train's
// check against unsharded training, fsdp-bench step's one-rank baseline). A blocking barrier
// busy-polls inside MPI; with more ranks than cores, the waiting ranks would take CPU time from
// the rank that computes and distort what it does or how long it takes.
#pragma once

#include <unistd.h>

#include "fsdp/comm/process_group.hpp"

namespace fsdp_apps {

// Returns when every rank of group has called it; polls once a millisecond and sleeps between.
inline void barrier_without_spinning(fsdp::ProcessGroup& group) {
  fsdp::Work arrived = group.barrier_async();
  while (!arrived.test()) {
    usleep(1000);
  }
}

}  // namespace fsdp_apps
