#include "models/blas_runtime.hpp"

#include <dlfcn.h>

#include <cstdlib>
#include <string>

namespace fsdp_models {
namespace {

// OpenBLAS's own controls, looked up at run time: libblas.so.3 is whichever BLAS the system's
// alternatives name, and only OpenBLAS has them.
using SetThreads = void (*)(int);
using GetThreads = int (*)();
using GetConfig = char* (*)();

template <class Function>
Function openblas_function(const char* name) {
  return reinterpret_cast<Function>(dlsym(RTLD_DEFAULT, name));
}

}  // namespace

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
    text += ")";
  }
  return text;
}

int limit_blas_threads(int threads) {
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
