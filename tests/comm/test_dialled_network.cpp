// A network you can dial in (CollectiveOptions::network): its timing model, checked by computed
// delays rather than wall-clock thresholds. A collective costs the latency plus the most bytes any
// rank sends by the ring algorithms over the bandwidth; a rank's collectives queue on its link in
// the order they were issued; and a group with the option delivers nothing earlier than that (a
// lower bound the backend guarantees by construction, which no load on the machine can break),
// with the same results as without it, for its splits too.
#include <boost/test/unit_test.hpp>
#include <chrono>
#include <cstdlib>
#include <vector>

#include "error_message.hpp"
#include "fsdp/comm/process_group.hpp"
#include "fsdp/comm/ring_traffic.hpp"
#include "pointer_collectives.hpp"

using namespace fsdp;

BOOST_AUTO_TEST_CASE(a_network_is_read_from_bandwidth_and_latency) {
  const DialledNetwork fast = parse_network("25e9,5e-6");
  BOOST_TEST(fast.on());
  BOOST_TEST(fast.bytes_per_s == 25e9);
  BOOST_TEST(fast.latency_s == 5e-6);
  BOOST_TEST(parse_network(fast.text()).bytes_per_s == fast.bytes_per_s);
  BOOST_TEST(parse_network("1e9,0").latency_s == 0.0);
  BOOST_TEST(!DialledNetwork{}.on());
  for (const char* bad :
       {"", "25e9", "fast,5e-6", "25e9,", "0,5e-6", "-1,5e-6", "25e9,-1", "25e9,5e-6,1", "inf,0"}) {
    BOOST_CHECK_EXCEPTION(parse_network(bad), Error,
                          fsdp::test::message_has("give BANDWIDTH,LATENCY"));
  }
}

BOOST_AUTO_TEST_CASE(a_collective_costs_its_latency_and_its_ring_bytes) {
  const DialledNetwork link{1e9, 1e-5};
  // An all-gather of 1000 fp32 elements per rank over 4 ranks: 3 chunks of 4000 bytes.
  const double bytes = 4.0 * static_cast<double>(ring::all_gather(1000, 4));
  BOOST_TEST(bytes == 12000.0);
  BOOST_TEST(link.seconds(bytes, 4) == 1e-5 + 12000.0 / 1e9);
  BOOST_TEST(link.seconds(bytes, 1) == 0.0);  // one rank: no link
  BOOST_TEST(DialledNetwork{}.seconds(bytes, 4) == 0.0);
}

BOOST_AUTO_TEST_CASE(collectives_queue_on_the_link_in_the_order_they_were_issued) {
  NetworkLink link;
  BOOST_TEST(link.deliver(10.0, 1.0) == 11.0);
  BOOST_TEST(link.deliver(10.5, 2.0) == 13.0);  // behind the first
  BOOST_TEST(link.deliver(10.6, 0.0) == 13.0);  // no sooner than the ones before it
  BOOST_TEST(link.deliver(20.0, 1.0) == 21.0);  // an idle link starts at once
}

BOOST_AUTO_TEST_CASE(a_dialled_group_delivers_no_earlier_than_its_link) {
  CollectiveOptions options;
  options.network = DialledNetwork{2e6, 1e-3};  // 2 MB/s and 1 ms: milliseconds per collective
  ProcessGroup group(MPI_COMM_WORLD, options);
  ProcessGroup split = group.split(0, group.rank());  // shares the link
  const int n = group.size();
  const std::size_t big = 2000, small = 100;
  std::vector<float> send_big(big, static_cast<float>(group.rank())), recv_big(big * n);
  std::vector<float> send_small(small, 1.0f), recv_small(small * n);
  const double big_s = options.network.seconds(4.0 * ring::all_gather(big, n), n);
  const double small_s = options.network.seconds(4.0 * ring::all_gather(small, n), n);
  const auto start = std::chrono::steady_clock::now();
  Work first = detail::PointerCollectives(group).all_gather_async(send_big.data(), recv_big.data(),
                                                                  big, DType::f32);
  Work second = detail::PointerCollectives(split).all_gather_async(
      send_small.data(), recv_small.data(), small, DType::f32);
  second.wait();
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  // The second crossed the link after the first, whichever group issued it.
  BOOST_TEST(elapsed >= big_s + small_s, elapsed << " s, the link needs " << big_s + small_s);
  first.wait();
  for (int r = 0; r < n; ++r) {
    BOOST_TEST(recv_big[static_cast<std::size_t>(r) * big] == static_cast<float>(r));
    BOOST_TEST(recv_small[static_cast<std::size_t>(r) * small] == 1.0f);
  }
  if (n == 1) {
    BOOST_TEST(big_s == 0.0);  // a group of one has no link to wait for
  }
}

BOOST_AUTO_TEST_CASE(a_network_that_is_not_understood_fails_the_group_on_every_rank) {
  setenv("FSDP_NETWORK", "fast", 1);
  const CollectiveOptions options = CollectiveOptions::from_environment();
  unsetenv("FSDP_NETWORK");
  BOOST_TEST(options.environment_error.find("FSDP_NETWORK: network 'fast' has no comma") !=
             std::string::npos);
  BOOST_TEST(!options.network.on());
  BOOST_CHECK_EXCEPTION(ProcessGroup(MPI_COMM_WORLD, options), Error,
                        fsdp::test::message_has("FSDP_NETWORK"));
  CollectiveOptions negative;
  negative.network.latency_s = -1;
  BOOST_CHECK_EXCEPTION(ProcessGroup(MPI_COMM_WORLD, negative), Error,
                        fsdp::test::message_has("CollectiveOptions::network"));
}
