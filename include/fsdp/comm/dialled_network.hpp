// A network you can dial in: under CollectiveOptions::network, each collective of a process group
// completes no earlier than a link of the given bandwidth and latency would deliver it, while it
// really runs over MPI underneath. A test and benchmark device for communication overlap on one
// machine, where shared-memory MPI moves bytes too fast to show it; not a simulator of contention
// or topology.
#pragma once

#include <string>

namespace fsdp {

struct DialledNetwork {
  double bytes_per_s = 0.0;  // the link's bandwidth; 0: off (collectives complete when MPI does)
  double latency_s = 0.0;    // added once per collective
  bool on() const { return bytes_per_s > 0.0; }
  // What one collective takes on this link: latency_s plus the most bytes any rank sends in it by
  // the ring algorithms (fsdp/comm/ring_traffic.hpp) over bytes_per_s, as the solver's cost model
  // charges a collective; 0 in a group of one rank (no link).
  double seconds(double most_bytes_sent, int ranks) const;
  // "2.5e+10,5e-06": each number exactly (what parse_network reads back).
  std::string text() const;
};

// "BANDWIDTH,LATENCY": bytes per second (> 0) and seconds (>= 0), e.g. "25e9,5e-6" for a 200 Gb/s
// link with 5 us per collective. Throws fsdp::Error saying what was wrong and what is accepted.
DialledNetwork parse_network(const std::string& text);

// One rank's link: its collectives cross it one after the other, in the order they are issued, so
// collectives in flight together share its bandwidth. Times are seconds on the caller's clock.
class NetworkLink {
 public:
  // When a collective issued at `now` that takes `seconds` has been delivered: `seconds` after the
  // link is free of the ones issued before it.
  double deliver(double now, double seconds);

 private:
  double free_at_ = 0.0;
};

}  // namespace fsdp
