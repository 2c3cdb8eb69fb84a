// The GEMM rate this process reaches: the peak that model FLOP utilisation (MFU) is measured
// against on a host, measured in the same run rather than taken from a data sheet, since what a
// core delivers depends on the BLAS, the clock and what else runs on the machine.
#pragma once

#include <cstdint>

namespace fsdp_models {

struct GemmRate {
  std::int64_t size = 0;  // n of the n x n x n product timed
  int repeats = 0;        // products timed; the rate is the best of them
  double flops_per_s = 0;
};

// Times `repeats` products C = A * B of n x n matrices of T through fsdp_models::gemm (after one
// untimed warm-up) and returns the best rate, 2 n^3 / seconds. T is float or double.
template <class T>
GemmRate measure_gemm_rate(std::int64_t n = 1024, int repeats = 5);

}  // namespace fsdp_models
