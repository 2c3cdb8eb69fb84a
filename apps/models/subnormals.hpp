// Subnormal floats (|x| < 1.2e-38 in fp32) take a microcode path in x86 arithmetic, many times
// slower than normal numbers. Training produces them (small gradients and Adam moments that
// decay): fsdp-train's 2-block GPT on an Emerald Rapids core trained at 306 tokens/s with them and
// 948 with them flushed, the same loss to the printed digits. TensorFlow flushes them on CPUs by
// default for the same reason; PyTorch offers torch.set_flush_denormal.
#pragma once

namespace fsdp_models {

// Makes the calling thread's floating-point unit read subnormal inputs as zero and write zero for
// subnormal results (x86: MXCSR's DAZ and FTZ; AArch64: FPCR's FZ). Threads started afterwards
// by this one inherit it; threads started before (a multi-threaded BLAS's pool) do not. Returns
// false where the CPU has no such mode (the arithmetic is then unchanged).
bool flush_subnormals_to_zero();

// Whether the calling thread flushes them.
bool flushes_subnormals();

}  // namespace fsdp_models
