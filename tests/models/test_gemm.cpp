// The models' GEMM layer (apps/models/gemm.hpp) against a plain triple loop, for every pair of
// operand transpositions, both element types, row ranges of larger buffers and an empty inner
// dimension; and the MLP layer built on it against the same loop.
#include <Kokkos_Core.hpp>
#include <algorithm>
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>

#include "fsdp/core/half_conversion.hpp"
#include "models/blas_runtime.hpp"
#include "models/gemm.hpp"
#include "models/half_parameter.hpp"
#include "models/mlp.hpp"
#include "models/onednn_gemm.hpp"
#include "models/subnormals.hpp"

namespace {

using fsdp_models::gemm;
using fsdp_models::Matrix;
using fsdp_models::Op;

template <class T>
Matrix<T> random_matrix(const std::string& name, std::int64_t rows, std::int64_t columns,
                        std::uint64_t seed) {
  Matrix<T> m(name, rows, columns);
  auto host = Kokkos::create_mirror_view(m);
  std::mt19937_64 engine(seed);
  std::uniform_real_distribution<double> uniform(-1.0, 1.0);
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t c = 0; c < columns; ++c) {
      host(r, c) = static_cast<T>(uniform(engine));
    }
  }
  Kokkos::deep_copy(m, host);
  return m;
}

// count 16-bit values (bfloat16 or float16 bits) drawn uniformly from [-1, 1).
fsdp::DeviceView<std::uint16_t> random_half_bits(std::int64_t count, bool bf16,
                                                 std::uint64_t seed) {
  fsdp::DeviceView<std::uint16_t> bits("bits", static_cast<std::size_t>(count));
  auto host = Kokkos::create_mirror_view(bits);
  std::mt19937_64 engine(seed);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  for (std::size_t i = 0; i < host.size(); ++i) {
    host(i) = bf16 ? fsdp::half::bfloat16_bits(uniform(engine))
                   : fsdp::half::float16_bits(uniform(engine));
  }
  Kokkos::deep_copy(bits, host);
  return bits;
}

// A host copy that does not alias m (create_mirror_view would return m itself on the host).
template <class View>
auto copy_of(const View& m) {
  auto host = Kokkos::create_mirror(m);
  Kokkos::deep_copy(host, m);
  return host;
}

// The element (i, j) of op(m).
template <class Host>
double at(const Host& m, Op op, std::int64_t i, std::int64_t j) {
  return op == Op::none ? static_cast<double>(m(i, j)) : static_cast<double>(m(j, i));
}

template <class T>
void check_products(double tolerance) {
  const std::int64_t m = 7, n = 5, k = 9;
  for (Op op_a : {Op::none, Op::transpose}) {
    for (Op op_b : {Op::none, Op::transpose}) {
      const auto a =
          op_a == Op::none ? random_matrix<T>("a", m, k, 1) : random_matrix<T>("a", k, m, 1);
      const auto b =
          op_b == Op::none ? random_matrix<T>("b", k, n, 2) : random_matrix<T>("b", n, k, 2);
      // C is the first m rows of a taller buffer, as a shorter last batch is.
      const auto c = random_matrix<T>("c", m + 3, n, 3);
      const auto a_host = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), a);
      const auto b_host = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), b);
      const auto c_before = copy_of(c);
      gemm(op_a, op_b, T(2), a, b, T(0.5), fsdp_models::leading_rows(c, m));
      const auto c_after = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), c);
      for (std::int64_t i = 0; i < m; ++i) {
        for (std::int64_t j = 0; j < n; ++j) {
          double sum = 0;
          for (std::int64_t l = 0; l < k; ++l) {
            sum += at(a_host, op_a, i, l) * at(b_host, op_b, l, j);
          }
          const double expected = 2 * sum + 0.5 * static_cast<double>(c_before(i, j));
          BOOST_TEST(std::abs(static_cast<double>(c_after(i, j)) - expected) <= tolerance,
                     "op_a " << int(op_a) << " op_b " << int(op_b) << " (" << i << ", " << j
                             << "): " << c_after(i, j) << " != " << expected);
        }
      }
      for (std::int64_t i = m; i < m + 3; ++i) {  // rows past the range are untouched
        for (std::int64_t j = 0; j < n; ++j) {
          BOOST_TEST(c_after(i, j) == c_before(i, j));
        }
      }
    }
  }
}

}  // namespace

BOOST_AUTO_TEST_CASE(gemm_matches_the_definition_for_every_transposition) {
  check_products<double>(1e-12);
  check_products<float>(1e-5);
}

BOOST_AUTO_TEST_CASE(an_empty_inner_dimension_scales_c_by_beta) {
  const auto a = random_matrix<double>("a", 4, 0, 1);
  const auto b = random_matrix<double>("b", 0, 3, 2);
  const auto c = random_matrix<double>("c", 4, 3, 3);
  const auto before = copy_of(c);
  gemm(Op::none, Op::none, 1.0, a, b, 0.5, c);
  const auto after = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), c);
  for (int i = 0; i < 4; ++i) {
    for (int j = 0; j < 3; ++j) {
      BOOST_TEST(after(i, j) == 0.5 * before(i, j));
    }
  }
}

// The MLP layer (weight [out, in], bias, ReLU) on its GEMMs against the loops it replaced.
BOOST_AUTO_TEST_CASE(mlp_layer_forward_and_backward_match_the_definition) {
  const std::int64_t rows = 6, in = 5, out = 4, capacity = 8;
  const auto input = random_matrix<double>("in", capacity, in, 1);
  const auto delta = random_matrix<double>("delta", capacity, out, 2);
  const auto weight_matrix = random_matrix<double>("weight", out, in, 3);
  const Kokkos::View<double*, fsdp::MemorySpace> weight(weight_matrix.data(), out * in);
  Kokkos::View<double*, fsdp::MemorySpace> bias("bias", out);
  Kokkos::deep_copy(bias, 0.25);
  Kokkos::View<double*, fsdp::MemorySpace> weight_grad("weight_grad", out * in);
  Kokkos::View<double*, fsdp::MemorySpace> bias_grad("bias_grad", out);
  Kokkos::deep_copy(weight_grad, 1.0);  // backward adds to what is there
  Matrix<double> output("out", capacity, out);
  Matrix<double> delta_in("delta_in", capacity, in);
  fsdp_models::layer_forward<double>(weight, bias, input, output, rows, true);
  fsdp_models::layer_backward<double>(weight, weight_grad, bias_grad, input, delta, &delta_in,
                                      rows);
  const auto x = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), input);
  const auto d = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), delta);
  const auto w = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), weight_matrix);
  const auto y = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), output);
  const auto gw = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), weight_grad);
  const auto gb = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), bias_grad);
  const auto dx = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), delta_in);
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t o = 0; o < out; ++o) {
      double sum = 0.25;
      for (std::int64_t i = 0; i < in; ++i) {
        sum += x(r, i) * w(o, i);
      }
      BOOST_TEST(std::abs(y(r, o) - std::max(sum, 0.0)) <= 1e-12);
    }
    for (std::int64_t i = 0; i < in; ++i) {
      double sum = 0;
      for (std::int64_t o = 0; o < out; ++o) {
        sum += d(r, o) * w(o, i);
      }
      BOOST_TEST(std::abs(dx(r, i) - (x(r, i) > 0 ? sum : 0.0)) <= 1e-12);
    }
  }
  for (std::int64_t o = 0; o < out; ++o) {
    double bias_sum = 0;
    for (std::int64_t r = 0; r < rows; ++r) {
      bias_sum += d(r, o);
    }
    BOOST_TEST(std::abs(gb(o) - bias_sum) <= 1e-12);
    for (std::int64_t i = 0; i < in; ++i) {
      double sum = 1.0;
      for (std::int64_t r = 0; r < rows; ++r) {
        sum += d(r, o) * x(r, i);
      }
      BOOST_TEST(std::abs(gw(o * in + i) - sum) <= 1e-12);
    }
  }
}

// OpenBLAS falls back to its SSE3 kernels ("Prescott") on a CPU model it does not know; the
// models' GEMMs then ran at a fifth of the machine's rate (Emerald Rapids, Debian 12's 0.3.21:
// 31 against 146 GFLOP/s). After choose_blas_kernels, a CPU with AVX2 and FMA never runs them,
// unless the user chose them.
BOOST_AUTO_TEST_CASE(openblas_never_runs_its_fallback_kernels_on_an_avx2_cpu) {
  const std::string note = fsdp_models::choose_blas_kernels();
  const std::string kernels = fsdp_models::blas_kernels();
  BOOST_TEST_MESSAGE("OpenBLAS kernels: '" << kernels << "'; " << note);
  __builtin_cpu_init();
  if (kernels.empty() || !__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma") ||
      (std::getenv("OPENBLAS_CORETYPE") != nullptr && note.empty())) {
    return;  // not OpenBLAS, a CPU without AVX2, or kernels the user chose
  }
  BOOST_TEST(kernels != "Prescott");
  BOOST_TEST(fsdp_models::blas_description().find(kernels) != std::string::npos);
  // Chosen once: a second call says the same and changes nothing.
  BOOST_TEST(fsdp_models::choose_blas_kernels() == note);
  BOOST_TEST(fsdp_models::blas_kernels() == kernels);
}

// Subnormal floats are flushed to zero once asked (fsdp-train and fsdp-bench ask; a subnormal
// operand made the transformer's GEMMs 3x slower), and a subnormal result becomes zero.
BOOST_AUTO_TEST_CASE(subnormals_are_flushed_to_zero_once_asked) {
  volatile float tiny = 1e-30f;  // volatile: computed at run time, by the FPU under test
  volatile float scale = 1e-10f;
  BOOST_TEST(tiny * scale > 0.0f);  // 1e-40: subnormal, kept by default
  if (!fsdp_models::flush_subnormals_to_zero()) {
    return;  // a CPU without such a mode
  }
  BOOST_TEST(fsdp_models::flushes_subnormals());
  BOOST_TEST(tiny * scale == 0.0f);
  volatile float subnormal_bits = 0;
  const std::uint32_t bits = 1;  // the smallest subnormal, read as zero
  std::memcpy(const_cast<float*>(&subnormal_bits), &bits, sizeof bits);
  BOOST_TEST(subnormal_bits * 1e30f == 0.0f);
}

// weight_gemm with a 16-bit weight (models/half_parameter.hpp) against gemm on the same weight
// widened: a weight of 600 rows x 1000 columns and 300 rows of activations take 3 panels of 262
// rows, both ways of multiplying (op(W) = W^T writes column blocks of C; W pairs row panels with
// column blocks of A), with beta 0 and 1, on row ranges of larger buffers, in bf16 and fp16.
// Every product is the same fp32 arithmetic up to the order of the panel sums.
BOOST_AUTO_TEST_CASE(weight_gemm_of_a_16_bit_weight_matches_gemm_of_it_widened) {
  const std::int64_t w_rows = 600, w_columns = 1000, m = 300, capacity = 310;
  for (const bool bf16 : {true, false}) {
    const auto bits = random_half_bits(w_rows * w_columns, bf16, 7);
    fsdp::DeviceView<double> widened("widened", w_rows * w_columns);
    fsdp_models::WideningScratch<double> scratch;
    const fsdp_models::HalfParameter<double> half{bits, bf16, &scratch};
    Kokkos::parallel_for(
        "widen", fsdp::device_range(fsdp::ExecutionSpace(), 0, w_rows * w_columns),
        KOKKOS_LAMBDA(const std::size_t i) { widened(i) = half(i); });
    Kokkos::fence();
    for (const Op op : {Op::transpose, Op::none}) {
      for (const double beta : {0.0, 1.0}) {
        const std::int64_t a_columns = op == Op::transpose ? w_columns : w_rows;
        const std::int64_t c_columns = op == Op::transpose ? w_rows : w_columns;
        const auto a = random_matrix<double>("a", capacity, a_columns, 11);
        const auto panels = random_matrix<double>("c", capacity, c_columns, 12);
        const auto whole = copy_of(panels);
        Matrix<double> expected("expected", capacity, c_columns);
        Kokkos::deep_copy(expected, whole);
        fsdp_models::weight_gemm(2.0, fsdp_models::leading_rows(a, m), half, w_rows, w_columns, op,
                                 beta, fsdp_models::leading_rows(panels, m));
        gemm(Op::none, op, 2.0, fsdp_models::leading_rows(a, m),
             fsdp_models::as_matrix(widened, w_rows, w_columns), beta,
             fsdp_models::leading_rows(expected, m));
        const auto got = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), panels);
        const auto want = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), expected);
        double largest = 0;
        for (std::int64_t r = 0; r < capacity; ++r) {
          for (std::int64_t j = 0; j < c_columns; ++j) {
            if (r >= m) {
              BOOST_REQUIRE(got(r, j) == whole(r, j));  // rows past the range untouched
            }
            largest = std::max(largest, std::abs(got(r, j) - want(r, j)));
          }
        }
        BOOST_TEST(largest <= 1e-10, (bf16 ? "bf16 " : "fp16 ")
                                         << (op == Op::none ? "W" : "W^T") << " beta " << beta
                                         << ": largest difference " << largest);
      }
    }
  }
}

// weight_gemm with a bfloat16 weight of floats multiplies in bf16 where oneDNN's bf16 matmul runs
// (models/onednn_gemm.hpp): against the double product of the same bf16 values (the activations
// rounded to bf16, the weight as gathered), both ways of multiplying, alpha 2, beta 0 and 1, on
// row ranges of larger buffers; 700 rows of 1000 take two panels of the scratch. The widened
// fp32 product, which keeps the activations' digits, is 0.13 to 0.15 away from it (checked).
BOOST_AUTO_TEST_CASE(weight_gemm_of_a_bf16_weight_multiplies_in_bf16_where_onednn_runs) {
  const bool built_with_onednn =
      fsdp_models::onednn_bf16_gemm_description() != "fsdp was built without oneDNN";
  const bool widen_asked = std::getenv("FSDP_HALF_GEMM") != nullptr ||
                           std::getenv("ONEDNN_MAX_CPU_ISA") != nullptr ||
                           std::getenv("DNNL_MAX_CPU_ISA") != nullptr;
  __builtin_cpu_init();
  if (built_with_onednn && !widen_asked && __builtin_cpu_supports("avx512bf16")) {
    BOOST_REQUIRE_MESSAGE(fsdp_models::onednn_bf16_gemm_available(),
                          fsdp_models::onednn_bf16_gemm_description());
  }
  if (!fsdp_models::onednn_bf16_gemm_available()) {
    BOOST_TEST_MESSAGE("not run: " << fsdp_models::onednn_bf16_gemm_description());
    return;
  }
  BOOST_TEST(fsdp_models::half_gemm_description().find("oneDNN") != std::string::npos);
  const std::int64_t w_rows = 600, w_columns = 1000, m = 700, capacity = 710;
  const auto bits = random_half_bits(w_rows * w_columns, true, 7);
  const auto w = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), bits);
  fsdp_models::WideningScratch<float> scratch;
  const fsdp_models::HalfParameter<float> half{bits, true, &scratch};
  for (const Op op : {Op::transpose, Op::none}) {
    for (const float beta : {0.0f, 1.0f}) {
      const std::int64_t k = op == Op::transpose ? w_columns : w_rows;
      const std::int64_t n = op == Op::transpose ? w_rows : w_columns;
      const auto a = random_matrix<float>("a", capacity, k, 11);
      const auto c = random_matrix<float>("c", capacity, n, 12);
      const auto before = copy_of(c);
      fsdp_models::weight_gemm(2.0f, fsdp_models::leading_rows(a, m), half, w_rows, w_columns, op,
                               beta, fsdp_models::leading_rows(c, m));
      const auto got = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), c);
      const auto a_host = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), a);
      double largest = 0;
      for (std::int64_t r = 0; r < capacity; ++r) {
        for (std::int64_t j = 0; j < n; ++j) {
          if (r >= m) {
            BOOST_REQUIRE(got(r, j) == before(r, j));  // rows past the range untouched
            continue;
          }
          double sum = 0;
          for (std::int64_t x = 0; x < k; ++x) {
            const std::int64_t element =
                op == Op::transpose ? j * w_columns + x : x * w_columns + j;
            sum += static_cast<double>(
                       fsdp::half::from_bfloat16_bits(fsdp::half::bfloat16_bits(a_host(r, x)))) *
                   fsdp::half::from_bfloat16_bits(w(static_cast<std::size_t>(element)));
          }
          const double want = 2.0 * sum + beta * static_cast<double>(before(r, j));
          largest = std::max(largest, std::abs(static_cast<double>(got(r, j)) - want));
        }
      }
      // fp32 accumulation of 600 to 1000 products of magnitude up to 1: sums of about 10.
      BOOST_TEST(largest <= 2e-3, (op == Op::none ? "W" : "W^T")
                                      << " beta " << beta << ": largest difference " << largest);
    }
  }
}

// weight_grad_gemm (models/half_parameter.hpp): grad += delta^T * in, in bf16 on oneDNN where the
// weight is a bf16 HalfParameter that weight_gemm multiplies in bf16, against the double product
// of the operands rounded to bf16; 700 rows of deltas 600 wide and inputs 1000 wide take two
// panels of the scratches, on row ranges of larger buffers. The fp32 GEMM that runs without it
// keeps the operands' digits: 0.086 away (checked).
BOOST_AUTO_TEST_CASE(weight_grad_gemm_of_a_bf16_weight_multiplies_in_bf16_where_onednn_runs) {
  if (!fsdp_models::onednn_bf16_gemm_available()) {
    BOOST_TEST_MESSAGE("not run: " << fsdp_models::onednn_bf16_gemm_description());
    return;
  }
  const std::int64_t outputs = 600, inputs = 1000, m = 700, capacity = 710;
  fsdp::DeviceView<std::uint16_t> bits("bits", outputs * inputs);
  fsdp_models::WideningScratch<float> scratch;
  const fsdp_models::HalfParameter<float> weight{bits, true, &scratch};
  const auto delta = random_matrix<float>("delta", capacity, outputs, 13);
  const auto in = random_matrix<float>("in", capacity, inputs, 14);
  const auto grad = random_matrix<float>("grad", outputs, inputs, 15);
  const auto before = copy_of(grad);
  fsdp_models::weight_grad_gemm(weight, fsdp_models::leading_rows(delta, m),
                                fsdp_models::leading_rows(in, m), grad);
  const auto got = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), grad);
  const auto d = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), delta);
  const auto x = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), in);
  auto rounded = [](float value) {
    return static_cast<double>(fsdp::half::from_bfloat16_bits(fsdp::half::bfloat16_bits(value)));
  };
  double largest = 0;
  for (std::int64_t o = 0; o < outputs; ++o) {
    for (std::int64_t i = 0; i < inputs; ++i) {
      double sum = before(o, i);
      for (std::int64_t r = 0; r < m; ++r) {
        sum += rounded(d(r, o)) * rounded(x(r, i));
      }
      largest = std::max(largest, std::abs(static_cast<double>(got(o, i)) - sum));
    }
  }
  BOOST_TEST(largest <= 2e-3, "largest difference " << largest);
}
