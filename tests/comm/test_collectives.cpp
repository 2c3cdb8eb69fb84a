// Every collective of the MPI ProcessGroup against values each rank computes on its own, for all
// dtypes, at uneven sizes including zero elements on some ranks; strings and on_root built on
// them; communicators freed with their groups.
#include <boost/mpl/list.hpp>
#include <boost/test/unit_test.hpp>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <numeric>
#include <stdexcept>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "device_kind_backend.hpp"
#include "fsdp/comm/broadcast_string.hpp"
#include "fsdp/comm/control_words.hpp"
#include "fsdp/comm/on_root.hpp"
#include "fsdp/comm/process_group.hpp"
#include "fsdp/core/memory_space.hpp"
#include "pointer_collectives.hpp"
#include "test_values.hpp"

using namespace fsdp;
using fsdp::test::as_double;
using fsdp::test::make;
using fsdp::test::value_of;

using AllTypes = boost::mpl::list<float, double, bfloat16, float16, std::int32_t, std::int64_t>;
using FloatTypes = boost::mpl::list<float, double, bfloat16, float16>;

namespace {
ProcessGroup world() {
  return ProcessGroup(MPI_COMM_WORLD);
}
const std::size_t kCounts[] = {0, 1, 7, 1000};
}  // namespace

BOOST_AUTO_TEST_CASE(group_duplicates_the_communicator) {
  ProcessGroup group = world();
  int world_rank = 0, world_size = 0, compare = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  BOOST_TEST(group.rank() == world_rank);
  BOOST_TEST(group.size() == world_size);
  BOOST_TEST(std::string(group.backend_name()) == "mpi");
  MPI_Comm_compare(group.mpi_comm(), MPI_COMM_WORLD, &compare);
  BOOST_TEST(compare == MPI_CONGRUENT);  // same ranks, different context
}

BOOST_AUTO_TEST_CASE_TEMPLATE(all_gather_views, T, AllTypes) {
  ProcessGroup group = world();
  const int n = group.size();
  for (std::size_t count : kCounts) {
    Kokkos::View<T*, Kokkos::HostSpace> send("send", count);
    Kokkos::View<T*, Kokkos::HostSpace> recv("recv", count * n);
    for (std::size_t i = 0; i < count; ++i) {
      send(i) = make<T>(value_of(group.rank(), i));
    }
    group.all_gather(ExecutionSpace(), send, recv);
    for (int r = 0; r < n; ++r) {
      for (std::size_t i = 0; i < count; ++i) {
        BOOST_TEST(as_double(recv(r * count + i)) == value_of(r, i));
      }
    }
  }
}

BOOST_AUTO_TEST_CASE_TEMPLATE(all_gather_v_uneven_with_empty_ranks, T, AllTypes) {
  ProcessGroup group = world();
  const int n = group.size();
  std::vector<std::size_t> counts(n);
  for (int r = 0; r < n; ++r) {
    counts[r] = static_cast<std::size_t>((r * 3 + 1) % 4) * 5;  // 5, 0, 15, 10: rank 1 sends none
  }
  const std::size_t total = std::accumulate(counts.begin(), counts.end(), std::size_t{0});
  std::vector<T> send(counts[group.rank()]);
  for (std::size_t i = 0; i < send.size(); ++i) {
    send[i] = make<T>(value_of(group.rank(), i));
  }
  std::vector<T> recv(total);
  group.all_gather_v(Kokkos::DefaultHostExecutionSpace(), host_view(send.data(), send.size()),
                     host_view(recv.data(), recv.size()), counts);
  std::size_t offset = 0;
  for (int r = 0; r < n; ++r) {
    for (std::size_t i = 0; i < counts[r]; ++i) {
      BOOST_TEST(as_double(recv[offset + i]) == value_of(r, i));
    }
    offset += counts[r];
  }
}

BOOST_AUTO_TEST_CASE_TEMPLATE(reduce_scatter_sum, T, AllTypes) {
  ProcessGroup group = world();
  const int n = group.size();
  for (std::size_t count : kCounts) {
    Kokkos::View<T*, Kokkos::HostSpace> send("send", count * n);
    Kokkos::View<T*, Kokkos::HostSpace> recv("recv", count);
    for (std::size_t i = 0; i < count * n; ++i) {
      send(i) = make<T>(value_of(group.rank(), i));
    }
    group.reduce_scatter(ExecutionSpace(), send, recv, ReduceOp::sum);
    for (std::size_t i = 0; i < count; ++i) {
      double expected = 0;
      for (int r = 0; r < n; ++r) {
        expected += value_of(r, group.rank() * count + i);
      }
      BOOST_TEST(as_double(recv(i)) == expected);
    }
  }
}

BOOST_AUTO_TEST_CASE_TEMPLATE(reduce_scatter_avg, T, FloatTypes) {
  ProcessGroup group = world();
  const int n = group.size();
  const std::size_t count = 37;
  std::vector<T> send(count * n), recv(count);
  for (std::size_t i = 0; i < send.size(); ++i) {
    send[i] = make<T>(value_of(group.rank(), i));
  }
  group.reduce_scatter(Kokkos::DefaultHostExecutionSpace(), host_view(send.data(), send.size()),
                       host_view(recv.data(), recv.size()), ReduceOp::avg);
  for (std::size_t i = 0; i < count; ++i) {
    double sum = 0;
    for (int r = 0; r < n; ++r) {
      sum += value_of(r, group.rank() * count + i);
    }
    // sum / n with n <= 4 and small sums is exact in every float type (a multiple of 1/4 < 32).
    BOOST_TEST(as_double(recv[i]) == sum / n);
  }
}

// Reductions of more than 2 MiB go piece by piece (MpiBackend), one piece in flight at a time on
// a communicator of their own: two reduce_scatters and an in-place all_reduce, with an
// all_gather started among them and all waited for in the opposite order, give every element's
// reduction, at sizes that leave a short last piece.
using PieceTypes = boost::mpl::list<float, double, std::int32_t>;
BOOST_AUTO_TEST_CASE_TEMPLATE(reductions_in_pieces_between_other_collectives, T, PieceTypes) {
  ProcessGroup group = world();
  const int n = group.size();
  // Distinct values over a long period, so that a piece packed at the wrong offset shows; sums of
  // 4 of them are exact in every type here.
  const auto value = [](int rank, std::size_t i) { return rank + static_cast<double>(i % 1021); };
  const std::size_t counts[] = {(std::size_t{5} << 20) / (sizeof(T) * n) + 3,
                                (std::size_t{3} << 20) / (sizeof(T) * n) + 1};
  std::vector<std::vector<T>> sends, recvs;
  for (std::size_t count : counts) {
    sends.emplace_back(count * n);
    recvs.emplace_back(count);
    for (std::size_t i = 0; i < count * n; ++i) {
      sends.back()[i] = static_cast<T>(value(group.rank(), i));
    }
  }
  const int mine = group.rank();
  std::vector<int> ranks(n);
  std::vector<Work> works;
  works.push_back(detail::PointerCollectives(group).reduce_scatter_async(
      sends[0].data(), recvs[0].data(), counts[0], dtype_of<T>(), ReduceOp::sum));
  works.push_back(
      detail::PointerCollectives(group).all_gather_async(&mine, ranks.data(), 1, DType::i32));
  std::vector<T> reduced((std::size_t{5} << 20) / sizeof(T) + 7);
  for (std::size_t i = 0; i < reduced.size(); ++i) {
    reduced[i] = static_cast<T>(value(group.rank(), i));
  }
  works.push_back(detail::PointerCollectives(group).all_reduce_async(
      reduced.data(), reduced.data(), reduced.size(), dtype_of<T>(), ReduceOp::sum));
  // avg divides on completion (floats); max for the integers.
  const bool floating = std::is_floating_point_v<T>;
  works.push_back(detail::PointerCollectives(group).reduce_scatter_async(
      sends[1].data(), recvs[1].data(), counts[1], dtype_of<T>(),
      floating ? ReduceOp::avg : ReduceOp::max));
  for (auto work = works.rbegin(); work != works.rend(); ++work) {
    work->wait();
  }
  for (int r = 0; r < n; ++r) {
    BOOST_TEST(ranks[r] == r);
  }
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < reduced.size(); ++i) {
    double sum = 0;
    for (int r = 0; r < n; ++r) {
      sum += value(r, i);
    }
    wrong += static_cast<double>(reduced[i]) != sum;
  }
  BOOST_TEST(wrong == 0u, "all_reduce: " << wrong << " of " << reduced.size() << " wrong");
  for (std::size_t k = 0; k < 2; ++k) {
    std::size_t wrong = 0;
    for (std::size_t i = 0; i < counts[k]; ++i) {
      const std::size_t at = group.rank() * counts[k] + i;
      double sum = 0;
      for (int r = 0; r < n; ++r) {
        sum += value(r, at);
      }
      const double second =
          floating ? static_cast<double>(static_cast<T>(sum * (1.0 / n))) : value(n - 1, at);
      const double expected = k == 0 ? sum : second;
      wrong += static_cast<double>(recvs[k][i]) != expected;
    }
    BOOST_TEST(wrong == 0u, "reduction " << k << ": " << wrong << " of " << counts[k] << " wrong");
  }
}

BOOST_AUTO_TEST_CASE_TEMPLATE(all_reduce_in_place, T, AllTypes) {
  ProcessGroup group = world();
  const int n = group.size();
  const std::size_t count = 100;
  for (ReduceOp op : {ReduceOp::sum, ReduceOp::max, ReduceOp::min}) {
    Kokkos::View<T*, Kokkos::HostSpace> data("data", count);
    for (std::size_t i = 0; i < count; ++i) {
      data(i) = make<T>(value_of(group.rank(), i));
    }
    group.all_reduce(ExecutionSpace(), data, op);
    for (std::size_t i = 0; i < count; ++i) {
      double expected = op == ReduceOp::sum ? 0 : value_of(0, i);
      for (int r = 0; r < n; ++r) {
        const double v = value_of(r, i);
        expected = op == ReduceOp::sum   ? expected + v
                   : op == ReduceOp::max ? std::max(expected, v)
                                         : std::min(expected, v);
      }
      BOOST_TEST(as_double(data(i)) == expected, "op " << name_of(op) << " element " << i);
    }
  }
}

BOOST_AUTO_TEST_CASE(all_reduce_avg_and_out_of_place) {
  ProcessGroup group = world();
  const int n = group.size();
  std::vector<double> send(10, group.rank() + 1.0), recv(10, -1.0);
  detail::PointerCollectives(group).all_reduce(send.data(), recv.data(), send.size(), DType::f64,
                                               ReduceOp::avg);
  for (double v : recv) {
    BOOST_TEST(v == (n + 1) / 2.0);
  }
  for (double v : send) {
    BOOST_TEST(v == group.rank() + 1.0);  // the input is untouched
  }
}

BOOST_AUTO_TEST_CASE_TEMPLATE(broadcast_from_every_root, T, AllTypes) {
  ProcessGroup group = world();
  for (int root = 0; root < group.size(); ++root) {
    Kokkos::View<T*, Kokkos::HostSpace> data("data", 33);
    for (std::size_t i = 0; i < data.size(); ++i) {
      data(i) = make<T>(value_of(group.rank(), i));
    }
    group.broadcast(ExecutionSpace(), data, root);
    for (std::size_t i = 0; i < data.size(); ++i) {
      BOOST_TEST(as_double(data(i)) == value_of(root, i));
    }
  }
}

BOOST_AUTO_TEST_CASE_TEMPLATE(reduce_to_every_root, T, AllTypes) {
  ProcessGroup group = world();
  const int n = group.size();
  const std::size_t count = 21;
  for (int root = 0; root < n; ++root) {
    std::vector<T> send(count), recv(count, make<T>(-1));
    for (std::size_t i = 0; i < count; ++i) {
      send[i] = make<T>(value_of(group.rank(), i));
    }
    group.reduce(Kokkos::DefaultHostExecutionSpace(), host_view(send.data(), count),
                 host_view(recv.data(), count), ReduceOp::sum, root);
    for (std::size_t i = 0; i < count; ++i) {
      double expected = 0;
      for (int r = 0; r < n; ++r) {
        expected += value_of(r, i);
      }
      // Only the root receives; elsewhere recv is untouched.
      BOOST_TEST(as_double(recv[i]) == (group.rank() == root ? expected : -1.0));
    }
  }
}

BOOST_AUTO_TEST_CASE(reduce_avg_in_place_at_root) {
  ProcessGroup group = world();
  std::vector<double> data(5, group.rank() + 1.0);
  group.reduce(Kokkos::DefaultHostExecutionSpace(), host_view(data.data(), data.size()),
               host_view(data.data(), data.size()), ReduceOp::avg, 0);
  if (group.rank() == 0) {
    BOOST_TEST(data[4] == (group.size() + 1) / 2.0);
  }
}

BOOST_AUTO_TEST_CASE_TEMPLATE(scatter_v_uneven_with_empty_ranks, T, AllTypes) {
  ProcessGroup group = world();
  const int n = group.size();
  std::vector<std::size_t> counts(n);
  for (int r = 0; r < n; ++r) {
    counts[r] = static_cast<std::size_t>((r * 3 + 1) % 4) * 3;  // 3, 0, 9, 6
  }
  const int root = n - 1;
  std::vector<T> send;
  if (group.rank() == root) {
    for (int r = 0; r < n; ++r) {
      for (std::size_t i = 0; i < counts[r]; ++i) {
        send.push_back(make<T>(value_of(r, i)));
      }
    }
  }
  std::vector<T> recv(counts[group.rank()]);
  group.scatter_v(Kokkos::DefaultHostExecutionSpace(), host_view(send.data(), send.size()), counts,
                  host_view(recv.data(), recv.size()), root);
  for (std::size_t i = 0; i < recv.size(); ++i) {
    BOOST_TEST(as_double(recv[i]) == value_of(group.rank(), i));
  }
}

BOOST_AUTO_TEST_CASE(two_dimensional_views_are_flattened) {
  ProcessGroup group = world();
  Kokkos::View<double**, Kokkos::LayoutRight, Kokkos::HostSpace> send("send", 3, 4);
  Kokkos::View<double***, Kokkos::LayoutRight, Kokkos::HostSpace> recv("recv", group.size(), 3, 4);
  Kokkos::parallel_for(
      "fill",
      Kokkos::MDRangePolicy<Kokkos::DefaultHostExecutionSpace, Kokkos::Rank<2>>({0, 0}, {3, 4}),
      KOKKOS_LAMBDA(int i, int j) { send(i, j) = 100 * group.rank() + 10 * i + j; });
  group.all_gather(ExecutionSpace(), send, recv);
  for (int r = 0; r < group.size(); ++r) {
    for (int i = 0; i < 3; ++i) {
      for (int j = 0; j < 4; ++j) {
        BOOST_TEST(recv(r, i, j) == 100 * r + 10 * i + j);
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(non_contiguous_views_are_rejected) {
  ProcessGroup group = world();
  Kokkos::View<double**, Kokkos::LayoutRight, Kokkos::HostSpace> matrix("matrix", 4, 4);
  auto column = Kokkos::subview(matrix, Kokkos::ALL(), 1);
  Kokkos::View<double*, Kokkos::HostSpace> recv("recv", 4 * group.size());
  BOOST_CHECK_EXCEPTION(
      group.all_gather(ExecutionSpace(), column, recv), Error, [](const Error& e) {
        return std::string(e.what()).find("must be contiguous") != std::string::npos;
      });
}

BOOST_AUTO_TEST_CASE(async_operations_overlap_and_keep_views_alive) {
  ProcessGroup group = world();
  const int n = group.size();
  const std::size_t count = 1 << 16;
  Kokkos::View<float*, Kokkos::HostSpace> send("send", count);
  Kokkos::View<float*, Kokkos::HostSpace> gathered("gathered", count * n);
  Kokkos::View<float*, Kokkos::HostSpace> reduced("reduced", count);
  Kokkos::View<float*, Kokkos::HostSpace> scattered_in("scattered_in", count * n);
  Kokkos::deep_copy(send, static_cast<float>(group.rank()));
  Kokkos::deep_copy(reduced, 1.0f);
  Kokkos::deep_copy(scattered_in, 2.0f);
  Kokkos::View<float*, Kokkos::HostSpace> scattered("scattered", count);

  const int before = gathered.use_count();
  std::vector<Work> works;
  works.push_back(group.all_gather_async(ExecutionSpace(), send, gathered));
  works.push_back(group.all_reduce_async(ExecutionSpace(), reduced, ReduceOp::sum));
  works.push_back(
      group.reduce_scatter_async(ExecutionSpace(), scattered_in, scattered, ReduceOp::avg));
  // While in flight, each Work holds its own reference to the Views it was given.
  if (!works[0].completed()) {
    BOOST_TEST(gathered.use_count() == before + 1);
  }
  while (!(works[0].test() & works[1].test() & works[2].test())) {
  }
  BOOST_TEST(gathered.use_count() == before);  // released on completion
  for (int r = 0; r < n; ++r) {
    BOOST_TEST(gathered(r * count + 5) == static_cast<float>(r));
  }
  BOOST_TEST(reduced(7) == static_cast<float>(n));
  BOOST_TEST(scattered(9) == 2.0f);
  wait_all(works);  // no-op on completed work
  BOOST_TEST(works[1].completed());
}

// Each rank in turn writes a value into memory its node shares, late (after a sleep), then enters
// the barrier; every other rank on the node reads the value after leaving it. A barrier that let a
// rank through before the writer arrived would show the previous round's value.
BOOST_AUTO_TEST_CASE(barrier_and_default_work) {
  ProcessGroup group = world();
  MPI_Comm node = MPI_COMM_NULL;
  BOOST_REQUIRE(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL,
                                    &node) == MPI_SUCCESS);
  int node_rank = 0, node_size = 0;
  BOOST_REQUIRE(MPI_Comm_rank(node, &node_rank) == MPI_SUCCESS);
  BOOST_REQUIRE(MPI_Comm_size(node, &node_size) == MPI_SUCCESS);
  // One int, owned by the node's rank 0, that every rank of the node reads and writes directly.
  int* mine = nullptr;
  MPI_Win window = MPI_WIN_NULL;
  BOOST_REQUIRE(MPI_Win_allocate_shared(node_rank == 0 ? sizeof(int) : 0, sizeof(int),
                                        MPI_INFO_NULL, node, &mine, &window) == MPI_SUCCESS);
  MPI_Aint bytes = 0;
  int unit = 0;
  volatile int* shared = nullptr;
  BOOST_REQUIRE(MPI_Win_shared_query(window, 0, &bytes, &unit, &shared) == MPI_SUCCESS);
  BOOST_REQUIRE(MPI_Win_lock_all(MPI_MODE_NOCHECK, window) == MPI_SUCCESS);
  if (node_rank == 0) {
    *shared = 0;
  }
  BOOST_REQUIRE(MPI_Win_sync(window) == MPI_SUCCESS);
  group.barrier();
  for (int writer = 0; writer < node_size; ++writer) {
    const int value = writer + 1;
    if (node_rank == writer) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));  // the others are waiting
      *shared = value;
      BOOST_REQUIRE(MPI_Win_sync(window) == MPI_SUCCESS);
    }
    group.barrier();
    BOOST_REQUIRE(MPI_Win_sync(window) == MPI_SUCCESS);
    const int seen = *shared;
    BOOST_TEST(seen == value, "node rank "
                                  << node_rank << " read " << seen << " after the barrier; "
                                  << "node rank " << writer << " wrote " << value << " before it");
    group.barrier();  // everyone has read before the next writer writes
  }
  BOOST_REQUIRE(MPI_Win_unlock_all(window) == MPI_SUCCESS);
  BOOST_REQUIRE(MPI_Win_free(&window) == MPI_SUCCESS);
  BOOST_REQUIRE(MPI_Comm_free(&node) == MPI_SUCCESS);

  Work done;
  BOOST_TEST(done.completed());
  BOOST_TEST(done.test());
  done.wait();
}

BOOST_AUTO_TEST_CASE(split_by_parity_and_node_local) {
  ProcessGroup group = world();
  const int n = group.size();
  ProcessGroup half = group.split(group.rank() % 2, -group.rank());  // key reverses the order
  const int members = (n + 1 - group.rank() % 2) / 2;
  BOOST_TEST(half.size() == members);
  BOOST_TEST(half.rank() == members - 1 - group.rank() / 2);
  std::int64_t sum = group.rank();
  detail::PointerCollectives(half).all_reduce(&sum, 1);
  std::int64_t expected = 0;
  for (int r = group.rank() % 2; r < n; r += 2) {
    expected += r;
  }
  BOOST_TEST(sum == expected);

  ProcessGroup node = group.node_local();  // one node here: every rank
  BOOST_TEST(node.size() == n);
  BOOST_CHECK_THROW(group.split(-1, 0), Error);
}

// ---- one rank decides, every rank learns the outcome ----

BOOST_AUTO_TEST_CASE(broadcast_string_from_every_root) {
  ProcessGroup group = world();
  std::string long_text;
  for (int i = 0; i < 100003; ++i) {  // not a multiple of the 8-byte words it travels in
    long_text.push_back(static_cast<char>(i % 251));  // every byte value but a few, '\0' too
  }
  for (const std::string& sent : {std::string(), std::string("x"), long_text}) {
    for (int root = 0; root < group.size(); ++root) {
      std::string text = group.rank() == root ? sent : std::string("stale text from before");
      broadcast_string(group, text, root);
      BOOST_TEST(text.size() == sent.size());
      BOOST_TEST((text == sent));
    }
  }
}

BOOST_AUTO_TEST_CASE(on_root_runs_on_the_root_only_and_returns_its_result_everywhere) {
  ProcessGroup group = world();
  for (int root = 0; root < group.size(); ++root) {
    int runs = 0;
    const std::string result = on_root(
        group, "name the root",
        [&] {
          ++runs;
          return "decided by rank " + std::to_string(group.rank());
        },
        root);
    BOOST_TEST(runs == (group.rank() == root ? 1 : 0));
    BOOST_TEST(result == "decided by rank " + std::to_string(root));
  }
}

BOOST_AUTO_TEST_CASE(on_root_failures_reach_every_rank_with_the_same_text) {
  ProcessGroup group = world();
  const int root = group.size() - 1;
  const auto fails_with = [&](const std::function<std::string()>& decide,
                              const std::string& expected) {
    bool threw = false;
    try {
      on_root(group, "decide", decide, root);
    } catch (const Error& error) {
      threw = true;
      BOOST_TEST(std::string(error.what()) == expected);
    }
    BOOST_TEST(threw);
  };
  const std::string prefix =
      "fsdp: " + (group.size() > 1 ? "rank " + std::to_string(root) + " " : std::string()) +
      "could not decide: ";
  // fsdp::Error: its "fsdp: " is not repeated.
  fails_with([]() -> std::string { throw Error("the disk is full"); }, prefix + "the disk is full");
  // Any std::exception, not only fsdp::Error.
  fails_with([]() -> std::string { throw std::runtime_error("no plan fits"); },
             prefix + "no plan fits");
  fails_with([]() -> std::string { throw std::runtime_error(""); }, prefix + "unknown error");
  fails_with([]() -> std::string { throw 42; },
             prefix + "an exception that is not a std::exception");
  // The group is still in step afterwards.
  BOOST_TEST(on_root(
                 group, "decide", [] { return std::string("fine"); }, root) == "fine");
}

namespace {
int freed_communicators = 0;
int count_free(MPI_Comm, int, void*, void*) {
  ++freed_communicators;
  return MPI_SUCCESS;
}
}  // namespace

BOOST_AUTO_TEST_CASE(groups_free_their_communicators) {
  // MPI calls an attribute's delete callback when the communicator carrying it is freed.
  int keyval = MPI_KEYVAL_INVALID;
  BOOST_REQUIRE(MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, count_free, &keyval, nullptr) ==
                MPI_SUCCESS);
  freed_communicators = 0;
  {
    ProcessGroup group = world();
    ProcessGroup half = group.split(group.rank() % 2, 0);
    ProcessGroup node = group.node_local();
    for (const ProcessGroup* g : {&group, &half, &node}) {
      BOOST_REQUIRE(MPI_Comm_set_attr(g->mpi_comm(), keyval, nullptr) == MPI_SUCCESS);
    }
    ProcessGroup copy = group;  // copies share the communicator: freed once, with the last one
    BOOST_TEST(freed_communicators == 0);
  }
  BOOST_TEST(freed_communicators == 3);
  MPI_Comm_free_keyval(&keyval);
}

// ---- transport: what carries the bytes, staging through host buffers, instance fences ----

namespace {

ProcessGroup staged_world() {
  CollectiveOptions options = CollectiveOptions::from_environment();
  options.stage_host_buffers = true;
  return ProcessGroup(MPI_COMM_WORLD, options);
}

// Sets an environment variable for one scope, and restores what was there.
class ScopedEnvironment {
 public:
  ScopedEnvironment(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) {
      old_ = old;
      had_ = true;
    }
    setenv(name, value, 1);
  }
  ~ScopedEnvironment() {
    if (had_) {
      setenv(name_, old_.c_str(), 1);
    } else {
      unsetenv(name_);
    }
  }

 private:
  const char* name_;
  std::string old_;
  bool had_ = false;
};

template <class T>
using HostView = Kokkos::View<T*, Kokkos::HostSpace>;

template <class T>
HostView<T> filled(const char* label, std::size_t count, int rank) {
  HostView<T> view(std::string(label), count);
  for (std::size_t i = 0; i < count; ++i) {
    view(i) = make<T>(value_of(rank, i));
  }
  return view;
}

// What a receiving View holds before the collective: never a result of one.
template <class T>
HostView<T> stale(const char* label, std::size_t count) {
  HostView<T> view(std::string(label), count);
  Kokkos::deep_copy(view, make<T>(-7));
  return view;
}

template <class T>
void check_same(const HostView<T>& staged, const HostView<T>& direct, const char* operation) {
  BOOST_TEST_REQUIRE(staged.size() == direct.size());
  for (std::size_t i = 0; i < staged.size(); ++i) {
    BOOST_TEST(as_double(staged(i)) == as_double(direct(i)), operation << " element " << i);
  }
}

}  // namespace

BOOST_AUTO_TEST_CASE(an_mpi_group_reports_its_transport) {
  ProcessGroup group = world();
  if (kHostAccessible) {
    BOOST_TEST((group.transport() == Transport::mpi_host));
    BOOST_TEST(std::string(group.transport_name()) == "MPI (host memory)");
  } else {
    BOOST_TEST((group.transport() ==
                (mpi_is_cuda_aware() ? Transport::mpi_device : Transport::mpi_staged)));
  }
  group.require_transport_for_buffers();
  BOOST_TEST(group.staged_bytes() == 0u);

  // Forced staging is what the group reports, and what its sub-groups inherit.
  ProcessGroup staged = staged_world();
  BOOST_TEST((staged.transport() == Transport::mpi_staged));
  BOOST_TEST(std::string(staged.transport_name()) == "MPI through pinned host staging buffers");
  BOOST_TEST((staged.split(0, group.rank()).transport() == Transport::mpi_staged));
  BOOST_TEST((group.split(0, group.rank()).transport() == group.transport()));
}

BOOST_AUTO_TEST_CASE(a_device_backend_refuses_host_buffers_when_asked_not_when_made) {
  // Making the group succeeds: groups exist before anything is sharded over them.
  ProcessGroup group(std::make_shared<fsdp::test::DeviceKindBackend>(world().backend()));
  if (!kHostAccessible) {
    BOOST_TEST((group.transport() == Transport::nccl));
    return;
  }
  const auto says_what_to_do = [](const Error& error) {
    const std::string text = error.what();
    return text.find("fsdp: ") == 0 && text.find("moves device memory only") != std::string::npos &&
           text.find("ProcessGroup(comm)") != std::string::npos;
  };
  BOOST_CHECK_EXCEPTION(group.transport(), Error, says_what_to_do);
  BOOST_CHECK_EXCEPTION(group.transport_name(), Error, says_what_to_do);
  BOOST_CHECK_EXCEPTION(group.require_transport_for_buffers(), Error, says_what_to_do);
  // Its collectives on host values still work (through device memory on a real device group):
  // only fsdp's own buffers are refused.
  std::int64_t value = 1;
  group.all_reduce(Kokkos::DefaultHostExecutionSpace(), host_view(&value, 1));
  BOOST_TEST(value == group.size());
}

BOOST_AUTO_TEST_CASE(transport_switches_come_from_the_environment) {
  {
    ScopedEnvironment stage("FSDP_STAGE_HOST_BUFFERS", "1");
    BOOST_TEST(CollectiveOptions::from_environment().stage_host_buffers);
    BOOST_TEST((ProcessGroup(MPI_COMM_WORLD).transport() == Transport::mpi_staged));
  }
  {
    ScopedEnvironment stage("FSDP_STAGE_HOST_BUFFERS", "0");
    BOOST_TEST(!CollectiveOptions::from_environment().stage_host_buffers);
  }
  {
    ScopedEnvironment stage("FSDP_STAGE_HOST_BUFFERS", "sometimes");
    BOOST_TEST(CollectiveOptions::from_environment().environment_error ==
               "FSDP_STAGE_HOST_BUFFERS='sometimes' is not understood; use 1 or 0");
    BOOST_CHECK_EXCEPTION(ProcessGroup(MPI_COMM_WORLD), Error, [](const Error& e) {
      return std::string(e.message())
                 .find("FSDP_STAGE_HOST_BUFFERS='sometimes' is not understood; use 1 or 0") !=
             std::string::npos;
    });
  }
  for (const char* value : {"0", "1"}) {
    ScopedEnvironment aware("FSDP_MPI_CUDA_AWARE", value);
    BOOST_TEST(mpi_is_cuda_aware() == (value[0] == '1'));
  }
  ScopedEnvironment aware("FSDP_MPI_CUDA_AWARE", "yes");
  BOOST_CHECK_THROW(mpi_is_cuda_aware(), Error);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(staged_view_collectives_match_direct_ones, T, AllTypes) {
  ProcessGroup direct = world();
  ProcessGroup staged = staged_world();
  const int n = direct.size();
  const int rank = direct.rank();
  const std::size_t count = 37;
  std::uint64_t expected_bytes = 0;  // staged copies: every send in, every receive back

  {
    auto send = filled<T>("send", count, rank);
    auto want = stale<T>("want", count * n);
    auto got = stale<T>("got", count * n);
    direct.all_gather(ExecutionSpace(), send, want);
    staged.all_gather(ExecutionSpace(), send, got);
    check_same(got, want, "all_gather");
    expected_bytes += (count + count * n) * sizeof(T);
  }
  {
    std::vector<std::size_t> counts(n);
    for (int r = 0; r < n; ++r) {
      counts[r] = static_cast<std::size_t>((r * 3 + 1) % 4) * 5;  // 5, 0, 15, 10
    }
    const std::size_t total = std::accumulate(counts.begin(), counts.end(), std::size_t{0});
    auto send = filled<T>("send", counts[rank], rank);
    auto want = stale<T>("want", total);
    auto got = stale<T>("got", total);
    direct.all_gather_v(ExecutionSpace(), send, want, counts);
    staged.all_gather_v(ExecutionSpace(), send, got, counts);
    check_same(got, want, "all_gather_v");
    expected_bytes += (counts[rank] + total) * sizeof(T);
  }
  {
    auto send = filled<T>("send", count * n, rank);
    auto want = stale<T>("want", count);
    auto got = stale<T>("got", count);
    direct.reduce_scatter(ExecutionSpace(), send, want, ReduceOp::sum);
    staged.reduce_scatter(ExecutionSpace(), send, got, ReduceOp::sum);
    check_same(got, want, "reduce_scatter");
    expected_bytes += (count * n + count) * sizeof(T);
  }
  for (ReduceOp op : {ReduceOp::sum, ReduceOp::max}) {
    auto want = filled<T>("want", count, rank);
    auto got = filled<T>("got", count, rank);
    direct.all_reduce(ExecutionSpace(), want, op);
    staged.all_reduce(ExecutionSpace(), got, op);
    check_same(got, want, "all_reduce");
    expected_bytes += 2 * count * sizeof(T);
  }
  for (int root = 0; root < n; ++root) {
    auto want = filled<T>("want", count, rank);
    auto got = filled<T>("got", count, rank);
    direct.broadcast(ExecutionSpace(), want, root);
    staged.broadcast(ExecutionSpace(), got, root);
    check_same(got, want, "broadcast");
    expected_bytes += count * sizeof(T);  // out of the root, or back into the others
  }
  for (int root = 0; root < n; ++root) {
    auto send = filled<T>("send", count, rank);
    auto want = stale<T>("want", count);
    auto got = stale<T>("got", count);
    direct.reduce(ExecutionSpace(), send, want, ReduceOp::sum, root);
    staged.reduce(ExecutionSpace(), send, got, ReduceOp::sum, root);
    check_same(got, want, "reduce");  // and untouched off the root
    expected_bytes += (count + (rank == root ? count : 0)) * sizeof(T);
  }
  {
    std::vector<std::size_t> counts(n);
    for (int r = 0; r < n; ++r) {
      counts[r] = static_cast<std::size_t>((r * 3 + 1) % 4) * 5;  // 5, 0, 15, 10
    }
    const std::size_t total = std::accumulate(counts.begin(), counts.end(), std::size_t{0});
    const int root = n - 1;
    auto send = filled<T>("send", rank == root ? total : 0, rank);
    auto want = stale<T>("want", counts[rank]);
    auto got = stale<T>("got", counts[rank]);
    direct.scatter_v(ExecutionSpace(), send, counts, want, root);
    staged.scatter_v(ExecutionSpace(), send, counts, got, root);
    check_same(got, want, "scatter_v");
    expected_bytes += ((rank == root ? total : 0) + counts[rank]) * sizeof(T);
  }
  BOOST_TEST(staged.staged_bytes() == expected_bytes);
  BOOST_TEST(direct.staged_bytes() == 0u);
}

BOOST_AUTO_TEST_CASE(staged_async_results_are_in_place_when_test_or_wait_reports_completion) {
  ProcessGroup group = staged_world();
  const int n = group.size();
  const int rank = group.rank();
  const std::size_t count = 1 << 12;
  const std::vector<std::size_t> counts(n, count);
  for (const bool by_test : {true, false}) {
    auto send = filled<float>("send", count, rank);
    auto gathered = stale<float>("gathered", count * n);
    auto gathered_v = stale<float>("gathered_v", count * n);
    auto scattered = stale<float>("scattered", count);
    auto reduced = filled<float>("reduced", count, rank);
    auto broadcast = filled<float>("broadcast", count, rank);
    auto wide = filled<float>("wide", count * n, rank);
    std::vector<Work> works;
    works.push_back(group.all_gather_async(ExecutionSpace(), send, gathered));
    works.push_back(group.all_gather_v_async(ExecutionSpace(), send, gathered_v, counts));
    works.push_back(group.reduce_scatter_async(ExecutionSpace(), wide, scattered, ReduceOp::sum));
    works.push_back(group.all_reduce_async(ExecutionSpace(), reduced, ReduceOp::sum));
    works.push_back(group.broadcast_async(ExecutionSpace(), broadcast, n - 1));
    if (by_test) {
      // Results are read as soon as test() says so, without any wait().
      for (bool all = false; !all;) {
        all = true;
        for (Work& work : works) {
          all = work.test() && all;
        }
      }
    } else {
      wait_all(works);
    }
    for (int r = 0; r < n; ++r) {
      for (std::size_t i = 0; i < count; i += 97) {
        BOOST_TEST(gathered(r * count + i) == value_of(r, i));
        BOOST_TEST(gathered_v(r * count + i) == value_of(r, i));
      }
    }
    for (std::size_t i = 0; i < count; i += 97) {
      double column = 0, sum = 0;
      for (int r = 0; r < n; ++r) {
        column += value_of(r, rank * count + i);
        sum += value_of(r, i);
      }
      BOOST_TEST(scattered(i) == column);
      BOOST_TEST(reduced(i) == sum);
      BOOST_TEST(broadcast(i) == value_of(n - 1, i));
    }
  }
}

BOOST_AUTO_TEST_CASE(view_collectives_take_the_instance_that_wrote_the_views) {
  // The instance is the last argument of every View form, blocking and async, staged or not.
  for (ProcessGroup group : {world(), staged_world()}) {
    const int n = group.size();
    const Kokkos::DefaultHostExecutionSpace instance;
    HostView<double> send("send", 8);
    const int rank = group.rank();
    Kokkos::parallel_for("fill",
                         Kokkos::RangePolicy<Kokkos::DefaultHostExecutionSpace>(instance, 0, 8),
                         [=](int i) { send(i) = rank + i; });
    HostView<double> recv("recv", 8 * n);
    group.all_gather(instance, send, recv);
    BOOST_TEST(recv(8 * (n - 1) + 3) == n - 1 + 3);
    group.all_gather_v(instance, send, recv, std::vector<std::size_t>(n, 8));
    BOOST_TEST(recv(8 * (n - 1) + 3) == n - 1 + 3);
    group.reduce_scatter(instance, recv, send, ReduceOp::max);  // every rank's recv is the same
    BOOST_TEST(send(3) == group.rank() + 3);
    group.all_reduce(instance, send, ReduceOp::sum);
    const double sum = n * (n - 1) / 2 + 3 * n;
    BOOST_TEST(send(3) == sum);
    group.broadcast_async(instance, send, 0).wait();
    group.all_reduce_async(instance, send, ReduceOp::min).wait();
    BOOST_TEST(send(3) == sum);
  }
}

BOOST_AUTO_TEST_CASE(a_batch_runs_its_collectives_and_reports_failures) {
  ProcessGroup group = world();
  const int n = group.size();
  auto send = filled<float>("send", 16, group.rank());
  auto recv = stale<float>("recv", 16 * n);
  auto sum = filled<float>("sum", 16, group.rank());
  std::vector<Work> works;
  group.batch([&] {
    works.push_back(group.all_gather_async(ExecutionSpace(), send, recv));
    works.push_back(group.all_reduce_async(ExecutionSpace(), sum, ReduceOp::sum));
  });
  wait_all(works);
  double expected = 0;
  for (int r = 0; r < n; ++r) {
    BOOST_TEST(recv(r * 16 + 5) == value_of(r, 5));
    expected += value_of(r, 5);
  }
  BOOST_TEST(sum(5) == expected);
  BOOST_CHECK_THROW(group.batch([] { throw Error("inside the batch"); }), Error);
  group.barrier();  // still usable
}

// More collectives in flight than signature checks may be: rank 0 issues 600 all-reduces while
// the other ranks have not started (they sleep first), so its checks pile up unanswered and
// finish out of step with the other ranks'. Every collective must still start in issue order on
// every rank (a rank that started them as their checks finished got wrong sums and crashed), and
// issuing the 256th waits for the oldest check (CollectiveGuard::kChecksInFlight).
BOOST_AUTO_TEST_CASE(more_collectives_in_flight_than_checks) {
  CollectiveOptions options;
  options.check_arguments = true;
  options.timeout_s = 60;
  ProcessGroup group(MPI_COMM_WORLD, options);
  const int n = group.size();
  if (group.rank() != 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  constexpr std::size_t kOperations = 600;
  std::vector<std::int64_t> values(kOperations);
  std::vector<Work> works;
  for (std::size_t i = 0; i < kOperations; ++i) {
    values[i] = group.rank() + static_cast<std::int64_t>(i);
    works.push_back(detail::PointerCollectives(group).all_reduce_async(&values[i], &values[i], 1,
                                                                       DType::i64, ReduceOp::sum));
  }
  wait_all(works);
  for (std::size_t i = 0; i < kOperations; ++i) {
    BOOST_TEST(values[i] == n * static_cast<std::int64_t>(i) + n * (n - 1) / 2);
  }
}

// Checksums add modulo 2^64 (a checkpoint's element sums): every rank's 2^64 - 1 - rank and
// 2^63 + rank wrap, whatever the number of ranks, and come out as the unsigned sum in C++.
BOOST_AUTO_TEST_CASE(wrapping_sums_add_modulo_two_to_the_64) {
  ProcessGroup group = world();
  const auto rank = static_cast<std::uint64_t>(group.rank());
  std::vector<std::uint64_t> sums = {~std::uint64_t{0} - rank, (std::uint64_t{1} << 63) + rank, 7};
  all_reduce_wrapping_sums(group, sums.data(), sums.size());
  std::vector<std::uint64_t> expected(3, 0);
  for (std::uint64_t r = 0; r < static_cast<std::uint64_t>(group.size()); ++r) {
    expected[0] += ~std::uint64_t{0} - r;
    expected[1] += (std::uint64_t{1} << 63) + r;
    expected[2] += 7;
  }
  BOOST_TEST(sums == expected, boost::test_tools::per_element());
}

// On 2 ranks a reduce_scatter of up to 1 MiB per rank goes by exchange and adds on the host
// (block_exchange.hpp): its sums must be MPI's to the bit, for values whose sums round, the
// 16-bit types' too (MPI adds those with fsdp's own operators), and for int32 sums that wrap; at
// 4 KB per rank and at 256 KiB of fp32 per rank.
BOOST_AUTO_TEST_CASE(reduce_scatters_on_two_ranks_add_as_mpi_does) {
  ProcessGroup group = world();
  if (group.size() != 2) {
    return;
  }
  const int rank = group.rank();
  for (const std::size_t count : {std::size_t{1000}, std::size_t{65536}}) {
    std::vector<float> f32(2 * count), f32_group(count), f32_mpi(count);
    std::vector<double> f64(2 * count), f64_group(count), f64_mpi(count);
    std::vector<std::int32_t> i32(2 * count), i32_group(count), i32_mpi(count);
    std::vector<bfloat16> b16(2 * count), b16_group(count);
    std::vector<float16> h16(2 * count), h16_group(count);
    for (std::size_t i = 0; i < 2 * count; ++i) {
      const double x = std::sin(1.0 + static_cast<double>(i) * (rank + 1.37)) * 1e3;
      f32[i] = static_cast<float>(x);
      f64[i] = x / 3;
      i32[i] = 1100000000 + static_cast<std::int32_t>(i) * (rank + 1);  // the sums wrap
      b16[i] = to_bfloat16(static_cast<float>(x));
      h16[i] = to_float16(static_cast<float>(x) / 8);
    }
    detail::PointerCollectives(group).reduce_scatter(f32.data(), f32_group.data(), count,
                                                     DType::f32, ReduceOp::sum);
    detail::PointerCollectives(group).reduce_scatter(f64.data(), f64_group.data(), count,
                                                     DType::f64, ReduceOp::avg);
    detail::PointerCollectives(group).reduce_scatter(i32.data(), i32_group.data(), count,
                                                     DType::i32, ReduceOp::sum);
    detail::PointerCollectives(group).reduce_scatter(b16.data(), b16_group.data(), count,
                                                     DType::bf16, ReduceOp::sum);
    detail::PointerCollectives(group).reduce_scatter(h16.data(), h16_group.data(), count,
                                                     DType::f16, ReduceOp::sum);
    BOOST_REQUIRE(MPI_Reduce_scatter_block(f32.data(), f32_mpi.data(), static_cast<int>(count),
                                           MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD) == MPI_SUCCESS);
    BOOST_REQUIRE(MPI_Reduce_scatter_block(f64.data(), f64_mpi.data(), static_cast<int>(count),
                                           MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD) == MPI_SUCCESS);
    BOOST_REQUIRE(MPI_Reduce_scatter_block(i32.data(), i32_mpi.data(), static_cast<int>(count),
                                           MPI_INT32_T, MPI_SUM, MPI_COMM_WORLD) == MPI_SUCCESS);
    std::size_t differ = 0;
    for (std::size_t i = 0; i < count; ++i) {
      const std::size_t mine = static_cast<std::size_t>(rank) * count + i;
      // The other rank's values, as it made them.
      const double y = std::sin(1.0 + static_cast<double>(mine) * (1 - rank + 1.37)) * 1e3;
      const float b16_sum = to_float(b16[mine]) + to_float(to_bfloat16(static_cast<float>(y)));
      const float h16_sum = to_float(h16[mine]) + to_float(to_float16(static_cast<float>(y) / 8));
      differ += f32_group[i] != f32_mpi[i];
      differ += f64_group[i] != f64_mpi[i] / 2;
      differ += i32_group[i] != i32_mpi[i];
      differ += to_float(b16_group[i]) != to_float(to_bfloat16(b16_sum));
      differ += to_float(h16_group[i]) != to_float(to_float16(h16_sum));
    }
    BOOST_TEST(differ == 0u);
  }
}
