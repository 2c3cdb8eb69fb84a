// ReadAhead and HostBlock, the host side of a checkpoint load: the thread's sums are the
// checksums of what the reader wrote into each range after awaiting its pages (0 for a range not
// summed), every range keeps what was written into it while the next ones are faulted in, and
// a ReadAhead destroyed before the last read stops without waiting for it.
#include <Kokkos_Core.hpp>
#include <boost/test/unit_test.hpp>
#include <cstdint>
#include <cstring>
#include <vector>

#include "fsdp/io/tensor_checksum.hpp"
#include "host_block.hpp"
#include "read_ahead.hpp"

using namespace fsdp;

namespace {

std::uint64_t float_sum(const char* data, std::int64_t count, std::int64_t first) {
  return host_checksum(reinterpret_cast<const float*>(data), count, first);
}

float value_of(std::size_t range, std::int64_t i) {
  return static_cast<float>(range) * 1000.0f + static_cast<float>(i) * 0.25f;
}

}  // namespace

BOOST_AUTO_TEST_CASE(sums_are_the_checksums_of_what_was_read) {
  // Sizes that end inside a page, an empty range, one not summed, and one of several pages.
  const std::vector<std::int64_t> counts = {5, 1000, 0, 3, 70000, 1023, 1};
  std::vector<std::size_t> at;
  std::size_t bytes = 0;
  for (const std::int64_t count : counts) {
    at.push_back(bytes);
    bytes += static_cast<std::size_t>(count) * sizeof(float);
  }
  for (const HostBlock::Pages pages : {HostBlock::Pages::base, HostBlock::Pages::huge}) {
    const HostBlock staging(bytes, pages);
    BOOST_TEST(staging.size() == bytes);
    BOOST_TEST(reinterpret_cast<std::uintptr_t>(staging.data()) % 4096 == 0u);
    std::vector<ReadAhead::Range> ranges;
    for (std::size_t r = 0; r < counts.size(); ++r) {
      ranges.push_back(
          {staging.data() + at[r], counts[r], static_cast<std::int64_t>(r) * 7, r != 3});
    }
    std::vector<std::uint64_t> sums;
    {
      ReadAhead ahead(ranges, sizeof(float), &float_sum);
      for (std::size_t r = 0; r < ranges.size(); ++r) {
        ahead.await_pages(r);
        auto* values = reinterpret_cast<float*>(ranges[r].data);
        for (std::int64_t i = 0; i < counts[r]; ++i) {
          values[i] = value_of(r, i);
        }
        ahead.have_read(r);
      }
      sums = ahead.sums();
    }
    BOOST_TEST_REQUIRE(sums.size() == ranges.size());
    for (std::size_t r = 0; r < ranges.size(); ++r) {
      std::vector<float> expected(static_cast<std::size_t>(counts[r]));
      for (std::int64_t i = 0; i < counts[r]; ++i) {
        expected[static_cast<std::size_t>(i)] = value_of(r, i);
      }
      const std::uint64_t sum =
          ranges[r].summed ? host_checksum(expected.data(), counts[r], ranges[r].first) : 0;
      BOOST_TEST(sums[r] == sum, "range " << r);
      // Every range still holds what was written into it: the faulting-in of the next ranges
      // (whose first page this one's last shares) left it alone.
      BOOST_TEST((expected.empty() || std::memcmp(ranges[r].data, expected.data(),
                                                  expected.size() * sizeof(float)) == 0),
                 "range " << r);
    }
  }
}

BOOST_AUTO_TEST_CASE(destroyed_before_the_last_read_it_stops) {
  const HostBlock staging(8 * 4096, HostBlock::Pages::base);
  std::vector<ReadAhead::Range> ranges;
  for (std::size_t r = 0; r < 8; ++r) {
    ranges.push_back({staging.data() + r * 4096, 1024, 0, true});
  }
  ReadAhead ahead(ranges, sizeof(float), &float_sum);
  ahead.await_pages(0);
  std::memset(staging.data(), 0, 4096);
  ahead.have_read(0);
  // The reads stop here (a failure before the last piece): destroying it must not wait for
  // ranges that will never be read.
}

BOOST_AUTO_TEST_CASE(an_empty_staging_has_no_memory) {
  const HostBlock staging(0, HostBlock::Pages::huge);
  BOOST_TEST(staging.size() == 0u);
  BOOST_TEST(staging.data() == nullptr);
  ReadAhead ahead({}, sizeof(float), &float_sum);
  BOOST_TEST(ahead.sums().empty());
}
