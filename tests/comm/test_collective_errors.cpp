// Ranks that disagree on a collective's arguments get fsdp::Error on every rank, and the group
// stays usable because no rank entered the mismatched collective. Bad local arguments are clear
// errors.
#include <boost/test/unit_test.hpp>
#include <string>
#include <vector>

#include "error_message.hpp"
#include "fsdp/comm/process_group.hpp"

using namespace fsdp;
using fsdp::test::message_has;

namespace {

ProcessGroup checked_world() {
  CollectiveOptions options;
  options.check_arguments = true;
  options.timeout_s = 60;
  return ProcessGroup(MPI_COMM_WORLD, options);
}

}  // namespace

BOOST_AUTO_TEST_CASE(count_mismatch_fails_on_every_rank) {
  ProcessGroup group = checked_world();
  if (group.size() < 2) {
    return;  // nothing can disagree with itself
  }
  const std::size_t count = group.rank() == 1 ? 5 : 4;
  std::vector<float> send(count, 1.0f), recv(count * group.size());
  BOOST_CHECK_EXCEPTION(group.all_gather(send.data(), recv.data(), count), Error,
                        message_has("rank 1 called all_gather(count=5, dtype=fp32)"));
  // Nobody entered the all_gather, so the group is still in step.
  int value = 1;
  group.all_reduce(&value, 1);
  BOOST_TEST(value == group.size());
}

BOOST_AUTO_TEST_CASE(dtype_and_operation_mismatch) {
  ProcessGroup group = checked_world();
  if (group.size() < 2) {
    return;
  }
  std::vector<double> buffer(8, 1.0);
  if (group.rank() == 0) {
    BOOST_CHECK_EXCEPTION(
        group.all_reduce(buffer.data(), buffer.data(), 8, DType::f32, ReduceOp::sum), Error,
        message_has("ranks disagree on collective"));
  } else {
    BOOST_CHECK_EXCEPTION(
        group.all_reduce(buffer.data(), buffer.data(), 8, DType::f64, ReduceOp::sum), Error,
        message_has("rank 0 called all_reduce(count=8, dtype=fp32"));
  }
  // A different collective altogether.
  if (group.rank() == 0) {
    BOOST_CHECK_EXCEPTION(group.broadcast(buffer.data(), 8, 0), Error,
                          message_has("called broadcast"));
  } else {
    BOOST_CHECK_EXCEPTION(group.barrier(), Error, message_has("rank 0 called broadcast"));
  }
  BOOST_CHECK_NO_THROW(group.barrier());
}

BOOST_AUTO_TEST_CASE(a_bad_argument_on_one_rank_fails_everywhere) {
  ProcessGroup group = checked_world();
  std::vector<float> data(4, 0.0f);
  const int root = group.rank() == group.size() - 1 ? group.size() : 0;  // last rank: out of range
  if (group.rank() == group.size() - 1) {
    BOOST_CHECK_EXCEPTION(group.broadcast(data.data(), 4, root), Error,
                          message_has("is not a rank of this group"));
  } else {
    BOOST_CHECK_EXCEPTION(group.broadcast(data.data(), 4, root), Error,
                          message_has("passed invalid arguments"));
  }
  // all_gather_v whose counts do not match the send count on one rank.
  std::vector<std::size_t> counts(group.size(), 2);
  const std::size_t send_count = group.rank() == 0 ? 3 : 2;
  std::vector<float> send(send_count), recv(2 * group.size() + 1);
  BOOST_CHECK_THROW(group.all_gather_v(send.data(), send_count, recv.data(), counts), Error);
  BOOST_CHECK_NO_THROW(group.barrier());
}

BOOST_AUTO_TEST_CASE(avg_of_integers_is_rejected) {
  ProcessGroup group = checked_world();
  std::vector<std::int32_t> data(4, 1);
  BOOST_CHECK_EXCEPTION(group.all_reduce(data.data(), data.size(), ReduceOp::avg), Error,
                        message_has("ReduceOp::avg needs a floating dtype, got int32"));
}

BOOST_AUTO_TEST_CASE(view_sizes_are_checked) {
  ProcessGroup group = checked_world();
  Kokkos::View<float*, Kokkos::HostSpace> send("params", 4);
  Kokkos::View<float*, Kokkos::HostSpace> recv("gathered", 4 * group.size() + 1);
  BOOST_CHECK_EXCEPTION(group.all_gather(send, recv), Error,
                        message_has("recv View 'gathered' has"));
}

BOOST_AUTO_TEST_CASE(environment_options_are_validated) {
  setenv("FSDP_COLLECTIVE_TIMEOUT_S", "soon", 1);
  BOOST_CHECK_EXCEPTION(CollectiveOptions::from_environment(), Error,
                        message_has("FSDP_COLLECTIVE_TIMEOUT_S='soon'"));
  setenv("FSDP_COLLECTIVE_TIMEOUT_S", "2.5", 1);
  setenv("FSDP_CHECK_COLLECTIVES", "1", 1);
  CollectiveOptions options = CollectiveOptions::from_environment();
  BOOST_TEST(options.timeout_s == 2.5);
  BOOST_TEST(options.check_arguments);
  setenv("FSDP_CHECK_COLLECTIVES", "maybe", 1);
  BOOST_CHECK_THROW(CollectiveOptions::from_environment(), Error);
  unsetenv("FSDP_CHECK_COLLECTIVES");
  setenv("FSDP_COLLECTIVE_TIMEOUT_S", "120", 1);
}
