// The GEMM rate this process reaches: the peak that model FLOP utilisation (MFU) is measured
// against on a host, measured in the same run rather than taken from a data sheet, since what a
// core delivers depends on the BLAS, the clock and what else runs on the machine.
#pragma once

#include <cstdint>

namespace fsdp_models {

struct GemmRate {
  std::int64_t size = 0;   // n of the n x n x n product timed
  int repeats = 0;         // products timed
  double flops_per_s = 0;  // the best of them
  double flops = 0;        // all of them: repeats x 2 n^3
  double seconds = 0;      // all of them, back to back
};

// Times `repeats` products C = A * B of n x n matrices of T through fsdp_models::gemm, after one
// untimed warm-up product unless warm_up is false. T is float or double. Ranks that share cores
// and measure at once should add their flops and divide by the wall time from a barrier before
// to a barrier after: their best rates, or their own times, may come from moments when a rank
// had a core alone, and would add up to more than the cores deliver.
template <class T>
GemmRate measure_gemm_rate(std::int64_t n = 1024, int repeats = 5, bool warm_up = true);

}  // namespace fsdp_models
