#include "fsdp/io/tensor_checksum.hpp"

namespace fsdp {
namespace {

// The checksum's three 64-bit multiplications per element bound it by arithmetic, not by memory:
// summing 2^26 floats (Emerald Rapids VM) took 1.8 GB/s scalar, 2.8 vectorized with SSE2, 2.5
// with AVX2 (which has no wider 64-bit multiply) and 3.6 with AVX-512F. GCC compiles a clone for
// AVX-512F and one for the baseline, and the loader picks one for the CPU (an ifunc).
#if defined(__GNUC__) && !defined(__clang__) && !defined(__CUDACC__) && !defined(__HIPCC__) && \
    defined(__x86_64__) && defined(__ELF__)
#define FSDP_CHECKSUM_CLONES __attribute__((target_clones("avx512f", "default")))
#else
#define FSDP_CHECKSUM_CLONES
#endif

template <class T>
std::uint64_t sum_terms(const T* values, std::int64_t count, std::int64_t first) {
  std::uint64_t sum = 0;
  for (std::int64_t i = 0; i < count; ++i) {
    sum += checksum_term<T>(first + i, values[i]);
  }
  return sum;
}

FSDP_CHECKSUM_CLONES
std::uint64_t sum_float_terms(const float* values, std::int64_t count, std::int64_t first) {
  return sum_terms(values, count, first);
}

FSDP_CHECKSUM_CLONES
std::uint64_t sum_double_terms(const double* values, std::int64_t count, std::int64_t first) {
  return sum_terms(values, count, first);
}

}  // namespace

std::uint64_t host_checksum(const float* values, std::int64_t count, std::int64_t first) {
  return sum_float_terms(values, count, first);
}

std::uint64_t host_checksum(const double* values, std::int64_t count, std::int64_t first) {
  return sum_double_terms(values, count, first);
}

}  // namespace fsdp
