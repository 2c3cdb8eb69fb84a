// Checking ahead (ProcessGroup::expect_*): a collective announced before it is issued has its
// signature check answered by then, and starts when it is issued; one issued otherwise than
// announced fails on the rank that issued it.
#include <boost/test/unit_test.hpp>
#include <chrono>
#include <vector>

#include "error_message.hpp"
#include "fsdp/comm/process_group.hpp"
#include "pointer_collectives.hpp"
#include "token_within.hpp"

using namespace fsdp;
using fsdp::test::message_has;
using fsdp::test::token_within;

namespace {

ProcessGroup checked_world(double timeout_s = 60) {
  CollectiveOptions options;
  options.check_arguments = true;
  options.timeout_s = timeout_s;
  return ProcessGroup(MPI_COMM_WORLD, options);
}

}  // namespace

BOOST_AUTO_TEST_CASE(a_group_that_checks_checks_ahead) {
  BOOST_TEST(checked_world().checks_ahead());
  CollectiveOptions unchecked;
  unchecked.check_arguments = false;
  ProcessGroup group(MPI_COMM_WORLD, unchecked);
  BOOST_TEST(!group.checks_ahead());
  // Nothing to check: an announcement is ignored, and so is a collective that differs from it.
  group.expect_all_gather(4, DType::f32);
  int value = 1;
  detail::PointerCollectives(group).all_reduce(&value, 1);
  BOOST_TEST(value == group.size());
}

// Ranks 0 and 1 announce an all_gather and meet at a barrier, so each has the other's check
// message. Rank 0 issues it and then waits for a token from rank 1 without polling the group
// again; rank 1 sends the token only once its own all_gather is complete, which needs rank 0's
// part of it. Only a collective that started when rank 0 issued it gets there: unannounced, its
// check would be answered at rank 0's next poll, which never comes (rank 1 times out).
BOOST_AUTO_TEST_CASE(an_announced_collective_starts_when_it_is_issued) {
  ProcessGroup world = checked_world(20);
  // Two ranks: the check is one exchange, whose message the barrier makes sure has arrived.
  ProcessGroup group = world.split(world.rank() < 2 ? 0 : 1, world.rank());
  if (world.size() < 2 || world.rank() >= 2) {
    return;
  }
  const int rank = group.rank();
  std::vector<int> send(3, rank), recv(6, -1);
  group.expect_all_gather(send.size(), DType::i32);
  BOOST_REQUIRE(MPI_Barrier(group.mpi_comm()) == MPI_SUCCESS);
  const int kTokenTag = 4712;
  int token = 0;
  if (rank == 0) {
    Work gather = detail::PointerCollectives(group).all_gather_async(send.data(), recv.data(),
                                                                     send.size(), DType::i32);
    BOOST_REQUIRE_MESSAGE(
        token_within(token, 1, kTokenTag, group.mpi_comm(), std::chrono::seconds(30)),
        "rank 1's all_gather did not complete while rank 0 waited");
    gather.wait();
  } else {
    detail::PointerCollectives(group).all_gather(send.data(), recv.data(), send.size(), DType::i32);
    token = 1;
    BOOST_REQUIRE(MPI_Send(&token, 1, MPI_INT, 0, kTokenTag, group.mpi_comm()) == MPI_SUCCESS);
  }
  BOOST_TEST(recv == std::vector<int>({0, 0, 0, 1, 1, 1}));
}

BOOST_AUTO_TEST_CASE(announced_collectives_move_the_right_bytes) {
  ProcessGroup group = checked_world();
  const int n = group.size();
  std::vector<float> send(5, static_cast<float>(group.rank())), recv(5 * n, -1.0f);
  std::vector<double> data(7, group.rank() == n - 1 ? 2.5 : 0.0);
  group.expect_all_gather(send.size(), DType::f32);
  group.expect_broadcast(data.size(), DType::f64, n - 1);
  Work gather = detail::PointerCollectives(group).all_gather_async(send.data(), recv.data(),
                                                                   send.size(), DType::f32);
  Work broadcast = detail::PointerCollectives(group).broadcast_async(data.data(), data.size(),
                                                                     DType::f64, n - 1);
  // Not announced: checked as it is issued, after the announced ones.
  int value = 1;
  detail::PointerCollectives(group).all_reduce(&value, 1);
  gather.wait();
  broadcast.wait();
  BOOST_TEST(value == n);
  for (int r = 0; r < n; ++r) {
    BOOST_TEST(recv[5 * static_cast<std::size_t>(r)] == static_cast<float>(r));
  }
  BOOST_TEST(data == std::vector<double>(7, 2.5));
}

// On 2 ranks a small all_gather that is not announced has no check message of its own: its
// blocks carry its signature (block_exchange.hpp). A rank that announced it checks the ordinary
// way, and the other joins that check when its words arrive; both gather, in either order.
BOOST_AUTO_TEST_CASE(an_all_gather_announced_on_one_rank_only) {
  ProcessGroup world = checked_world(20);
  ProcessGroup group = world.split(world.rank() < 2 ? 0 : 1, world.rank());
  if (world.size() < 2 || world.rank() >= 2) {
    return;
  }
  const int rank = group.rank();
  for (int announcing = 0; announcing < 2; ++announcing) {
    std::vector<int> send(3, rank + 10 * announcing), recv(6, -1);
    if (rank == announcing) {
      group.expect_all_gather(send.size(), DType::i32);
    }
    detail::PointerCollectives(group).all_gather(send.data(), recv.data(), send.size(), DType::i32);
    BOOST_TEST(recv[0] == 10 * announcing);
    BOOST_TEST(recv[3] == 1 + 10 * announcing);
  }
}

// The other ranks may already be in the announced collective: the rank cannot take part in it
// or take the announcement back, so it raises, and nothing more goes over the group there.
BOOST_AUTO_TEST_CASE(a_collective_issued_otherwise_than_announced_fails_on_its_rank) {
  ProcessGroup world = checked_world();
  ProcessGroup group = world.split(0, world.rank());
  std::vector<float> send(4, 1.0f), recv(4 * static_cast<std::size_t>(group.size()));
  group.expect_all_gather(4, DType::f32);
  BOOST_CHECK_EXCEPTION(detail::PointerCollectives(group).broadcast(send.data(), 4, 0), Error,
                        message_has("broadcast(count=4, dtype=fp32, root=0) issued where "
                                    "all_gather(count=4, dtype=fp32) was announced"));
  BOOST_CHECK_EXCEPTION(detail::PointerCollectives(group).all_gather(send.data(), recv.data(), 4),
                        Error, message_has("unusable"));
  BOOST_CHECK_EXCEPTION(group.expect_all_gather(4, DType::f32), Error, message_has("unusable"));
  // The same count with another dtype is another collective too.
  ProcessGroup other = world.split(0, world.rank());
  other.expect_all_gather(4, DType::f64);
  BOOST_CHECK_EXCEPTION(detail::PointerCollectives(other).all_gather(send.data(), recv.data(), 4),
                        Error,
                        message_has("all_gather(count=4, dtype=fp32) issued where "
                                    "all_gather(count=4, dtype=fp64) was announced"));
  // So is another count, or a broadcast from another root.
  ProcessGroup shorter = world.split(0, world.rank());
  shorter.expect_all_gather(4, DType::f32);
  BOOST_CHECK_EXCEPTION(detail::PointerCollectives(shorter).all_gather(send.data(), recv.data(), 3),
                        Error,
                        message_has("all_gather(count=3, dtype=fp32) issued where "
                                    "all_gather(count=4, dtype=fp32) was announced"));
  if (world.size() > 1) {
    ProcessGroup rooted = world.split(0, world.rank());
    rooted.expect_broadcast(4, DType::f32, 0);
    BOOST_CHECK_EXCEPTION(detail::PointerCollectives(rooted).broadcast(send.data(), 4, 1), Error,
                          message_has("broadcast(count=4, dtype=fp32, root=1) issued where "
                                      "broadcast(count=4, dtype=fp32, root=0) was announced"));
  }
  BOOST_CHECK_EXCEPTION(world.expect_broadcast(4, DType::f32, world.size()), Error,
                        message_has("is not a rank of this group"));
}

BOOST_AUTO_TEST_CASE(ranks_that_announce_different_collectives_fail_together) {
  ProcessGroup group = checked_world();
  if (group.size() < 2) {
    return;
  }
  const std::size_t count = group.rank() == 1 ? 5 : 4;
  std::vector<float> send(count, 1.0f), recv(count * group.size());
  group.expect_all_gather(count, DType::f32);
  BOOST_CHECK_EXCEPTION(
      detail::PointerCollectives(group).all_gather(send.data(), recv.data(), count), Error,
      message_has("rank 1 called all_gather(count=5, dtype=fp32)"));
  // Nobody entered the all_gather, so the group is still in step.
  int value = 1;
  detail::PointerCollectives(group).all_reduce(&value, 1);
  BOOST_TEST(value == group.size());
}
