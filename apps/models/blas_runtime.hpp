// The BLAS the models' matrix products run on, as the process found it at run time: which library
// provides the GEMM, and how many threads it may use.
#pragma once

#include <string>

namespace fsdp_models {

// One line naming the library that provides sgemm_ (the file libblas.so.3 resolved to) and, for
// OpenBLAS, its build configuration and thread count; "cuBLAS ..." is not reported here.
std::string blas_description();

// How the models multiply by 16-bit parameters (models/half_parameter.hpp): bf16 ones by oneDNN's
// bf16 matmul, naming its kernels, where it runs (models/onednn_gemm.hpp), else widened into fp32
// GEMMs, saying why not and whether the BLAS has a bf16 GEMM (OpenBLAS's cblas_sbgemm, present
// only when OpenBLAS was built with BUILD_BFLOAT16; Debian 12's is not).
std::string half_gemm_description();

// OpenBLAS built for many CPUs (Debian's, DYNAMIC_ARCH) picks its kernels by the CPU model when it
// loads, and a model newer than the library falls back to its SSE3 kernels, "Prescott": on an
// Emerald Rapids core (Intel family 6 model 207) Debian 12's OpenBLAS 0.3.21 multiplies fp32 at
// 31 GFLOP/s instead of 146. When OpenBLAS fell back so on a CPU with AVX2 and FMA, and the user
// did not choose kernels (OPENBLAS_CORETYPE), picks what OpenBLAS picks for the CPUs it knows
// with the same instructions: Cooperlake with AVX-512 BF16, SkylakeX with AVX-512, Haswell with
// AVX2 and FMA. Call before the first BLAS call; the first call chooses, later ones return its
// answer. Returns what it did, which blas_description() also says once it ran ("" when nothing:
// not OpenBLAS, not fallen back, or chosen by the user). Describing the BLAS never chooses.
std::string choose_blas_kernels();

// The kernels OpenBLAS runs ("Haswell", "SkylakeX", ...); "" when the BLAS is not OpenBLAS.
std::string blas_kernels();

// Under MPI every rank is one process per core: a BLAS that starts a thread per core in every
// rank oversubscribes the node. Limits OpenBLAS to `threads` per process unless the user set
// OPENBLAS_NUM_THREADS (or OMP_NUM_THREADS) explicitly, and oneDNN's OpenMP threads likewise
// (limit_onednn_threads). Returns OpenBLAS's thread count in effect, or 0 when the BLAS is not
// OpenBLAS (the reference BLAS is single-threaded).
int limit_blas_threads(int threads);

}  // namespace fsdp_models
