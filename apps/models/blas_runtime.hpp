// The BLAS the models' matrix products run on, as the process found it at run time: which library
// provides the GEMM, and how many threads it may use.
#pragma once

#include <string>

namespace fsdp_models {

// One line naming the library that provides sgemm_ (the file libblas.so.3 resolved to) and, for
// OpenBLAS, its build configuration and thread count; "cuBLAS ..." is not reported here.
std::string blas_description();

// Under MPI every rank is one process per core: a BLAS that starts a thread per core in every
// rank oversubscribes the node. Limits OpenBLAS to `threads` per process unless the user set
// OPENBLAS_NUM_THREADS (or OMP_NUM_THREADS) explicitly. Returns the thread count in effect, or 0
// when the BLAS is not OpenBLAS (the reference BLAS is single-threaded).
int limit_blas_threads(int threads);

}  // namespace fsdp_models
