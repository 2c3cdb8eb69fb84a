// Ranks that disagree on a collective's arguments get fsdp::Error on every rank, and the group
// stays usable because no rank entered the mismatched collective (or, for the small all_gathers
// that go by exchange, every block sent was received). Bad local arguments are clear errors,
// found by ProcessGroup and the same for every backend.
#include <boost/test/unit_test.hpp>
#include <chrono>
#include <climits>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "error_message.hpp"
#include "fsdp/comm/process_group.hpp"
#include "pointer_collectives.hpp"
#include "token_within.hpp"

using namespace fsdp;
using fsdp::test::message_has;
using fsdp::test::token_within;

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
  BOOST_CHECK_EXCEPTION(
      detail::PointerCollectives(group).all_gather(send.data(), recv.data(), count), Error,
      message_has("rank 1 called all_gather(count=5, dtype=fp32)"));
  // Nobody entered the all_gather, so the group is still in step.
  int value = 1;
  detail::PointerCollectives(group).all_reduce(&value, 1);
  BOOST_TEST(value == group.size());
}

// The check does not hold the caller until every rank has issued the collective: rank 0 starts
// an all_gather and only then sends rank 1 the token that rank 1 waits for before it starts its
// own. A check that waited at issue would keep rank 0 in all_gather_async (until its timeout)
// and rank 1 without its token.
BOOST_AUTO_TEST_CASE(the_caller_does_not_wait_for_the_other_ranks_check) {
  ProcessGroup group = checked_world();
  if (group.size() < 2) {
    return;
  }
  const int rank = group.rank();
  std::vector<int> send(3, rank), recv(3 * static_cast<std::size_t>(group.size()), -1);
  const int kTokenTag = 4711;
  int token = 0;
  if (rank == 0) {
    Work gather = detail::PointerCollectives(group).all_gather_async(send.data(), recv.data(),
                                                                     send.size(), DType::i32);
    token = 1;
    BOOST_REQUIRE(MPI_Send(&token, 1, MPI_INT, 1, kTokenTag, MPI_COMM_WORLD) == MPI_SUCCESS);
    gather.wait();
  } else {
    if (rank == 1) {
      BOOST_REQUIRE_MESSAGE(
          token_within(token, 0, kTokenTag, MPI_COMM_WORLD, std::chrono::seconds(30)),
          "rank 0 was still in all_gather_async after 30 s");
      BOOST_TEST(token == 1);
    }
    detail::PointerCollectives(group).all_gather(send.data(), recv.data(), send.size(), DType::i32);
  }
  for (int r = 0; r < group.size(); ++r) {
    BOOST_TEST(recv[3 * static_cast<std::size_t>(r)] == r);
  }
}

// A small all_gather on 2 to 4 ranks moves its blocks beside its signature check, not after it
// (block_exchange.hpp), so it completes on the ranks that poll while rank 0, which issued it,
// sits in MPI_Barrier without polling the group. When the collective started only after its
// check, the others waited for rank 0's start until the group's timeout. (Blocks of 64 bytes
// go eagerly: Open MPI completes their sends without the receiver.)
BOOST_AUTO_TEST_CASE(a_small_all_gather_needs_no_poll_from_the_other_ranks) {
  CollectiveOptions options;
  options.timeout_s = 20;  // what the test fails by, if it does
  ProcessGroup group(MPI_COMM_WORLD, options);
  const int rank = group.rank();
  std::vector<int> send(16, rank), recv(16 * static_cast<std::size_t>(group.size()), -1);
  Work gather = detail::PointerCollectives(group).all_gather_async(send.data(), recv.data(),
                                                                   send.size(), DType::i32);
  if (rank == 0) {
    BOOST_REQUIRE(MPI_Barrier(MPI_COMM_WORLD) == MPI_SUCCESS);
    gather.wait();
  } else {
    BOOST_CHECK_NO_THROW(gather.wait());
    BOOST_REQUIRE(MPI_Barrier(MPI_COMM_WORLD) == MPI_SUCCESS);
  }
  for (int r = 0; r < group.size(); ++r) {
    BOOST_TEST(recv[16 * static_cast<std::size_t>(r)] == r);
  }
}

// An all_gather by exchange against a collective that is not one (another collective, an
// all_gather too large to go by exchange, the same bytes of another dtype): every rank raises,
// every block sent is received, and the next all_gather by exchange gathers the right bytes.
BOOST_AUTO_TEST_CASE(mismatches_with_an_all_gather_by_exchange_leave_the_group_usable) {
  ProcessGroup group = checked_world();
  if (group.size() < 2) {
    return;
  }
  const int rank = group.rank();
  const std::size_t ranks = static_cast<std::size_t>(group.size());
  const std::size_t large = (std::size_t{4} << 20) / sizeof(float) + 1;  // one float too many
  std::vector<float> send(large, 1.0f), recv(large * ranks);
  auto gathers_right = [&] {
    std::vector<int> mine(3, rank), all(3 * ranks, -1);
    detail::PointerCollectives(group).all_gather(mine.data(), all.data(), mine.size(), DType::i32);
    for (std::size_t r = 0; r < ranks; ++r) {
      BOOST_TEST(all[3 * r] == static_cast<int>(r));
    }
  };
  if (rank == 1) {
    BOOST_CHECK_EXCEPTION(detail::PointerCollectives(group).broadcast(send.data(), 4, 0), Error,
                          message_has("rank 1 called broadcast(count=4"));
  } else {
    BOOST_CHECK_EXCEPTION(detail::PointerCollectives(group).all_gather(send.data(), recv.data(), 4),
                          Error, message_has("rank 1 called broadcast(count=4"));
  }
  gathers_right();
  const std::size_t count = rank == 0 ? large : 4;
  BOOST_CHECK_EXCEPTION(
      detail::PointerCollectives(group).all_gather(send.data(), recv.data(), count), Error,
      message_has("rank 0 called all_gather(count=" + std::to_string(large)));
  gathers_right();
  const DType dtype = rank == 0 ? DType::i32 : DType::f32;
  BOOST_CHECK_EXCEPTION(
      detail::PointerCollectives(group).all_gather(send.data(), recv.data(), 4, dtype), Error,
      message_has("rank 0 called all_gather(count=4, dtype=int32)"));
  gathers_right();
}

// A reduce_scatter on 2 ranks goes by exchange too (its blocks are its check): another op, or an
// all_gather of the same bytes, is a mismatch on every rank, and the group reduces right after.
BOOST_AUTO_TEST_CASE(mismatches_with_a_reduce_scatter_by_exchange_leave_the_group_usable) {
  ProcessGroup group = checked_world();
  if (group.size() < 2) {
    return;
  }
  const int rank = group.rank();
  const std::size_t ranks = static_cast<std::size_t>(group.size());
  std::vector<float> send(4 * ranks, 1.0f), recv(4 * ranks);
  auto reduces_right = [&] {
    std::vector<double> mine(3 * ranks, rank + 1.0), sum(3, -1);
    detail::PointerCollectives(group).reduce_scatter(mine.data(), sum.data(), 3, DType::f64,
                                                     ReduceOp::sum);
    BOOST_TEST(sum[2] == static_cast<double>(ranks * (ranks + 1) / 2));
  };
  const ReduceOp op = rank == 1 ? ReduceOp::avg : ReduceOp::sum;
  BOOST_CHECK_EXCEPTION(
      detail::PointerCollectives(group).reduce_scatter(send.data(), recv.data(), 4, DType::f32, op),
      Error, message_has("rank 1 called reduce_scatter(count=4, dtype=fp32, op=avg"));
  reduces_right();
  if (rank == 1) {
    BOOST_CHECK_EXCEPTION(detail::PointerCollectives(group).all_gather(send.data(), recv.data(), 4),
                          Error, message_has("rank 1 called all_gather(count=4"));
  } else {
    BOOST_CHECK_EXCEPTION(detail::PointerCollectives(group).reduce_scatter(
                              send.data(), recv.data(), 4, DType::f32, ReduceOp::sum),
                          Error, message_has("rank 1 called all_gather(count=4"));
  }
  reduces_right();
}

// With the check off, ranks that disagree on an all_gather's size fail where a block of the
// wrong size arrives, with what was wrong. MPI_Iallgather, given mismatched sizes, ended such a
// job with a bare MPI_ERR_TRUNCATE or wrote past the end of a buffer.
BOOST_AUTO_TEST_CASE(without_the_check_a_block_of_the_wrong_size_is_an_error_not_damage) {
  CollectiveOptions options;
  options.check_arguments = false;
  options.timeout_s = 60;
  ProcessGroup group(MPI_COMM_WORLD, options);
  if (group.size() < 2) {
    return;
  }
  const int rank = group.rank();
  const std::size_t count = rank == 1 ? 5 : 4;
  std::vector<float> send(count, 1.0f), recv(count * static_cast<std::size_t>(group.size()));
  const std::string expected =
      rank == 1 ? "sent an all_gather block of 16 bytes of fp32 where this rank's is an "
                  "all_gather block of 20 bytes of fp32"
                : "rank 1 sent an all_gather block of 20 bytes of fp32 where this rank's is an "
                  "all_gather block of 16 bytes of fp32";
  BOOST_CHECK_EXCEPTION(
      detail::PointerCollectives(group).all_gather(send.data(), recv.data(), count), Error,
      message_has(expected));
  std::vector<int> mine(2, rank), all(2 * static_cast<std::size_t>(group.size()), -1);
  detail::PointerCollectives(group).all_gather(mine.data(), all.data(), mine.size(), DType::i32);
  BOOST_TEST(all.back() == group.size() - 1);
}

BOOST_AUTO_TEST_CASE(dtype_and_operation_mismatch) {
  ProcessGroup group = checked_world();
  if (group.size() < 2) {
    return;
  }
  std::vector<double> buffer(8, 1.0);
  if (group.rank() == 0) {
    BOOST_CHECK_EXCEPTION(detail::PointerCollectives(group).all_reduce(
                              buffer.data(), buffer.data(), 8, DType::f32, ReduceOp::sum),
                          Error, message_has("ranks disagree on collective"));
  } else {
    BOOST_CHECK_EXCEPTION(detail::PointerCollectives(group).all_reduce(
                              buffer.data(), buffer.data(), 8, DType::f64, ReduceOp::sum),
                          Error, message_has("rank 0 called all_reduce(count=8, dtype=fp32"));
  }
  // A different collective altogether.
  if (group.rank() == 0) {
    BOOST_CHECK_EXCEPTION(detail::PointerCollectives(group).broadcast(buffer.data(), 8, 0), Error,
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
    BOOST_CHECK_EXCEPTION(detail::PointerCollectives(group).broadcast(data.data(), 4, root), Error,
                          message_has("is not a rank of this group"));
  } else {
    BOOST_CHECK_EXCEPTION(detail::PointerCollectives(group).broadcast(data.data(), 4, root), Error,
                          message_has("passed invalid arguments"));
  }
  // all_gather_v whose counts do not match the send count on one rank.
  std::vector<std::size_t> counts(group.size(), 2);
  const std::size_t send_count = group.rank() == 0 ? 3 : 2;
  std::vector<float> send(send_count), recv(2 * group.size() + 1);
  BOOST_CHECK_THROW(
      detail::PointerCollectives(group).all_gather_v(send.data(), send_count, recv.data(), counts),
      Error);
  BOOST_CHECK_NO_THROW(group.barrier());
}

BOOST_AUTO_TEST_CASE(avg_of_integers_is_rejected) {
  ProcessGroup group = checked_world();
  std::vector<std::int32_t> data(4, 1);
  BOOST_CHECK_EXCEPTION(
      detail::PointerCollectives(group).all_reduce(data.data(), data.size(), ReduceOp::avg), Error,
      message_has("ReduceOp::avg needs a floating dtype, got int32"));
}

BOOST_AUTO_TEST_CASE(view_sizes_are_checked) {
  ProcessGroup group = checked_world();
  Kokkos::View<float*, Kokkos::HostSpace> send("params", 4);
  Kokkos::View<float*, Kokkos::HostSpace> recv("gathered", 4 * group.size() + 1);
  BOOST_CHECK_EXCEPTION(group.all_gather(Kokkos::DefaultHostExecutionSpace(), send, recv), Error,
                        message_has("recv View 'gathered' has"));
}

BOOST_AUTO_TEST_CASE(environment_options_are_validated) {
  setenv("FSDP_COLLECTIVE_TIMEOUT_S", "soon", 1);
  CollectiveOptions soon = CollectiveOptions::from_environment();
  BOOST_TEST(soon.environment_error ==
             "FSDP_COLLECTIVE_TIMEOUT_S='soon' is not a number of seconds >= 0 (0 waits forever, "
             "default 600)");
  BOOST_TEST(soon.timeout_s == 600.0);  // the default kept
  setenv("FSDP_COLLECTIVE_TIMEOUT_S", "2.5", 1);
  setenv("FSDP_CHECK_COLLECTIVES", "1", 1);
  CollectiveOptions options = CollectiveOptions::from_environment();
  BOOST_TEST(options.timeout_s == 2.5);
  BOOST_TEST(options.check_arguments);
  BOOST_TEST(options.environment_error.empty());
  setenv("FSDP_CHECK_COLLECTIVES", "maybe", 1);
  BOOST_TEST(CollectiveOptions::from_environment().environment_error ==
             "FSDP_CHECK_COLLECTIVES='maybe' is not understood; use 1 or 0");
  unsetenv("FSDP_CHECK_COLLECTIVES");
  setenv("FSDP_COLLECTIVE_TIMEOUT_S", "120", 1);
}

BOOST_AUTO_TEST_CASE(a_malformed_environment_on_one_rank_fails_every_rank) {
  // Only the last rank's environment is malformed; the group is made on every rank. Before, that
  // rank threw while building its options and the others waited in the group's creation forever.
  int ranks = 0, rank = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  const bool last = rank == ranks - 1;
  if (last) {
    setenv("FSDP_CHECK_COLLECTIVES", "maybe", 1);
  }
  const std::string expected = "the environment of rank " + std::to_string(ranks - 1) +
                               " is not understood: FSDP_CHECK_COLLECTIVES='maybe' is not "
                               "understood; use 1 or 0 (every rank of a process group checks it "
                               "when the group is made)";
  BOOST_CHECK_EXCEPTION(ProcessGroup(MPI_COMM_WORLD), Error, [&](const Error& error) {
    return error.kind() == ErrorKind::usage && error.message() == expected;
  });
  unsetenv("FSDP_CHECK_COLLECTIVES");
  BOOST_TEST(ProcessGroup(MPI_COMM_WORLD).size() == ranks);  // and the next group is fine
}

namespace {

// A backend that moves nothing and keeps the problem ProcessGroup found in each call's arguments:
// what any backend, MPI, NCCL or another, is given to refuse.
class RecordingBackend final : public Backend {
 public:
  std::vector<std::string> problems;

  const char* name() const override { return "recording"; }
  MemoryKind memory_kind() const override { return MemoryKind::host; }
  int rank() const override { return world_.rank(); }
  int size() const override { return world_.size(); }
  MPI_Comm mpi_comm() const override { return world_.mpi_comm(); }

  std::unique_ptr<PendingOperation> all_gather(const void*, void*, std::size_t, DType,
                                               const std::string& problem) override {
    return record(problem);
  }
  std::unique_ptr<PendingOperation> all_gather_v(const void*, std::size_t, void*,
                                                 const std::vector<std::size_t>&, DType,
                                                 const std::string& problem) override {
    return record(problem);
  }
  std::unique_ptr<PendingOperation> reduce_scatter(const void*, void*, std::size_t, DType, ReduceOp,
                                                   const std::string& problem) override {
    return record(problem);
  }
  std::unique_ptr<PendingOperation> all_reduce(const void*, void*, std::size_t, DType, ReduceOp,
                                               const std::string& problem) override {
    return record(problem);
  }
  std::unique_ptr<PendingOperation> broadcast(void*, std::size_t, DType, int,
                                              const std::string& problem) override {
    return record(problem);
  }
  std::unique_ptr<PendingOperation> reduce(const void*, void*, std::size_t, DType, ReduceOp, int,
                                           const std::string& problem) override {
    return record(problem);
  }
  std::unique_ptr<PendingOperation> scatter_v(const void*, const std::vector<std::size_t>&, void*,
                                              std::size_t, DType, int,
                                              const std::string& problem) override {
    return record(problem);
  }
  std::unique_ptr<PendingOperation> barrier() override { return record(""); }
  std::shared_ptr<Backend> split(int, int) const override { return nullptr; }
  std::shared_ptr<Backend> split_node_local() const override { return nullptr; }

 private:
  struct Done final : PendingOperation {
    bool test() override { return true; }
    void wait() override {}
  };
  std::unique_ptr<PendingOperation> record(const std::string& problem) {
    problems.push_back(problem);
    return std::make_unique<Done>();
  }
  ProcessGroup world_{MPI_COMM_WORLD};
};

}  // namespace

BOOST_AUTO_TEST_CASE(every_backend_is_given_the_same_argument_checks) {
  auto recording = std::make_shared<RecordingBackend>();
  ProcessGroup fake(recording);
  // Checks off: a problem fails on this rank alone, so every call below is wrong on every rank
  // and no rank enters a collective.
  CollectiveOptions options;
  options.check_arguments = false;
  options.timeout_s = 60;
  ProcessGroup mpi(MPI_COMM_WORLD, options);

  const int n = mpi.size();
  const int me = mpi.rank();
  const std::size_t too_many = static_cast<std::size_t>(INT_MAX) + 1;  // never touched
  std::vector<std::size_t> counts(n, 2);
  std::vector<std::size_t> huge_counts(n, too_many / n + 1);
  std::vector<float> data(4);
  std::vector<std::int32_t> ints(4);
  const std::vector<std::pair<std::function<void(ProcessGroup&)>, std::string>> bad_calls = {
      {[&](ProcessGroup& g) { detail::PointerCollectives(g).broadcast(data.data(), 4, n); },
       "root " + std::to_string(n)},
      {[&](ProcessGroup& g) {
         detail::PointerCollectives(g).reduce(data.data(), data.data(), 4, ReduceOp::sum, -1);
       },
       "root -1"},
      {[&](ProcessGroup& g) {
         detail::PointerCollectives(g).all_reduce(ints.data(), 4, ReduceOp::avg);
       },
       "ReduceOp::avg"},
      {[&](ProcessGroup& g) {
         detail::PointerCollectives(g).all_reduce(data.data(), data.data(), 4, DType::f32,
                                                  static_cast<ReduceOp>(9));
       },
       "invalid ReduceOp value 9"},
      {[&](ProcessGroup& g) {
         detail::PointerCollectives(g).all_gather(data.data(), data.data(), 1,
                                                  static_cast<DType>(17));
       },
       "invalid DType value 17"},
      {[&](ProcessGroup& g) {
         detail::PointerCollectives(g).all_gather_v(data.data(), 2, data.data(),
                                                    std::vector<std::size_t>(n + 1, 2));
       },
       "counts has " + std::to_string(n + 1) + " entries"},
      {[&](ProcessGroup& g) {
         detail::PointerCollectives(g).all_gather_v(data.data(), 3, data.data(), counts);
       },
       "this rank's count 3 differs"},
      {[&](ProcessGroup& g) {
         detail::PointerCollectives(g).scatter_v(data.data(), counts, data.data(), 1, 0);
       },
       "this rank's count 1 differs"},
      {[&](ProcessGroup& g) {
         detail::PointerCollectives(g).scatter_v(data.data(), huge_counts, data.data(),
                                                 huge_counts[me], 0);
       },
       "int count limit"},
      {[&](ProcessGroup& g) {
         detail::PointerCollectives(g).all_gather(data.data(), data.data(), too_many);
       },
       "int count limit"},
      {[&](ProcessGroup& g) {
         detail::PointerCollectives(g).reduce_scatter(data.data(), data.data(), too_many,
                                                      ReduceOp::sum);
       },
       "int count limit"},
  };
  for (const auto& [call, expected] : bad_calls) {
    recording->problems.clear();
    call(fake);
    BOOST_REQUIRE(recording->problems.size() == 1);
    const std::string problem = recording->problems.front();
    BOOST_TEST(problem.find(expected) != std::string::npos, problem << " lacks " << expected);
    // The MPI backend refuses the same call with exactly the same words.
    BOOST_CHECK_EXCEPTION(call(mpi), Error,
                          [&](const Error& error) { return error.message() == problem; });
  }
  // Valid calls reach the backend with no problem.
  recording->problems.clear();
  detail::PointerCollectives(fake).all_gather_v(data.data(), 2, data.data(), counts);
  detail::PointerCollectives(fake).broadcast(data.data(), 4, n - 1);
  BOOST_TEST(recording->problems == std::vector<std::string>(2, ""),
             boost::test_tools::per_element());
}
