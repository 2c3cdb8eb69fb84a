#include "models/subnormals.hpp"

#include <cstdint>

#if defined(__x86_64__)
#include <pmmintrin.h>
#include <xmmintrin.h>
#endif

namespace fsdp_models {

bool flush_subnormals_to_zero() {
#if defined(__x86_64__)
  _MM_SET_FLUSH_ZERO_MODE(_MM_FLUSH_ZERO_ON);
  _MM_SET_DENORMALS_ZERO_MODE(_MM_DENORMALS_ZERO_ON);
  return true;
#elif defined(__aarch64__)
  std::uint64_t fpcr = 0;
  __asm__ __volatile__("mrs %0, fpcr" : "=r"(fpcr));
  fpcr |= std::uint64_t{1} << 24;  // FZ
  __asm__ __volatile__("msr fpcr, %0" : : "r"(fpcr));
  return true;
#else
  return false;
#endif
}

bool flushes_subnormals() {
#if defined(__x86_64__)
  return _MM_GET_FLUSH_ZERO_MODE() == _MM_FLUSH_ZERO_ON &&
         _MM_GET_DENORMALS_ZERO_MODE() == _MM_DENORMALS_ZERO_ON;
#elif defined(__aarch64__)
  std::uint64_t fpcr = 0;
  __asm__ __volatile__("mrs %0, fpcr" : "=r"(fpcr));
  return (fpcr >> 24 & 1) != 0;
#else
  return false;
#endif
}

}  // namespace fsdp_models
