// How a process group guards its collectives against ranks that disagree or never arrive.
#pragma once

#include <string>

#include "fsdp/comm/dialled_network.hpp"

namespace fsdp {

struct CollectiveOptions {
  // Before each collective, check that every rank calls the same collective with the same
  // element count, dtype, root and reduce op, and raise fsdp::Error on every rank if not, instead
  // of letting MPI corrupt memory or fail with its own error. Costs a minimum of two words (a
  // hash of the signature) over the ranks per collective, on point-to-point messages, which the
  // caller does not wait for with the MPI backend: the collective starts at the next test or wait
  // of the group, and a mismatch is raised there. The signatures themselves are exchanged only
  // when the hashes differ, to say how. On by default in every build; FSDP_CHECK_COLLECTIVES=0
  // turns it off. Every rank of a group must have the same setting (the group checks when it is
  // made).
  bool check_arguments = true;
  // Seconds a rank waits for a collective to complete before it raises fsdp::Error naming the
  // operation and the ranks that did not arrive. 0 waits forever. FSDP_COLLECTIVE_TIMEOUT_S.
  double timeout_s = 600.0;
  // Copy host Views through staging buffers too, as device Views are when the MPI library cannot
  // read device memory: makes the staging path run (and testable) on a machine without a GPU.
  // MPI groups only. FSDP_STAGE_HOST_BUFFERS.
  bool stage_host_buffers = false;
  // A network you can dial in (dialled_network.hpp): every collective of the group, and of the
  // groups split from it, which share its link, completes no earlier than this link would deliver
  // it. Off by default. MPI groups only. FSDP_NETWORK=BANDWIDTH,LATENCY (e.g. 25e9,5e-6).
  DialledNetwork network;

  // What from_environment could not understand, empty when all was well. A process group made
  // with these options raises it as fsdp::Error on every rank of the group, naming the rank: a
  // throw inside from_environment on the one rank whose environment differs would leave the
  // others waiting in the group's creation.
  std::string environment_error;

  // The defaults above, overridden by FSDP_CHECK_COLLECTIVES (0/1), FSDP_COLLECTIVE_TIMEOUT_S
  // (seconds), FSDP_STAGE_HOST_BUFFERS (0/1) and FSDP_NETWORK (BANDWIDTH,LATENCY). A malformed
  // value keeps the default and is described in environment_error (what was given and what is
  // accepted).
  static CollectiveOptions from_environment();
};

}  // namespace fsdp
