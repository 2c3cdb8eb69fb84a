// The NCCL backend: built whenever NCCL is found, run only where a CUDA device is present.
#include <boost/test/unit_test.hpp>

#include "fsdp/comm/process_group.hpp"

#ifdef FSDP_HAVE_NCCL
#include <cuda_runtime.h>

#include <vector>

namespace {

boost::test_tools::assertion_result has_gpu(boost::unit_test::test_unit_id) {
  int devices = 0;
  const cudaError_t rc = cudaGetDeviceCount(&devices);
  boost::test_tools::assertion_result result(rc == cudaSuccess && devices > 0);
  result.message() << "no CUDA device (" << cudaGetErrorString(rc)
                   << "): NCCL runtime tests skipped";
  return result;
}

}  // namespace

BOOST_AUTO_TEST_CASE(nccl_collectives_on_one_gpu, *boost::unit_test::precondition(has_gpu)) {
  fsdp::ProcessGroup group = fsdp::ProcessGroup::nccl(MPI_COMM_WORLD);
  BOOST_TEST(std::string(group.backend_name()) == "nccl");
  const std::size_t count = 1000;
  float* send = nullptr;
  float* recv = nullptr;
  BOOST_REQUIRE(cudaMalloc(&send, count * sizeof(float)) == cudaSuccess);
  BOOST_REQUIRE(cudaMalloc(&recv, count * group.size() * sizeof(float)) == cudaSuccess);
  std::vector<float> host(count);
  for (std::size_t i = 0; i < count; ++i) {
    host[i] = static_cast<float>(group.rank() * 1000 + i);
  }
  BOOST_REQUIRE(cudaMemcpy(send, host.data(), count * sizeof(float), cudaMemcpyHostToDevice) ==
                cudaSuccess);
  group.all_gather(send, recv, count);
  std::vector<float> back(count * group.size());
  BOOST_REQUIRE(cudaMemcpy(back.data(), recv, back.size() * sizeof(float),
                           cudaMemcpyDeviceToHost) == cudaSuccess);
  for (int r = 0; r < group.size(); ++r) {
    BOOST_TEST(back[r * count + 17] == static_cast<float>(r * 1000 + 17));
  }
  group.all_reduce(send, count, fsdp::ReduceOp::avg);
  group.barrier();
  cudaFree(send);
  cudaFree(recv);
}

#else

BOOST_AUTO_TEST_CASE(nccl_backend_not_built) {
  BOOST_TEST_MESSAGE("fsdp was configured without NCCL (FSDP_ENABLE_NCCL): nothing to test");
}

#endif
