// Every collective of the MPI ProcessGroup against values each rank computes on its own, for all
// dtypes, at uneven sizes including zero elements on some ranks.
#include <boost/mpl/list.hpp>
#include <boost/test/unit_test.hpp>
#include <numeric>
#include <vector>

#include "fsdp/comm/process_group.hpp"
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
    group.all_gather(send, recv);
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
  group.all_gather_v(send.data(), send.size(), recv.data(), counts);
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
    group.reduce_scatter(send, recv, ReduceOp::sum);
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
  group.reduce_scatter(send.data(), recv.data(), count, ReduceOp::avg);
  for (std::size_t i = 0; i < count; ++i) {
    double sum = 0;
    for (int r = 0; r < n; ++r) {
      sum += value_of(r, group.rank() * count + i);
    }
    // sum / n with n <= 4 and small sums is exact in every float type (a multiple of 1/4 < 32).
    BOOST_TEST(as_double(recv[i]) == sum / n);
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
    group.all_reduce(data, op);
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
  group.all_reduce(send.data(), recv.data(), send.size(), DType::f64, ReduceOp::avg);
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
    group.broadcast(data, root);
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
    group.reduce(send.data(), recv.data(), count, ReduceOp::sum, root);
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
  group.reduce(data.data(), data.data(), data.size(), DType::f64, ReduceOp::avg, 0);
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
  group.scatter_v(send.data(), counts, recv.data(), recv.size(), root);
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
  group.all_gather(send, recv);
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
  BOOST_CHECK_EXCEPTION(group.all_gather(column, recv), Error, [](const Error& e) {
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
  works.push_back(group.all_gather_async(send, gathered));
  works.push_back(group.all_reduce_async(reduced, ReduceOp::sum));
  works.push_back(group.reduce_scatter_async(scattered_in, scattered, ReduceOp::avg));
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

BOOST_AUTO_TEST_CASE(barrier_and_default_work) {
  ProcessGroup group = world();
  group.barrier();
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
  half.all_reduce(&sum, 1);
  std::int64_t expected = 0;
  for (int r = group.rank() % 2; r < n; r += 2) {
    expected += r;
  }
  BOOST_TEST(sum == expected);

  ProcessGroup node = group.node_local();  // one node here: every rank
  BOOST_TEST(node.size() == n);
  BOOST_CHECK_THROW(group.split(-1, 0), Error);
}
