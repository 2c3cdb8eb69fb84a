// Matrix products by bfloat16 weights in 16 bits: oneDNN's bf16 matmul (AMX or AVX-512 BF16
// kernels, accumulating in fp32), where the CPU has them and fsdp was built with oneDNN. The
// host BLAS has no bf16 GEMM here (Debian 12's OpenBLAS is built without cblas_sbgemm), and on an
// Emerald Rapids core oneDNN's AMX matmul multiplies 3 to 4 times as fast as OpenBLAS's fp32 GEMM
// (docs/performance.md, "Matrix products"). weight_gemm (models/half_parameter.hpp) calls it.
#pragma once

#include <cstdint>
#include <string>

namespace fsdp_models {

// Whether weight_gemm multiplies bf16 weights by oneDNN here: fsdp was built with oneDNN, the CPU
// has AVX-512 BF16 instructions (AMX too on Sapphire Rapids and later), oneDNN has a bf16 matmul
// for it that is not its reference code, and the environment does not say FSDP_HALF_GEMM=widen.
// Decided at the first call.
bool onednn_bf16_gemm_available();

// The implementation oneDNN chose ("brg:avx512_core_amx_bf16"), or why none is used.
std::string onednn_bf16_gemm_description();

// C = alpha * bf16(A) * op(W) + beta * C on host memory, in fp32 accumulation: A is [m, k] with
// rows lda floats apart, rounded to bfloat16 (to nearest even) a panel of rows at a time into
// `scratch` (scratch_elements >= k); W is the row-major bfloat16 matrix [w_rows, w_columns],
// op(W) = W^T when transpose_w (then k = w_columns, C has w_rows columns) and W otherwise
// (k = w_rows, C has w_columns columns); C's rows are ldc floats apart. beta = 0 overwrites C.
// Only when onednn_bf16_gemm_available(); fsdp::Error otherwise, or when oneDNN fails.
void onednn_bf16_weight_gemm(float alpha, const float* a, std::int64_t m, std::int64_t lda,
                             const std::uint16_t* w, std::int64_t w_rows, std::int64_t w_columns,
                             bool transpose_w, float beta, float* c, std::int64_t ldc,
                             std::uint16_t* scratch, std::int64_t scratch_elements);

// grad += bf16(delta)^T * bf16(in), the gradient of a linear layer's weight [outputs, inputs]
// (rows ldg floats apart) from delta [m, outputs] and in [m, inputs] (rows ldd and ldi apart),
// both rounded to bfloat16 a panel of rows at a time into the two scratches (scratch_elements
// each, at least max(outputs, inputs)), fp32 accumulation. Only when
// onednn_bf16_gemm_available(); fsdp::Error otherwise, or when oneDNN fails.
void onednn_bf16_gradient_gemm(const float* delta, std::int64_t m, std::int64_t outputs,
                               std::int64_t ldd, const float* in, std::int64_t inputs,
                               std::int64_t ldi, float* grad, std::int64_t ldg,
                               std::uint16_t* delta_scratch, std::uint16_t* in_scratch,
                               std::int64_t scratch_elements);

// oneDNN runs its kernels on OpenMP threads: limits them to `threads` per process, as
// limit_blas_threads does OpenBLAS's, unless the user set OMP_NUM_THREADS.
void limit_onednn_threads(int threads);

}  // namespace fsdp_models
