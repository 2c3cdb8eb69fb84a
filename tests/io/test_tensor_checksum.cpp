// tensor_checksum: the dispatched host sum (a vector clone where the CPU has one) and the Kokkos
// kernel (a strided View) equal the scalar sum of the terms, for every length around the vector
// widths and any first index; a changed element changes the sum.
#include <Kokkos_Core.hpp>
#include <boost/test/unit_test.hpp>
#include <cstdint>
#include <random>
#include <vector>

#include "fsdp/core/memory_space.hpp"
#include "fsdp/io/tensor_checksum.hpp"

using namespace fsdp;

namespace {

template <class T>
std::uint64_t scalar_sum(const std::vector<T>& values, std::int64_t first) {
  std::uint64_t sum = 0;
  for (std::size_t i = 0; i < values.size(); ++i) {
    sum += checksum_term<T>(first + static_cast<std::int64_t>(i), values[i]);
  }
  return sum;
}

template <class T>
void check_every_path() {
  std::mt19937_64 random(12345);
  std::normal_distribution<double> normal;
  for (const std::int64_t count : {0, 1, 3, 7, 8, 9, 15, 16, 17, 31, 33, 1000, 4099}) {
    for (const std::int64_t first : {std::int64_t{0}, std::int64_t{5}, std::int64_t{1} << 40}) {
      std::vector<T> values(static_cast<std::size_t>(count));
      for (T& x : values) {
        x = static_cast<T>(normal(random));
      }
      const std::uint64_t expected = scalar_sum(values, first);
      BOOST_TEST(host_checksum(values.data(), count, first) == expected);
      // Every other element of a View twice as long: not contiguous, summed by the kernel.
      Kokkos::View<T*, Kokkos::HostSpace> spread("spread", static_cast<std::size_t>(2 * count));
      for (std::int64_t i = 0; i < count; ++i) {
        spread(static_cast<std::size_t>(2 * i)) = values[static_cast<std::size_t>(i)];
      }
      const auto strided =
          Kokkos::subview(Kokkos::View<T**, Kokkos::LayoutRight, Kokkos::HostSpace>(
                              spread.data(), static_cast<std::size_t>(count), 2),
                          Kokkos::ALL, 0);
      BOOST_TEST((count < 2 || !strided.span_is_contiguous()));
      BOOST_TEST(partial_checksum(strided, first) == expected);
      BOOST_TEST(partial_checksum(host_view(values.data(), values.size()), first) == expected);
      if (count > 0) {
        values[static_cast<std::size_t>(count - 1)] += T(1);
        BOOST_TEST(host_checksum(values.data(), count, first) != expected);
      }
    }
  }
}

}  // namespace

BOOST_AUTO_TEST_CASE(float_sums_agree_on_every_path) {
  check_every_path<float>();
}

BOOST_AUTO_TEST_CASE(double_sums_agree_on_every_path) {
  check_every_path<double>();
}
