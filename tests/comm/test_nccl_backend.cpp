// The NCCL backend. Built whenever NCCL is found; its collectives run only where every rank has a
// CUDA device of its own, and each result is checked against values every rank computes for every
// other rank (small integers, exact in fp32 and bf16). A build without NCCL checks instead what
// such a build offers.
#include <boost/test/unit_test.hpp>
#include <string>
#include <type_traits>

#include "fsdp/comm/process_group.hpp"
#include "fsdp/core/memory_space.hpp"
#include "pointer_collectives.hpp"

#ifdef FSDP_HAVE_NCCL
#include <cuda_runtime.h>

#include <algorithm>
#include <boost/mpl/list.hpp>
#include <cmath>
#include <numeric>
#include <stdexcept>
#include <vector>

#include "error_message.hpp"
#include "test_values.hpp"

using namespace fsdp;
using fsdp::test::as_double;
using fsdp::test::make;
using fsdp::test::value_of;

namespace {

// fp32, and a 16-bit type that NCCL reduces in its own kernels.
using NcclTypes = boost::mpl::list<float, bfloat16>;

void check_cuda(cudaError_t rc, const char* what) {
  if (rc != cudaSuccess) {
    throw std::runtime_error(std::string(what) + " failed: " + cudaGetErrorString(rc));
  }
}

void check_mpi(int rc, const char* what) {
  if (rc != MPI_SUCCESS) {
    throw std::runtime_error(std::string(what) + " failed with MPI error " + std::to_string(rc));
  }
}

// This rank's index among the ranks of its node: the device it uses.
int node_rank_and_size(int& node_size) {
  MPI_Comm node = MPI_COMM_NULL;
  check_mpi(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node),
            "MPI_Comm_split_type");
  int node_rank = 0;
  check_mpi(MPI_Comm_rank(node, &node_rank), "MPI_Comm_rank");
  check_mpi(MPI_Comm_size(node, &node_size), "MPI_Comm_size");
  check_mpi(MPI_Comm_free(&node), "MPI_Comm_free");
  return node_rank;
}

// NCCL refuses two ranks on one device, so every rank of a node needs its own. Collective: every
// rank evaluates it and all get the same answer, so all run the suite or all skip it.
boost::test_tools::assertion_result device_for_every_rank(boost::unit_test::test_unit_id) {
  int devices = 0;
  const cudaError_t rc = cudaGetDeviceCount(&devices);
  if (rc != cudaSuccess) {
    devices = 0;
  }
  int node_size = 1;
  node_rank_and_size(node_size);
  int enough = devices >= node_size ? 1 : 0;
  int everywhere = 0;
  check_mpi(MPI_Allreduce(&enough, &everywhere, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD),
            "MPI_Allreduce");
  boost::test_tools::assertion_result result(everywhere == 1);
  result.message() << "NCCL runtime tests skipped: this rank sees " << devices
                   << " CUDA device(s) (" << cudaGetErrorString(rc) << ") for " << node_size
                   << " rank(s) on its node" << (enough ? ", and another rank has too few" : "");
  return result;
}

// The opposite case: no rank has a device (a CPU node of a build with NCCL).
boost::test_tools::assertion_result no_device_on_any_rank(boost::unit_test::test_unit_id) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess) {
    devices = 0;
  }
  int most = 0;
  check_mpi(MPI_Allreduce(&devices, &most, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD), "MPI_Allreduce");
  boost::test_tools::assertion_result result(most == 0);
  result.message() << "a rank has a CUDA device: the error without one is not tested";
  return result;
}

// Device memory holding a copy of host values; freed with the object.
template <class T>
class DeviceArray {
 public:
  explicit DeviceArray(const std::vector<T>& values) : count_(values.size()) {
    // At least one element, so that an empty array still has a valid address.
    check_cuda(cudaMalloc(&data_, std::max<std::size_t>(count_, 1) * sizeof(T)), "cudaMalloc");
    if (count_ > 0) {
      check_cuda(cudaMemcpy(data_, values.data(), count_ * sizeof(T), cudaMemcpyHostToDevice),
                 "cudaMemcpy to the device");
    }
  }
  ~DeviceArray() { cudaFree(data_); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;

  T* data() const { return data_; }
  // Called after the collective's wait(): the stream's work is done.
  std::vector<T> to_host() const {
    std::vector<T> values(count_);
    if (count_ == 0) {
      return values;
    }
    check_cuda(cudaMemcpy(values.data(), data_, count_ * sizeof(T), cudaMemcpyDeviceToHost),
               "cudaMemcpy to the host");
    return values;
  }

 private:
  std::size_t count_ = 0;
  T* data_ = nullptr;
};

// count elements of value_of(rank, first + i).
template <class T>
std::vector<T> values_of(int rank, std::size_t count, std::size_t first = 0) {
  std::vector<T> values(count);
  for (std::size_t i = 0; i < count; ++i) {
    values[i] = make<T>(value_of(rank, first + i));
  }
  return values;
}

// Sum over ranks of value_of(r, index): exact in every type checked here.
double sum_over_ranks(int ranks, std::size_t index) {
  double sum = 0;
  for (int r = 0; r < ranks; ++r) {
    sum += value_of(r, index);
  }
  return sum;
}

// ReduceOp::avg of value_of(r, index) is (ranks - 1) / 2 + index % 16, exact in fp32 and bf16. NCCL
// may multiply each input by 1/ranks before adding, which rounds where 1/ranks is not a power of
// two: allow the type's rounding there.
template <class T>
bool average_matches(double actual, double expected) {
  const double epsilon = std::is_same_v<T, float> ? 0x1p-23 : 0x1p-8;
  return std::abs(actual - expected) <= 4 * epsilon * std::max(1.0, std::abs(expected));
}

// The per-rank counts of the uneven collectives: different on every rank, none empty.
std::vector<std::size_t> uneven_counts(int ranks) {
  std::vector<std::size_t> counts(static_cast<std::size_t>(ranks));
  for (int r = 0; r < ranks; ++r) {
    counts[static_cast<std::size_t>(r)] = 3 + 2 * static_cast<std::size_t>(r);
  }
  return counts;
}

// Every test case gets its own NCCL group over all ranks, each rank on its own device.
struct NcclGroup {
  NcclGroup() : group(make_group()) {}
  static ProcessGroup make_group() {
    int node_size = 1;
    const int node_rank = node_rank_and_size(node_size);
    check_cuda(cudaSetDevice(node_rank), "cudaSetDevice");
    return ProcessGroup::nccl(MPI_COMM_WORLD);
  }
  ProcessGroup group;
};

}  // namespace

// Every rank fails with the reason, none is left waiting inside NCCL's initialization.
BOOST_AUTO_TEST_CASE(without_a_device_every_rank_fails_with_the_reason,
                     *boost::unit_test::precondition(no_device_on_any_rank)) {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  BOOST_CHECK_EXCEPTION(ProcessGroup::nccl(MPI_COMM_WORLD), Error,
                        fsdp::test::message_has("fsdp: ProcessGroup::nccl: this rank (" +
                                                std::to_string(rank) + ") has no CUDA device"));
}

BOOST_FIXTURE_TEST_SUITE(nccl, NcclGroup, *boost::unit_test::precondition(device_for_every_rank))

BOOST_AUTO_TEST_CASE(group_is_nccl_on_device_memory) {
  int world_rank = 0, world_size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  BOOST_TEST(std::string(group.backend_name()) == "nccl");
  BOOST_TEST((group.memory_kind() == MemoryKind::cuda_device));
  BOOST_TEST(group.rank() == world_rank);
  BOOST_TEST(group.size() == world_size);
}

// Host values (a loss, an overflow flag, agreement words) go as host Views, which the group
// copies through device staging buffers: in before NCCL runs, back once it completed.
BOOST_AUTO_TEST_CASE(host_views_go_through_device_memory) {
  if (kHostAccessible) {
    return;  // a host build of Kokkos has no device memory to stage through
  }
  const int n = group.size();
  const Kokkos::DefaultHostExecutionSpace host;
  double value = group.rank() + 1.0;
  group.all_reduce(host, host_view(&value, 1), ReduceOp::sum);
  BOOST_TEST(value == n * (n + 1) / 2.0);
  std::int64_t words[3] = {group.rank(), 7, -1};
  group.broadcast(host, host_view(words, 3), n - 1);
  BOOST_TEST(words[0] == n - 1);
  BOOST_TEST(words[2] == -1);
  // The all_reduce's 8 bytes in and back; the broadcast's 24 out of the root or into the others.
  BOOST_TEST(group.staged_bytes() == 16u + 24u);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(all_gather, T, NcclTypes) {
  const int n = group.size();
  const std::size_t count = 1000;
  DeviceArray<T> send(values_of<T>(group.rank(), count));
  DeviceArray<T> recv(std::vector<T>(count * n, make<T>(-1)));
  detail::PointerCollectives(group).all_gather(send.data(), recv.data(), count);
  const std::vector<T> result = recv.to_host();
  for (int r = 0; r < n; ++r) {
    for (std::size_t i = 0; i < count; ++i) {
      BOOST_TEST_CONTEXT("rank " << r << " element " << i) {
        BOOST_TEST(as_double(result[r * count + i]) == value_of(r, i));
      }
    }
  }
}

BOOST_AUTO_TEST_CASE_TEMPLATE(all_gather_v_uneven, T, NcclTypes) {
  const int n = group.size();
  const std::vector<std::size_t> counts = uneven_counts(n);
  const std::size_t total = std::accumulate(counts.begin(), counts.end(), std::size_t{0});
  const std::size_t mine = counts[static_cast<std::size_t>(group.rank())];
  DeviceArray<T> send(values_of<T>(group.rank(), mine));
  DeviceArray<T> recv(std::vector<T>(total, make<T>(-1)));
  detail::PointerCollectives(group).all_gather_v(send.data(), mine, recv.data(), counts);
  const std::vector<T> result = recv.to_host();
  std::size_t offset = 0;
  for (int r = 0; r < n; ++r) {
    for (std::size_t i = 0; i < counts[static_cast<std::size_t>(r)]; ++i) {
      BOOST_TEST_CONTEXT("rank " << r << " element " << i) {
        BOOST_TEST(as_double(result[offset + i]) == value_of(r, i));
      }
    }
    offset += counts[static_cast<std::size_t>(r)];
  }
}

BOOST_AUTO_TEST_CASE_TEMPLATE(reduce_scatter_sum_and_avg, T, NcclTypes) {
  const int n = group.size();
  const std::size_t count = 37;
  for (ReduceOp op : {ReduceOp::sum, ReduceOp::avg}) {
    DeviceArray<T> send(values_of<T>(group.rank(), count * n));
    DeviceArray<T> recv(std::vector<T>(count, make<T>(-1)));
    detail::PointerCollectives(group).reduce_scatter(send.data(), recv.data(), count, op);
    const std::vector<T> result = recv.to_host();
    for (std::size_t i = 0; i < count; ++i) {
      // This rank's block of the reduced array starts at rank() * count.
      const double sum = sum_over_ranks(n, group.rank() * count + i);
      if (op == ReduceOp::sum) {
        BOOST_TEST_CONTEXT("sum element " << i) {
          BOOST_TEST(as_double(result[i]) == sum);
        }
      } else {
        BOOST_TEST(average_matches<T>(as_double(result[i]), sum / n),
                   "avg element " << i << ": " << as_double(result[i]) << " != " << sum / n);
      }
    }
  }
}

BOOST_AUTO_TEST_CASE_TEMPLATE(all_reduce_every_op, T, NcclTypes) {
  const int n = group.size();
  const std::size_t count = 100;
  for (ReduceOp op : {ReduceOp::sum, ReduceOp::avg, ReduceOp::max, ReduceOp::min}) {
    // Out of place: the input must come back untouched.
    DeviceArray<T> send(values_of<T>(group.rank(), count));
    DeviceArray<T> recv(std::vector<T>(count, make<T>(-1)));
    detail::PointerCollectives(group).all_reduce(send.data(), recv.data(), count, dtype_of<T>(),
                                                 op);
    const std::vector<T> result = recv.to_host();
    const std::vector<T> input = send.to_host();
    for (std::size_t i = 0; i < count; ++i) {
      const double sum = sum_over_ranks(n, i);
      const double actual = as_double(result[i]);
      if (op == ReduceOp::sum) {
        BOOST_TEST_CONTEXT("sum element " << i) {
          BOOST_TEST(actual == sum);
        }
      } else if (op == ReduceOp::avg) {
        BOOST_TEST(average_matches<T>(actual, sum / n),
                   "avg element " << i << ": " << actual << " != " << sum / n);
      } else {
        // value_of grows with the rank: the largest is the last rank's, the smallest rank 0's.
        const double expected = op == ReduceOp::max ? value_of(n - 1, i) : value_of(0, i);
        BOOST_TEST_CONTEXT(name_of(op) << " element " << i) {
          BOOST_TEST(actual == expected);
        }
      }
      BOOST_TEST_CONTEXT("input element " << i) {
        BOOST_TEST(as_double(input[i]) == value_of(group.rank(), i));
      }
    }
  }
  // In place, through the typed form.
  DeviceArray<T> data(values_of<T>(group.rank(), count));
  detail::PointerCollectives(group).all_reduce(data.data(), count, ReduceOp::sum);
  const std::vector<T> result = data.to_host();
  for (std::size_t i = 0; i < count; ++i) {
    BOOST_TEST_CONTEXT("in place element " << i) {
      BOOST_TEST(as_double(result[i]) == sum_over_ranks(n, i));
    }
  }
}

BOOST_AUTO_TEST_CASE_TEMPLATE(broadcast_from_every_root, T, NcclTypes) {
  const std::size_t count = 33;
  for (int root = 0; root < group.size(); ++root) {
    DeviceArray<T> data(values_of<T>(group.rank(), count));
    detail::PointerCollectives(group).broadcast(data.data(), count, root);
    const std::vector<T> result = data.to_host();
    for (std::size_t i = 0; i < count; ++i) {
      BOOST_TEST_CONTEXT("root " << root << " element " << i) {
        BOOST_TEST(as_double(result[i]) == value_of(root, i));
      }
    }
  }
}

BOOST_AUTO_TEST_CASE_TEMPLATE(reduce_to_every_root, T, NcclTypes) {
  const int n = group.size();
  const std::size_t count = 21;
  for (int root = 0; root < n; ++root) {
    DeviceArray<T> send(values_of<T>(group.rank(), count));
    DeviceArray<T> recv(std::vector<T>(count, make<T>(-1)));
    detail::PointerCollectives(group).reduce(send.data(), recv.data(), count, ReduceOp::sum, root);
    const std::vector<T> result = recv.to_host();
    for (std::size_t i = 0; i < count; ++i) {
      // Only the root receives; elsewhere recv is untouched.
      const double expected = group.rank() == root ? sum_over_ranks(n, i) : -1.0;
      BOOST_TEST_CONTEXT("root " << root << " element " << i) {
        BOOST_TEST(as_double(result[i]) == expected);
      }
    }
  }
}

BOOST_AUTO_TEST_CASE_TEMPLATE(scatter_v_uneven_from_every_root, T, NcclTypes) {
  const int n = group.size();
  const std::vector<std::size_t> counts = uneven_counts(n);
  const std::size_t mine = counts[static_cast<std::size_t>(group.rank())];
  for (int root = 0; root < n; ++root) {
    // The root's send buffer: rank r's block holds value_of(r, i) + root.
    std::vector<T> blocks;
    if (group.rank() == root) {
      for (int r = 0; r < n; ++r) {
        for (std::size_t i = 0; i < counts[static_cast<std::size_t>(r)]; ++i) {
          blocks.push_back(make<T>(value_of(r, i) + root));
        }
      }
    }
    DeviceArray<T> send(blocks);
    DeviceArray<T> recv(std::vector<T>(mine, make<T>(-1)));
    detail::PointerCollectives(group).scatter_v(send.data(), counts, recv.data(), mine, root);
    const std::vector<T> result = recv.to_host();
    for (std::size_t i = 0; i < mine; ++i) {
      BOOST_TEST_CONTEXT("root " << root << " element " << i) {
        BOOST_TEST(as_double(result[i]) == value_of(group.rank(), i) + root);
      }
    }
  }
}

BOOST_AUTO_TEST_SUITE_END()

#else

namespace {

// Whether G declares a static nccl(MPI_Comm) factory.
template <class G, class = void>
struct declares_nccl_factory : std::false_type {};
template <class G>
struct declares_nccl_factory<G, std::void_t<decltype(G::nccl(MPI_COMM_WORLD))> > : std::true_type {
};

}  // namespace

// Without NCCL (FSDP_ENABLE_NCCL=OFF, or AUTO where NCCL was not found) the library has no NCCL
// factory: code that asks for an NCCL group does not compile against this build, instead of
// failing when it runs. MPI groups are all there is, on host memory.
BOOST_AUTO_TEST_CASE(nccl_backend_not_built) {
  BOOST_TEST(!declares_nccl_factory<fsdp::ProcessGroup>::value,
             "ProcessGroup::nccl is declared in a build without NCCL");
  fsdp::ProcessGroup group(MPI_COMM_WORLD);
  BOOST_TEST(std::string(group.backend_name()) == "mpi");
  BOOST_TEST((group.memory_kind() == fsdp::MemoryKind::host));
}

#endif
