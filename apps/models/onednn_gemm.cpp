#include "models/onednn_gemm.hpp"

#include <dlfcn.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <tuple>
#include <utility>

#include "fsdp/core/error.hpp"
#include "fsdp/core/half_conversion.hpp"

#ifdef FSDP_MODELS_HAVE_ONEDNN
#include <oneapi/dnnl/dnnl.hpp>
#endif

namespace fsdp_models {
namespace {

bool turned_off() {
  const char* choice = std::getenv("FSDP_HALF_GEMM");
  return choice != nullptr && std::string(choice) == "widen";
}

#ifdef FSDP_MODELS_HAVE_ONEDNN

using dnnl::memory;

dnnl::engine& cpu_engine() {
  static dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

// C[rows, n] (rows ldc apart) = alpha * A16[rows, k] * op(W) + beta * C.
dnnl::matmul::primitive_desc describe(std::int64_t rows, std::int64_t k, std::int64_t n,
                                      bool transpose_w, std::int64_t ldc, float alpha, float beta) {
  const memory::desc a({rows, k}, memory::data_type::bf16, memory::dims{k, 1});
  // W is [n, k] row-major for W^T, [k, n] row-major otherwise: as a [k, n] matrix either way.
  const memory::desc w({k, n}, memory::data_type::bf16,
                       transpose_w ? memory::dims{1, k} : memory::dims{n, 1});
  const memory::desc c({rows, n}, memory::data_type::f32, memory::dims{ldc, 1});
  dnnl::primitive_attr attributes;
  if (alpha != 1.0f) {
    attributes.set_output_scales(0, {alpha});
  }
  if (beta != 0.0f) {
    dnnl::post_ops sum;
    sum.append_sum(beta);
    attributes.set_post_ops(sum);
  }
  return dnnl::matmul::primitive_desc(dnnl::matmul::desc(a, w, c), attributes, cpu_engine());
}

// oneDNN falls back to its reference code where no kernel suits the CPU: correct, but far
// slower than widening into the BLAS.
bool is_reference(const dnnl::matmul::primitive_desc& description) {
  return std::string(description.impl_info_str()).rfind("ref", 0) == 0;
}

struct Choice {
  bool available = false;
  std::string description;
};

const Choice& choice() {
  static const Choice chosen = [] {
    Choice c;
    if (turned_off()) {
      c.description = "FSDP_HALF_GEMM=widen";
      return c;
    }
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx512bf16")) {
      // oneDNN would emulate bf16 with AVX-512 (gemm:jit) or refuse: no faster than widening.
      c.description = "the CPU has no AVX-512 BF16 instructions";
      return c;
    }
    try {
      const auto probe = describe(64, 64, 64, true, 64, 1.0f, 0.0f);
      c.description = probe.impl_info_str();
      c.available = !is_reference(probe);
      if (!c.available) {
        c.description =
            "oneDNN has only its reference bf16 matmul for this CPU (" + c.description + ")";
      }
    } catch (const dnnl::error& e) {
      c.description = std::string("oneDNN has no bf16 matmul for this CPU: ") + e.what();
    }
    return c;
  }();
  return chosen;
}

// A matmul and what it reads and writes, made once per shape: making one compiles its kernel.
struct Product {
  dnnl::matmul::primitive_desc description;
  dnnl::matmul matmul;
};

Product& product_for(std::int64_t rows, std::int64_t k, std::int64_t n, bool transpose_w,
                     std::int64_t ldc, float alpha, float beta) {
  using Key =
      std::tuple<std::int64_t, std::int64_t, std::int64_t, bool, std::int64_t, float, float>;
  static std::map<Key, Product> made;
  const Key key{rows, k, n, transpose_w, ldc, alpha, beta};
  auto found = made.find(key);
  if (found == made.end()) {
    auto description = describe(rows, k, n, transpose_w, ldc, alpha, beta);
    dnnl::matmul matmul(description);
    found = made.emplace(key, Product{std::move(description), std::move(matmul)}).first;
  }
  return found->second;
}

#endif

}  // namespace

bool onednn_bf16_gemm_available() {
#ifdef FSDP_MODELS_HAVE_ONEDNN
  return choice().available;
#else
  return false;
#endif
}

std::string onednn_bf16_gemm_description() {
#ifdef FSDP_MODELS_HAVE_ONEDNN
  return choice().description;
#else
  return turned_off() ? "FSDP_HALF_GEMM=widen" : "fsdp was built without oneDNN";
#endif
}

void onednn_bf16_weight_gemm(float alpha, const float* a, std::int64_t m, std::int64_t lda,
                             const std::uint16_t* w, std::int64_t w_rows, std::int64_t w_columns,
                             bool transpose_w, float beta, float* c, std::int64_t ldc,
                             std::uint16_t* scratch, std::int64_t scratch_elements) {
  fsdp::require(onednn_bf16_gemm_available(),
                "onednn_bf16_weight_gemm: no oneDNN bf16 matmul here (" +
                    onednn_bf16_gemm_description() + ")");
  const std::int64_t k = transpose_w ? w_columns : w_rows;
  const std::int64_t n = transpose_w ? w_rows : w_columns;
  fsdp::require(k >= 1 && scratch_elements >= k, "onednn_bf16_weight_gemm: a scratch of " +
                                                     std::to_string(scratch_elements) +
                                                     " elements for rows of " + std::to_string(k));
#ifdef FSDP_MODELS_HAVE_ONEDNN
  const std::int64_t panel = std::max<std::int64_t>(1, scratch_elements / k);
  static dnnl::stream stream(cpu_engine());
  try {
    for (std::int64_t first = 0; first < m; first += panel) {
      const std::int64_t rows = std::min(panel, m - first);
      for (std::int64_t r = 0; r < rows; ++r) {
        const float* from = a + (first + r) * lda;
        std::uint16_t* to = scratch + r * k;
        for (std::int64_t j = 0; j < k; ++j) {
          to[j] = fsdp::half::bfloat16_bits(from[j]);
        }
      }
      Product& product = product_for(rows, k, n, transpose_w, ldc, alpha, beta);
      memory a_memory(product.description.src_desc(), cpu_engine(), scratch);
      memory w_memory(product.description.weights_desc(), cpu_engine(),
                      const_cast<std::uint16_t*>(w));
      memory c_memory(product.description.dst_desc(), cpu_engine(), c + first * ldc);
      product.matmul.execute(
          stream,
          {{DNNL_ARG_SRC, a_memory}, {DNNL_ARG_WEIGHTS, w_memory}, {DNNL_ARG_DST, c_memory}});
      stream.wait();  // the scratch is overwritten by the next panel
    }
  } catch (const dnnl::error& e) {
    throw fsdp::Error(std::string("oneDNN's bf16 matmul failed: ") + e.what() + " (status " +
                      std::to_string(static_cast<int>(e.status)) + ")");
  }
#else
  (void)alpha, (void)a, (void)m, (void)lda, (void)w, (void)beta, (void)c, (void)ldc, (void)scratch;
#endif
}

void limit_onednn_threads(int threads) {
  using SetThreads = void (*)(int);
  const auto set = reinterpret_cast<SetThreads>(dlsym(RTLD_DEFAULT, "omp_set_num_threads"));
  if (set != nullptr && std::getenv("OMP_NUM_THREADS") == nullptr && threads >= 1) {
    set(threads);
  }
}

}  // namespace fsdp_models
