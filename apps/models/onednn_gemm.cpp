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

// FSDP_HALF_GEMM: "widen" keeps the widened fp32 products; unset, empty or "auto" lets oneDNN's
// bf16 matmul run where it can.
bool turned_off() {
  const char* choice = std::getenv("FSDP_HALF_GEMM");
  const std::string value = choice != nullptr ? choice : "";
  fsdp::require(value.empty() || value == "auto" || value == "widen", [&] {
    return "FSDP_HALF_GEMM='" + value +
           "' is not a choice: give widen (16-bit weights widened into fp32 GEMMs) or auto "
           "(bf16 weights multiplied by oneDNN's bf16 matmul where it runs; the default)";
  });
  return value == "widen";
}

#ifdef FSDP_MODELS_HAVE_ONEDNN

using dnnl::memory;

dnnl::engine& cpu_engine() {
  static dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

// What one matmul computes: C[rows, n] (rows ldc apart) = alpha * op(A16) * op(W16) + beta * C,
// with op(A16) [rows, k] (A16 row-major [rows, k], or [k, rows] when transpose_a) and op(W16)
// [k, n] (W16 row-major [k, n], or [n, k] when transpose_w).
struct Shape {
  std::int64_t rows, k, n;
  bool transpose_a, transpose_w;
  std::int64_t ldc;
  float alpha, beta;
  bool operator<(const Shape& o) const {
    return std::tie(rows, k, n, transpose_a, transpose_w, ldc, alpha, beta) <
           std::tie(o.rows, o.k, o.n, o.transpose_a, o.transpose_w, o.ldc, o.alpha, o.beta);
  }
};

dnnl::matmul::primitive_desc describe(const Shape& s) {
  const memory::desc a({s.rows, s.k}, memory::data_type::bf16,
                       s.transpose_a ? memory::dims{1, s.rows} : memory::dims{s.k, 1});
  const memory::desc w({s.k, s.n}, memory::data_type::bf16,
                       s.transpose_w ? memory::dims{1, s.k} : memory::dims{s.n, 1});
  const memory::desc c({s.rows, s.n}, memory::data_type::f32, memory::dims{s.ldc, 1});
  dnnl::primitive_attr attributes;
  if (s.alpha != 1.0f) {
    attributes.set_output_scales(0, {s.alpha});
  }
  if (s.beta != 0.0f) {
    dnnl::post_ops sum;
    sum.append_sum(s.beta);
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
      const auto probe = describe(Shape{64, 64, 64, false, true, 64, 1.0f, 0.0f});
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

// Runs the matmul of shape on a, w and c, and waits: the caller overwrites its scratch next.
void run(const Shape& shape, const std::uint16_t* a, const std::uint16_t* w, float* c) {
  static std::map<Shape, Product> made;
  static dnnl::stream stream(cpu_engine());
  auto found = made.find(shape);
  if (found == made.end()) {
    auto description = describe(shape);
    dnnl::matmul matmul(description);
    found = made.emplace(shape, Product{std::move(description), std::move(matmul)}).first;
  }
  const Product& product = found->second;
  memory a_memory(product.description.src_desc(), cpu_engine(), const_cast<std::uint16_t*>(a));
  memory w_memory(product.description.weights_desc(), cpu_engine(), const_cast<std::uint16_t*>(w));
  memory c_memory(product.description.dst_desc(), cpu_engine(), c);
  product.matmul.execute(
      stream, {{DNNL_ARG_SRC, a_memory}, {DNNL_ARG_WEIGHTS, w_memory}, {DNNL_ARG_DST, c_memory}});
  stream.wait();
}

// Rows [first, first + rows) of the matrix at from (rows ld floats apart, `columns` wide),
// rounded to bfloat16 into to, row-major and contiguous.
void round_rows(const float* from, std::int64_t ld, std::int64_t first, std::int64_t rows,
                std::int64_t columns, std::uint16_t* to) {
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* row = from + (first + r) * ld;
    for (std::int64_t j = 0; j < columns; ++j) {
      to[r * columns + j] = fsdp::half::bfloat16_bits(row[j]);
    }
  }
}

[[noreturn]] void fail(const dnnl::error& e) {
  throw fsdp::Error(std::string("oneDNN's bf16 matmul failed: ") + e.what() + " (status " +
                    std::to_string(static_cast<int>(e.status)) + ")");
}

#endif

void require_available(const char* what) {
  fsdp::require(onednn_bf16_gemm_available(), [&] {
    return std::string(what) + ": no oneDNN bf16 matmul here (" + onednn_bf16_gemm_description() +
           ")";
  });
}

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
  require_available("onednn_bf16_weight_gemm");
  const std::int64_t k = transpose_w ? w_columns : w_rows;
  const std::int64_t n = transpose_w ? w_rows : w_columns;
  fsdp::require(k >= 1 && scratch_elements >= k, [&] {
    return "onednn_bf16_weight_gemm: a scratch of " + std::to_string(scratch_elements) +
           " elements for rows of " + std::to_string(k);
  });
#ifdef FSDP_MODELS_HAVE_ONEDNN
  const std::int64_t panel = std::max<std::int64_t>(1, scratch_elements / k);
  try {
    for (std::int64_t first = 0; first < m; first += panel) {
      const std::int64_t rows = std::min(panel, m - first);
      round_rows(a, lda, first, rows, k, scratch);
      run(Shape{rows, k, n, false, transpose_w, ldc, alpha, beta}, scratch, w, c + first * ldc);
    }
  } catch (const dnnl::error& e) {
    fail(e);
  }
#else
  (void)alpha, (void)a, (void)m, (void)lda, (void)w, (void)beta, (void)c, (void)ldc, (void)scratch;
#endif
}

void onednn_bf16_gradient_gemm(const float* delta, std::int64_t m, std::int64_t outputs,
                               std::int64_t ldd, const float* in, std::int64_t inputs,
                               std::int64_t ldi, float* grad, std::int64_t ldg,
                               std::uint16_t* delta_scratch, std::uint16_t* in_scratch,
                               std::int64_t scratch_elements) {
  require_available("onednn_bf16_gradient_gemm");
  fsdp::require(outputs >= 1 && inputs >= 1 && scratch_elements >= std::max(outputs, inputs), [&] {
    return "onednn_bf16_gradient_gemm: scratches of " + std::to_string(scratch_elements) +
           " elements for rows of " + std::to_string(outputs) + " and " + std::to_string(inputs);
  });
#ifdef FSDP_MODELS_HAVE_ONEDNN
  const std::int64_t panel =
      std::max<std::int64_t>(1, std::min(scratch_elements / outputs, scratch_elements / inputs));
  try {
    for (std::int64_t first = 0; first < m; first += panel) {
      const std::int64_t rows = std::min(panel, m - first);
      round_rows(delta, ldd, first, rows, outputs, delta_scratch);
      round_rows(in, ldi, first, rows, inputs, in_scratch);
      // grad[outputs, inputs] += delta16^T [outputs, rows] * in16 [rows, inputs]
      run(Shape{outputs, rows, inputs, true, false, ldg, 1.0f, 1.0f}, delta_scratch, in_scratch,
          grad);
    }
  } catch (const dnnl::error& e) {
    fail(e);
  }
#else
  (void)delta, (void)m, (void)ldd, (void)in, (void)ldi, (void)grad, (void)ldg;
  (void)delta_scratch, (void)in_scratch;
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
