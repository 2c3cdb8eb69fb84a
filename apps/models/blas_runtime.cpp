#include "models/blas_runtime.hpp"

#include <dlfcn.h>

#include <cstdlib>
#include <string>

#include "models/onednn_gemm.hpp"

namespace fsdp_models {
namespace {

// OpenBLAS's own controls, looked up at run time: libblas.so.3 is whichever BLAS the system's
// alternatives name, and only OpenBLAS has them.
using SetThreads = void (*)(int);
using GetThreads = int (*)();
using GetConfig = char* (*)();
using GetCorename = char* (*)();
using DynamicInit = void (*)();

template <class Function>
Function openblas_function(const char* name) {
  return reinterpret_cast<Function>(dlsym(RTLD_DEFAULT, name));
}

// The kernels OpenBLAS would pick itself for a CPU with this one's instructions (its
// driver/others/dynamic.c: Sapphire Rapids gets Cooperlake's with AVX-512 BF16, else SkylakeX's).
const char* kernels_for_this_cpu() {
  __builtin_cpu_init();
  const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
  if (avx512) {
    return __builtin_cpu_supports("avx512bf16") ? "Cooperlake" : "SkylakeX";
  }
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
    return "Haswell";
  }
  return nullptr;
}

}  // namespace

std::string half_gemm_description() {
  const std::string widened =
      "fp16 parameters widened a panel of weight rows at a time into fp32 GEMMs";
  if (onednn_bf16_gemm_available()) {
    return "bf16 parameters multiplied in bf16 by oneDNN's matmul (" +
           onednn_bf16_gemm_description() + ", activations rounded to bf16, fp32 accumulation); " +
           widened;
  }
  const bool sbgemm = dlsym(RTLD_DEFAULT, "cblas_sbgemm") != nullptr;
  return "16-bit parameters widened a panel of weight rows at a time into fp32 GEMMs (no bf16 "
         "matmul: " +
         onednn_bf16_gemm_description() + "; " +
         (sbgemm ? "the BLAS has a bf16 GEMM, cblas_sbgemm, which fsdp does not call"
                 : "the BLAS has no bf16 GEMM, no cblas_sbgemm") +
         ")";
}

std::string blas_kernels() {
  const auto corename = openblas_function<GetCorename>("openblas_get_corename");
  return corename != nullptr ? corename() : "";
}

namespace {

std::string choose_once() {
  const std::string found = blas_kernels();
  const char* wanted = kernels_for_this_cpu();
  if (found != "Prescott" || wanted == nullptr || std::getenv("OPENBLAS_CORETYPE") != nullptr) {
    return "";
  }
  // OpenBLAS's own way to choose (OPENBLAS_CORETYPE), read by the function that chose at load;
  // it chooses only while its table pointer `gotoblas` is null. Both are exported by every
  // DYNAMIC_ARCH build since 0.2; a build without them keeps its kernels.
  auto** table = reinterpret_cast<void**>(dlsym(RTLD_DEFAULT, "gotoblas"));
  const auto init = openblas_function<DynamicInit>("gotoblas_dynamic_init");
  if (table == nullptr || init == nullptr || setenv("OPENBLAS_CORETYPE", wanted, 0) != 0) {
    return "OpenBLAS runs its Prescott (SSE3) kernels on a CPU with " + std::string(wanted) +
           "'s instructions and cannot be told otherwise here: set OPENBLAS_CORETYPE=" +
           std::string(wanted);
  }
  *table = nullptr;
  init();
  return blas_kernels() +
         " kernels chosen by fsdp: OpenBLAS does not know this CPU and fell back to its Prescott "
         "(SSE3) kernels (OPENBLAS_CORETYPE chooses)";
}

// What choose_blas_kernels() did: empty until it ran, since describing the BLAS never chooses.
std::string& kernel_choice() {
  static std::string choice;
  return choice;
}

}  // namespace

std::string choose_blas_kernels() {
  static const bool chosen = [] {  // the first call chooses
    kernel_choice() = choose_once();
    return true;
  }();
  (void)chosen;
  return kernel_choice();
}

std::string blas_description() {
  std::string text = "unknown BLAS";
  if (void* gemm = dlsym(RTLD_DEFAULT, "sgemm_")) {
    Dl_info info{};
    if (dladdr(gemm, &info) != 0 && info.dli_fname != nullptr) {
      char* real = realpath(info.dli_fname, nullptr);
      text = real != nullptr ? real : info.dli_fname;
      std::free(real);
    }
  }
  if (const auto config = openblas_function<GetConfig>("openblas_get_config")) {
    text += " (" + std::string(config());
    if (const auto threads = openblas_function<GetThreads>("openblas_get_num_threads")) {
      text += ", " + std::to_string(threads()) + " thread(s) per process";
    }
    if (!kernel_choice().empty()) {
      text += "; " + kernel_choice();
    }
    text += ")";
  }
  return text;
}

int limit_blas_threads(int threads) {
  limit_onednn_threads(threads);
  const auto set = openblas_function<SetThreads>("openblas_set_num_threads");
  const auto get = openblas_function<GetThreads>("openblas_get_num_threads");
  if (set == nullptr || get == nullptr) {
    return 0;
  }
  if (std::getenv("OPENBLAS_NUM_THREADS") == nullptr && std::getenv("OMP_NUM_THREADS") == nullptr) {
    set(threads);
  }
  return get();
}

}  // namespace fsdp_models
