// The GEMM rate this process reaches: the peak that model FLOP utilisation (MFU) is measured
// against on a host, measured in the same run rather than taken from a data sheet, since what a
// core delivers depends on the BLAS, the clock and what else runs on the machine.
#pragma once

#include <cstdint>
#include <memory>

#include "models/gemm.hpp"
#include "models/half_parameter.hpp"

namespace fsdp_models {

struct GemmRate {
  std::int64_t size = 0;   // n of the n x n x n product timed
  int repeats = 0;         // products timed
  double flops_per_s = 0;  // the best of them
  double flops = 0;        // all of them: repeats x 2 n^3
  double seconds = 0;      // all of them, back to back
};

// Products C = A * B of n x n matrices of T (float or double) through fsdp_models::gemm, on
// matrices allocated and filled once, when the timer is made: ranks that share cores and
// measure at once should make their timers, pass a barrier, time(), pass a barrier, and divide
// their flops added up by the wall time between the barriers. Their best rates, or their own
// times, may come from moments when a rank had a core alone, and would add up to more than the
// cores deliver; and the wall time must not include making the matrices, which took 47 of
// 113 ms on 2 ranks here.
template <class T>
class GemmTimer {
 public:
  // bf16_weights: B is a bfloat16 weight multiplied through weight_gemm, as the models multiply
  // bf16 parameters (models/half_parameter.hpp): oneDNN's bf16 matmul where it runs, for T float.
  explicit GemmTimer(std::int64_t n = 1024, bool bf16_weights = false);
  // Times `repeats` products back to back, after one untimed warm-up product unless warm_up is
  // false.
  GemmRate time(int repeats = 5, bool warm_up = true);

 private:
  std::int64_t n_;
  Matrix<T> a_, b_, c_;
  bool bf16_weights_ = false;
  fsdp::DeviceView<std::uint16_t> b16_;
  std::unique_ptr<WideningScratch<T>> scratch_;
};

}  // namespace fsdp_models
