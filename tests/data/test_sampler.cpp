// DistributedSampler: partition properties computed for many replica counts in one process, then
// agreement and coverage across the real ranks of the job.
#include <algorithm>
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <map>
#include <numeric>
#include <ostream>
#include <vector>

#include "fsdp/comm/process_group.hpp"
#include "fsdp/data/distributed_sampler.hpp"
#include "fsdp/data/index_permutation.hpp"

using namespace fsdp;

// How Boost.Test prints the sampler's types in a failed assertion (found by ADL).
namespace fsdp {
std::ostream& boost_test_print_type(std::ostream& out, const Partition& partition) {
  return out << name_of(partition);
}
std::ostream& boost_test_print_type(std::ostream& out, const SamplerState& state) {
  return out << state.to_string();
}
}  // namespace fsdp

namespace {

// Properties computed for many replica counts inside one process need no real ranks: they run in
// the 1-rank job only, instead of repeating the same work on every rank of every job.
boost::test_tools::assertion_result one_process_job(boost::unit_test::test_unit_id) {
  int size = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  boost::test_tools::assertion_result result(size == 1);
  result.message() << "computed in one process: runs in the 1-rank job";
  return result;
}

// The uniformity statistics are arithmetic over 10^6 shuffles: what they check does not depend on
// the build, and under the sanitizers they took 17 of the program's 28 s. The sanitizer build
// runs every other case, which walks the same code.
boost::test_tools::assertion_result one_process_job_without_sanitizers(
    boost::unit_test::test_unit_id id) {
#if defined(__SANITIZE_ADDRESS__)
  (void)id;
  boost::test_tools::assertion_result result(false);
  result.message() << "statistics only: run in the build without the sanitizers";
  return result;
#else
  return one_process_job(id);
#endif
}

using Indices = std::vector<std::int64_t>;

Indices indices_of(const DistributedSampler& sampler) {
  Indices out;
  for (std::int64_t index : sampler) {
    out.push_back(index);
  }
  return out;
}

// Every rank's indices, each rank's sampler built locally.
std::vector<Indices> all_ranks(std::int64_t n, int replicas, const SamplerOptions& options,
                               std::int64_t epoch = 0) {
  std::vector<Indices> out;
  for (int r = 0; r < replicas; ++r) {
    DistributedSampler sampler(n, replicas, r, options);
    sampler.set_epoch(epoch);
    out.push_back(indices_of(sampler));
  }
  return out;
}

std::vector<std::int64_t> counts_of(const std::vector<Indices>& ranks, std::int64_t n) {
  std::vector<std::int64_t> counts(static_cast<std::size_t>(n));
  for (const auto& indices : ranks) {
    for (std::int64_t index : indices) {
      BOOST_REQUIRE(index >= 0 && index < n);
      ++counts[static_cast<std::size_t>(index)];
    }
  }
  return counts;
}

SamplerOptions options_with(Partition partition, bool shuffle, bool drop_last,
                            std::uint64_t seed = 7,
                            ContiguousBalance balance = ContiguousBalance::pad) {
  SamplerOptions options;
  options.partition = partition;
  options.shuffle = shuffle;
  options.drop_last = drop_last;
  options.seed = seed;
  options.balance = balance;
  return options;
}

// Checks that what() contains every fragment.
auto message_has(std::vector<std::string> fragments) {
  return [fragments](const Error& error) {
    const std::string what = error.what();
    for (const auto& fragment : fragments) {
      if (what.find(fragment) == std::string::npos) {
        BOOST_TEST_MESSAGE("message '" << what << "' lacks '" << fragment << "'");
        return false;
      }
    }
    return true;
  };
}

const std::int64_t kSizes[] = {1, 2, 3, 7, 10, 64, 100, 1001};
const int kReplicas[] = {1, 2, 3, 4, 5, 7, 8, 16, 64, 1000};

}  // namespace

BOOST_AUTO_TEST_CASE(permutation_is_a_bijection_with_an_inverse,
                     *boost::unit_test::precondition(one_process_job)) {
  for (std::uint64_t n :
       {1ull, 2ull, 3ull, 4ull, 5ull, 17ull, 1000ull, 65536ull, 65537ull, 300007ull}) {
    IndexPermutation permutation(n, 12345, 6);
    std::vector<char> seen(n, 0);
    for (std::uint64_t p = 0; p < n; ++p) {
      const std::uint64_t element = permutation(p);
      BOOST_REQUIRE(element < n);
      BOOST_REQUIRE(!seen[element]);
      seen[element] = 1;
      BOOST_REQUIRE(permutation.inverse(element) == p);
    }
  }
}

BOOST_AUTO_TEST_CASE(argument_errors_say_what_is_wrong) {
  BOOST_CHECK_EXCEPTION(DistributedSampler(0, 2, 0), Error,
                        message_has({"dataset_size must be at least 1, got 0"}));
  BOOST_CHECK_EXCEPTION(DistributedSampler(-5, 2, 0), Error,
                        message_has({"dataset_size must be at least 1, got -5"}));
  BOOST_CHECK_EXCEPTION(DistributedSampler(10, 0, 0), Error,
                        message_has({"replicas must be at least 1", "got 0"}));
  BOOST_CHECK_EXCEPTION(DistributedSampler(10, 4, 4), Error,
                        message_has({"rank 4 is out of range for 4 replicas", "[0, 3]"}));
  BOOST_CHECK_EXCEPTION(DistributedSampler(10, 4, -1), Error,
                        message_has({"rank -1 is out of range"}));
  BOOST_CHECK_EXCEPTION(
      DistributedSampler(3, 4, 0, options_with(Partition::contiguous, true, false)), Error,
      message_has({"at least one sample", "use the strided partition"}));
  BOOST_CHECK_EXCEPTION(
      parse_partition("random"), Error,
      message_has({"unknown sampler partition 'random'; expected strided or contiguous"}));
  BOOST_TEST(parse_partition("contiguous") == Partition::contiguous);

  DistributedSampler sampler(10, 3, 1);
  BOOST_CHECK_EXCEPTION(sampler.set_epoch(-1), Error, message_has({"epoch must be >= 0, got -1"}));
  BOOST_CHECK_EXCEPTION(sampler.index(4), Error,
                        message_has({"index 4 is out of range", "[0, 4)"}));
  BOOST_CHECK_EXCEPTION(sampler.index(-1), Error, message_has({"index -1 is out of range"}));
  BOOST_CHECK_EXCEPTION(sampler.state_after(5), Error,
                        message_has({"state_after(5)", "[0, common_steps() = 4]"}));

  SamplerState other_dataset = sampler.state_after(1);
  other_dataset.dataset_size = 11;
  BOOST_CHECK_EXCEPTION(sampler.restore(other_dataset), Error,
                        message_has({"dataset of 11 samples", "this sampler has 10"}));
  auto words = sampler.state_after(0).to_words();
  words[0] = 99;
  BOOST_CHECK_EXCEPTION(SamplerState::from_words(words), Error,
                        message_has({"unknown format version 99"}));
  words = sampler.state_after(0).to_words();
  words[3] = -1;
  BOOST_CHECK_EXCEPTION(SamplerState::from_words(words), Error,
                        message_has({"samples_consumed >= 0"}));
}

BOOST_AUTO_TEST_CASE(a_single_replica_is_valid) {
  DistributedSampler ordered(10, 1, 0, options_with(Partition::strided, false, false));
  Indices expected(10);
  std::iota(expected.begin(), expected.end(), 0);
  BOOST_TEST(indices_of(ordered) == expected, boost::test_tools::per_element());
  for (Partition partition : {Partition::strided, Partition::contiguous}) {
    DistributedSampler shuffled(10, 1, 0, options_with(partition, true, false));
    Indices got = indices_of(shuffled);
    BOOST_TEST(got != expected);
    std::sort(got.begin(), got.end());
    BOOST_TEST(got == expected, boost::test_tools::per_element());
  }
}

BOOST_AUTO_TEST_CASE(iteration_matches_random_access) {
  DistributedSampler sampler(1001, 3, 2);
  std::int64_t i = 0;
  for (std::int64_t index : sampler) {
    BOOST_REQUIRE(index == sampler.index(i));
    ++i;
  }
  BOOST_TEST(i == sampler.length());
}

BOOST_AUTO_TEST_CASE(strided_is_pytorch_order_padded_or_truncated,
                     *boost::unit_test::precondition(one_process_job)) {
  for (bool shuffle : {false, true}) {
    for (std::int64_t n : kSizes) {
      // The global order: the same sampler on one replica.
      const Indices order = all_ranks(n, 1, options_with(Partition::strided, shuffle, false))[0];
      for (int replicas : kReplicas) {
        for (bool drop_last : {false, true}) {
          const auto ranks =
              all_ranks(n, replicas, options_with(Partition::strided, shuffle, drop_last));
          const std::int64_t per_rank = drop_last ? n / replicas : (n + replicas - 1) / replicas;
          for (const auto& indices : ranks) {
            BOOST_REQUIRE(static_cast<std::int64_t>(indices.size()) == per_rank);  // lock step
          }
          // Rank r takes global positions r, r + N, ...; past the end the order starts again.
          for (int r = 0; r < replicas; ++r) {
            for (std::int64_t step = 0; step < per_rank; ++step) {
              const std::int64_t position = r + step * replicas;
              BOOST_REQUIRE(ranks[r][step] == order[position % n]);
            }
          }
          // Coverage: without padding every index once; the padding repeats exactly
          // total - n positions of the order's start; drop_last visits floor(n/N)*N distinct.
          const auto counts = counts_of(ranks, n);
          const std::int64_t total = per_rank * replicas;
          std::int64_t visited = 0, duplicates = 0;
          for (std::int64_t position = 0; position < n; ++position) {
            const std::int64_t count = counts[order[position]];
            const std::int64_t expected =
                position < total ? (total - 1 - position) / n + 1 : 0;  // wraps of the order
            BOOST_REQUIRE(count == expected);
            visited += count > 0;
            duplicates += std::max<std::int64_t>(count - 1, 0);
          }
          BOOST_REQUIRE(visited == std::min(n, total));
          BOOST_REQUIRE(duplicates == std::max<std::int64_t>(total - n, 0));
        }
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(contiguous_blocks_visit_every_sample_once,
                     *boost::unit_test::precondition(one_process_job)) {
  // The seed's defect: 10 samples on 3 replicas never visited 6 and 7.
  const auto seed_case = all_ranks(
      10, 3, options_with(Partition::contiguous, false, false, 0, ContiguousBalance::uneven));
  BOOST_TEST(seed_case[0] == Indices({0, 1, 2}), boost::test_tools::per_element());
  BOOST_TEST(seed_case[1] == Indices({3, 4, 5}), boost::test_tools::per_element());
  BOOST_TEST(seed_case[2] == Indices({6, 7, 8, 9}), boost::test_tools::per_element());

  for (bool shuffle : {false, true}) {
    for (std::int64_t n : kSizes) {
      for (int replicas : kReplicas) {
        const std::int64_t base = n / replicas;
        // uneven: exactly once each, each rank inside its block, the last one takes the rest.
        const auto uneven = all_ranks(
            n, replicas,
            options_with(Partition::contiguous, shuffle, false, 3, ContiguousBalance::uneven));
        const auto counts = counts_of(uneven, n);
        BOOST_REQUIRE(std::all_of(counts.begin(), counts.end(), [](auto c) { return c == 1; }));
        for (int r = 0; r < replicas; ++r) {
          const std::int64_t begin = r * base;
          const std::int64_t end = r == replicas - 1 ? n : begin + base;
          BOOST_REQUIRE(static_cast<std::int64_t>(uneven[r].size()) == end - begin);
          for (std::int64_t i = 0; i < end - begin; ++i) {
            BOOST_REQUIRE(uneven[r][i] >= begin && uneven[r][i] < end);
            if (!shuffle) {
              BOOST_REQUIRE(uneven[r][i] == begin + i);
            }
          }
          DistributedSampler sampler(
              n, replicas, r,
              options_with(Partition::contiguous, shuffle, false, 3, ContiguousBalance::uneven));
          BOOST_REQUIRE(sampler.common_steps() == (replicas == 1 ? n : base));
        }
        // drop_last: equal blocks of floor(n/N), disjoint, the tail dropped.
        const auto dropped =
            all_ranks(n, replicas, options_with(Partition::contiguous, shuffle, true));
        const auto dropped_counts = counts_of(dropped, n);
        for (std::int64_t i = 0; i < n; ++i) {
          BOOST_REQUIRE(dropped_counts[i] == (i < base * replicas ? 1 : 0));
        }
        for (const auto& indices : dropped) {
          BOOST_REQUIRE(static_cast<std::int64_t>(indices.size()) == base);
        }
        // pad: every rank runs the longest block; exactly (N - 1) * (n mod N) repeats.
        if (n < replicas) {
          continue;  // refused: a block would be empty (tested in
                     // argument_errors_say_what_is_wrong)
        }
        const auto padded =
            all_ranks(n, replicas, options_with(Partition::contiguous, shuffle, false));
        const std::int64_t longest = n - (replicas - 1) * base;
        for (int r = 0; r < replicas; ++r) {
          BOOST_REQUIRE(static_cast<std::int64_t>(padded[r].size()) == longest);
          // A block's padding repeats its own start.
          for (std::int64_t i = base; i < longest && r < replicas - 1; ++i) {
            BOOST_REQUIRE(padded[r][i] == padded[r][i % base]);
          }
        }
        const auto padded_counts = counts_of(padded, n);
        std::int64_t duplicates = 0;
        for (auto count : padded_counts) {
          BOOST_REQUIRE(count >= 1);
          duplicates += count - 1;
        }
        BOOST_REQUIRE(duplicates == (replicas - 1) * (n % replicas));
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(orders_depend_on_seed_and_epoch_only) {
  for (Partition partition : {Partition::strided, Partition::contiguous}) {
    const auto options = options_with(partition, true, false, 42);
    for (int replicas : {1, 4, 8}) {  // divide 1000: no padding
      const auto epoch0 = all_ranks(1000, replicas, options, 0);
      const auto epoch0_again = all_ranks(1000, replicas, options, 0);
      const auto epoch1 = all_ranks(1000, replicas, options, 1);
      const auto other_seed =
          all_ranks(1000, replicas, options_with(partition, true, false, 43), 0);
      for (int r = 0; r < replicas; ++r) {
        BOOST_TEST(epoch0[r] == epoch0_again[r], boost::test_tools::per_element());
        BOOST_TEST(epoch0[r] != epoch1[r]);
        BOOST_TEST(epoch0[r] != other_seed[r]);
        if (r > 0) {
          // Different ranks, different samples: disjoint here since 1000 needs no padding at 8.
          Indices a = epoch0[r - 1], b = epoch0[r];
          std::sort(a.begin(), a.end());
          std::sort(b.begin(), b.end());
          Indices common;
          std::set_intersection(a.begin(), a.end(), b.begin(), b.end(), std::back_inserter(common));
          BOOST_TEST(common.empty());
        }
      }
    }
    // In the strided partition a sample moves between ranks from one epoch to the next (the
    // seed's per-rank chunks never did).
    if (partition == Partition::strided) {
      const auto epoch0 = all_ranks(1000, 4, options, 0);
      const auto epoch1 = all_ranks(1000, 4, options, 1);
      Indices a = epoch0[0], b = epoch1[0];
      std::sort(a.begin(), a.end());
      std::sort(b.begin(), b.end());
      BOOST_TEST(a != b);
    }
  }
}

BOOST_AUTO_TEST_CASE(each_index_lands_in_each_position_uniformly,
                     *boost::unit_test::precondition(one_process_job_without_sanitizers)) {
  // Over many seeds, count how often index i sits at position p. For a uniform shuffle the
  // counts are multinomial; sum of (observed - expected)^2 / expected over all cells is close to
  // a chi-square with n(n-1) degrees of freedom. The bound is mean + 8 standard deviations: far
  // from flaky (seeds are fixed anyway) and still far below what a biased shuffle gives (a
  // 6-round network on 5 elements measured z = 31).
  const int kSeeds = 20000;
  for (std::int64_t n : {2, 3, 5, 7, 10, 13, 33}) {
    for (Partition partition : {Partition::strided, Partition::contiguous}) {
      std::vector<double> counts(static_cast<std::size_t>(n * n), 0.0);
      for (int seed = 0; seed < kSeeds; ++seed) {
        // The contiguous partition on 2 replicas of 2n samples: rank 1 shuffles [n, 2n).
        const bool strided = partition == Partition::strided;
        DistributedSampler sampler(strided ? n : 2 * n, strided ? 1 : 2, strided ? 0 : 1,
                                   options_with(partition, true, false, seed));
        sampler.set_epoch(seed % 3);
        for (std::int64_t p = 0; p < n; ++p) {
          const std::int64_t index = sampler.index(p) - (strided ? 0 : n);
          counts[static_cast<std::size_t>(index * n + p)] += 1;
        }
      }
      const double expected = static_cast<double>(kSeeds) / n;
      double chi_square = 0;
      for (double count : counts) {
        chi_square += (count - expected) * (count - expected) / expected;
      }
      const double df = static_cast<double>(n * (n - 1));
      BOOST_TEST_MESSAGE("n=" << n << " " << name_of(partition) << " chi2=" << chi_square
                              << " df=" << df);
      BOOST_TEST(chi_square < df + 8 * std::sqrt(2 * df) + 10,
                 "n=" << n << " " << name_of(partition) << ": chi-square " << chi_square << " for "
                      << df << " degrees of freedom");
    }
  }
  // A large dataset: where do 8 given indices land, in 16 bins of positions.
  const std::int64_t n = 1000003;
  const int bins = 16, tracked = 8, seeds = 4000;
  std::vector<double> counts(bins * tracked, 0.0);
  for (int seed = 0; seed < seeds; ++seed) {
    IndexPermutation permutation(n, static_cast<std::uint64_t>(seed), 0);
    for (int i = 0; i < tracked; ++i) {
      const std::uint64_t position = permutation.inverse(static_cast<std::uint64_t>(i * 99991));
      counts[i * bins + static_cast<int>(position * bins / n)] += 1;
    }
  }
  double chi_square = 0;
  for (int i = 0; i < tracked; ++i) {
    for (int b = 0; b < bins; ++b) {
      const double lo = std::ceil(static_cast<double>(b) * n / bins);
      const double hi = std::ceil(static_cast<double>(b + 1) * n / bins);
      const double expected = seeds * (hi - lo) / n;
      chi_square += std::pow(counts[i * bins + b] - expected, 2) / expected;
    }
  }
  const double df = tracked * (bins - 1);
  BOOST_TEST(chi_square < df + 8 * std::sqrt(2 * df) + 10, "chi-square " << chi_square);
}

BOOST_AUTO_TEST_CASE(strided_resume_at_another_world_size_continues_the_global_order,
                     *boost::unit_test::precondition(one_process_job)) {
  for (bool drop_last : {false, true}) {
    const auto options = options_with(Partition::strided, true, drop_last, 99);
    for (std::int64_t n : {10, 101, 1000}) {
      const Indices order =
          all_ranks(n, 1, options_with(Partition::strided, true, false, 99), 5)[0];
      for (int before : {1, 2, 3, 4, 8}) {
        for (int after : {1, 2, 3, 4, 7, 16}) {
          // First run: `before` ranks take `taken` steps of epoch 5, then save.
          DistributedSampler first(n, before, 0, options);
          first.set_epoch(5);
          const std::int64_t taken = first.length() / 2;
          const SamplerState state = first.state_after(taken);
          BOOST_REQUIRE(state.samples_consumed == taken * before);
          std::vector<std::int64_t> counts(static_cast<std::size_t>(n));
          for (int r = 0; r < before; ++r) {
            DistributedSampler sampler(n, before, r, options);
            sampler.set_epoch(5);
            BOOST_REQUIRE(sampler.state_after(taken) == state);  // every rank writes the same
            for (std::int64_t i = 0; i < taken; ++i) {
              ++counts[sampler.index(i)];
            }
          }
          // Second run on `after` ranks, another seed in its options: the state's seed wins.
          const std::int64_t consumed = state.samples_consumed;
          const std::int64_t remaining = n - consumed;
          const std::int64_t per_rank =
              drop_last ? remaining / after : (remaining + after - 1) / after;
          for (int r = 0; r < after; ++r) {
            DistributedSampler sampler(n, after, r,
                                       options_with(Partition::strided, true, drop_last, 1));
            sampler.restore(state);
            sampler.set_epoch(5);  // the usual loop: keeps the restored position
            BOOST_REQUIRE(sampler.epoch() == 5);
            BOOST_REQUIRE(sampler.length() == per_rank);
            for (std::int64_t i = 0; i < per_rank; ++i) {
              const std::int64_t position = consumed + r + i * after;
              BOOST_REQUIRE(sampler.index(i) == order[position % n]);
              ++counts[sampler.index(i)];
            }
          }
          // Nothing of the epoch repeated or skipped, except the second run's own padding
          // (repeats) or drop_last tail (skips).
          std::int64_t zeros = 0, repeats = 0;
          for (auto count : counts) {
            zeros += count == 0;
            repeats += std::max<std::int64_t>(count - 1, 0);
          }
          const std::int64_t total = per_rank * after;
          BOOST_REQUIRE(zeros == std::max<std::int64_t>(remaining - total, 0));
          BOOST_REQUIRE(repeats == std::max<std::int64_t>(total - remaining, 0));
        }
      }
    }
  }
}

// With a batch_size the epoch is cut into global batches: batch s is positions
// [s * B, (s + 1) * B) of the epoch's order, short at the end (dropped with drop_last), never
// padded, and rank r takes positions s * B + r + j * N of it. The batches are the same at every
// world size.
namespace {

// Step s of every rank put back into global positions: out[p - s * B] = the index at position p.
Indices global_batch_of(const std::vector<DistributedSampler>& ranks, std::int64_t s) {
  const auto replicas = static_cast<std::int64_t>(ranks.size());
  const SamplerStep first = ranks[0].step(s);
  Indices out(static_cast<std::size_t>(first.samples), -1);
  for (std::int64_t r = 0; r < replicas; ++r) {
    const SamplerStep mine = ranks[static_cast<std::size_t>(r)].step(s);
    BOOST_REQUIRE(mine.samples == first.samples);  // every rank knows the global batch
    for (std::int64_t i = mine.begin; i < mine.end; ++i) {
      const std::int64_t at = r + (i - mine.begin) * replicas;
      BOOST_REQUIRE(at < first.samples);
      out[static_cast<std::size_t>(at)] = ranks[static_cast<std::size_t>(r)].index(i);
    }
  }
  BOOST_REQUIRE(std::count(out.begin(), out.end(), -1) == 0);  // no hole
  return out;
}

std::vector<DistributedSampler> batched_ranks(std::int64_t n, int replicas,
                                              const SamplerOptions& options, std::int64_t epoch) {
  std::vector<DistributedSampler> out;
  for (int r = 0; r < replicas; ++r) {
    out.emplace_back(n, replicas, r, options);
    out.back().set_epoch(epoch);
  }
  return out;
}

}  // namespace

BOOST_AUTO_TEST_CASE(global_batches_do_not_depend_on_the_replicas,
                     *boost::unit_test::precondition(one_process_job)) {
  for (bool drop_last : {false, true}) {
    for (std::int64_t n : {1, 7, 12, 13, 101, 250}) {
      for (std::int64_t batch : {12, 120}) {
        SamplerOptions options = options_with(Partition::strided, true, drop_last, 11);
        options.batch_size = batch;
        const Indices order = all_ranks(n, 1, options_with(Partition::strided, true, false, 11),
                                        2)[0];  // the epoch's order
        const std::int64_t end = drop_last ? n / batch * batch : n;
        for (int replicas : {1, 2, 3, 4, 6, 12}) {
          const auto ranks = batched_ranks(n, replicas, options, 2);
          BOOST_REQUIRE(ranks[0].steps() == (end + batch - 1) / batch);
          std::vector<std::int64_t> counts(static_cast<std::size_t>(n));
          std::int64_t length = 0;
          for (const auto& rank : ranks) {
            BOOST_REQUIRE(rank.steps() == ranks[0].steps());
            length += rank.length();
          }
          BOOST_REQUIRE(length == end);  // nothing padded
          for (std::int64_t s = 0; s < ranks[0].steps(); ++s) {
            const Indices global = global_batch_of(ranks, s);
            BOOST_REQUIRE(static_cast<std::int64_t>(global.size()) ==
                          std::min(batch, end - s * batch));
            for (std::size_t k = 0; k < global.size(); ++k) {
              BOOST_REQUIRE(global[k] == order[static_cast<std::size_t>(s * batch) + k]);
              ++counts[static_cast<std::size_t>(global[k])];
            }
          }
          // Every sample of the epoch once (drop_last: the last partial batch's never).
          for (std::int64_t p = 0; p < n; ++p) {
            BOOST_REQUIRE(counts[static_cast<std::size_t>(order[p])] == (p < end ? 1 : 0));
          }
        }
      }
    }
  }
  // The seed of this change: 6554 samples in batches of 120 end with a batch of 74, which the
  // unbatched sampler made 76 on 4 ranks (2 repeats) and 75 on 3.
  SamplerOptions options;
  options.batch_size = 120;
  for (int replicas : {3, 4}) {
    DistributedSampler sampler(6554, replicas, 0, options);
    BOOST_TEST(sampler.steps() == 55);
    BOOST_TEST(sampler.step(54).samples == 74);
    BOOST_TEST(sampler.step(53).samples == 120);
    BOOST_TEST(sampler.step(54).end - sampler.step(54).begin == (replicas == 4 ? 19 : 25));
  }
}

BOOST_AUTO_TEST_CASE(global_batches_resume_at_another_world_size,
                     *boost::unit_test::precondition(one_process_job)) {
  for (bool drop_last : {false, true}) {
    SamplerOptions options = options_with(Partition::strided, true, drop_last, 5);
    options.batch_size = 12;
    for (std::int64_t n : {13, 101, 250}) {
      const auto whole = batched_ranks(n, 1, options, 3);
      for (int before : {1, 2, 3, 4, 6}) {
        const auto first = batched_ranks(n, before, options, 3);
        const std::int64_t taken = first[0].steps() / 2;
        const SamplerState state = first[0].state_after_steps(taken);
        for (const auto& rank : first) {
          BOOST_REQUIRE(rank.state_after_steps(taken) == state);  // every rank writes the same
        }
        BOOST_REQUIRE(state.samples_consumed == taken * 12);
        for (int after : {1, 2, 3, 4, 6, 12}) {
          std::vector<DistributedSampler> second;
          for (int r = 0; r < after; ++r) {
            SamplerOptions other_seed = options;
            other_seed.seed = 1;  // the state's seed wins
            second.emplace_back(n, after, r, other_seed);
            second.back().restore(state);
            second.back().set_epoch(3);  // keeps the restored position
          }
          BOOST_REQUIRE(second[0].steps() == whole[0].steps() - taken);
          for (std::int64_t s = 0; s < second[0].steps(); ++s) {
            BOOST_REQUIRE(global_batch_of(second, s) == global_batch_of(whole, taken + s));
          }
          // Both end where the epoch ends (only the recorded world size differs).
          SamplerState end = whole[0].state_after_steps(whole[0].steps());
          end.replicas = after;
          BOOST_REQUIRE(second[0].state_after_steps(second[0].steps()) == end);
        }
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(global_batch_errors_say_what_is_wrong) {
  SamplerOptions options;
  options.batch_size = 10;
  BOOST_CHECK_EXCEPTION(DistributedSampler(100, 4, 0, options), Error,
                        message_has({"batch_size 10 cannot be split evenly over 4 replicas",
                                     "give a multiple of 4"}));
  options.batch_size = -1;
  BOOST_CHECK_EXCEPTION(DistributedSampler(100, 4, 0, options), Error,
                        message_has({"batch_size must be >= 0", "got -1"}));
  options.batch_size = 8;
  options.partition = Partition::contiguous;
  BOOST_CHECK_EXCEPTION(DistributedSampler(100, 4, 0, options), Error,
                        message_has({"batch_size 8 needs the strided partition"}));
  options.partition = Partition::strided;
  DistributedSampler sampler(100, 4, 0, options);  // 13 steps, the last of 4 samples
  BOOST_TEST(sampler.steps() == 13);
  BOOST_TEST(sampler.global_batch() == 8);
  BOOST_TEST(DistributedSampler(100, 4, 0).global_batch() == 4);  // one sample per rank
  BOOST_CHECK_EXCEPTION(sampler.step(13), Error,
                        message_has({"step 13 is out of range", "must be in [0, 13)"}));
  BOOST_CHECK_EXCEPTION(sampler.state_after_steps(14), Error,
                        message_has({"state_after_steps(14)", "[0, steps() = 13]"}));
  // A position inside a global batch (another batch size wrote it) is refused, naming why.
  SamplerState inside = sampler.state_after_steps(2);
  inside.samples_consumed = 12;
  BOOST_CHECK_EXCEPTION(sampler.restore(inside), Error,
                        message_has({"not at a global batch boundary of batch_size 8",
                                     "written with another batch size"}));
  // A state of an unbatched sampler (a checkpoint written before batch_size existed) loads when
  // it is at a batch boundary, or at or past the epoch's end (its padding).
  DistributedSampler unbatched(100, 4, 0);
  sampler.restore(unbatched.state_after(4));  // 16 samples: 2 global batches of 8
  BOOST_TEST(sampler.steps() == 11);
  sampler.restore(unbatched.state_after(unbatched.length()));
  BOOST_TEST(sampler.steps() == 0);
  BOOST_TEST(sampler.length() == 0);
}

BOOST_AUTO_TEST_CASE(contiguous_resume_on_the_same_world_size) {
  const auto options = options_with(Partition::contiguous, true, false, 5);
  const std::int64_t n = 103;
  const int replicas = 4;
  for (int r = 0; r < replicas; ++r) {
    DistributedSampler first(n, replicas, r, options);
    first.set_epoch(2);
    const SamplerState state = first.state_after(10);
    DistributedSampler second(n, replicas, r, options);
    second.restore(state);
    BOOST_REQUIRE(second.length() == first.length() - 10);
    for (std::int64_t i = 0; i < second.length(); ++i) {
      BOOST_REQUIRE(second.index(i) == first.index(10 + i));
    }
    // Another world size mid-epoch is refused; at the start of an epoch it is fine.
    DistributedSampler other(n, replicas + 1, 0, options);
    BOOST_CHECK_EXCEPTION(other.restore(state), Error,
                          message_has({"on 5 replicas", "depend on the number of replicas"}));
    other.restore(first.state_after(0));
    BOOST_TEST(other.epoch() == 2);
  }
}

BOOST_AUTO_TEST_CASE(state_words_round_trip) {
  SamplerState state;
  state.seed = 0xfedcba9876543210ULL;  // the top bit set: stored as a negative word
  state.epoch = 12;
  state.samples_consumed = 3000000000LL;
  state.dataset_size = 5000000000LL;
  state.replicas = 64;
  BOOST_TEST(SamplerState::from_words(state.to_words()) == state);
}

BOOST_AUTO_TEST_CASE(a_billion_samples_in_constant_memory) {
  // Nothing proportional to the dataset is stored: the sampler is a few words whatever the size.
  static_assert(sizeof(DistributedSampler) < 256, "the sampler must not grow with the dataset");
  const std::int64_t n = 6000000000LL;  // beyond 32 bits
  SamplerOptions options;
  options.seed = 1;
  DistributedSampler sampler(n, 1000, 999, options);
  BOOST_TEST(sampler.length() == 6000000);
  Indices first(1000);
  for (std::int64_t i = 0; i < 1000; ++i) {
    first[i] = sampler.index(i);
    BOOST_REQUIRE(first[i] >= 0 && first[i] < n);
  }
  std::sort(first.begin(), first.end());
  BOOST_TEST((std::adjacent_find(first.begin(), first.end()) == first.end()));
  BOOST_TEST(first.back() > (std::int64_t{1} << 32));  // the high bits are used
}

// ---- across the ranks of the job ----

BOOST_AUTO_TEST_CASE(ranks_agree_through_the_group) {
  ProcessGroup group(MPI_COMM_WORLD);
  const int n_ranks = group.size();
  for (Partition partition : {Partition::strided, Partition::contiguous}) {
    SamplerOptions options = options_with(partition, true, false);
    options.seed = 1000;
    DistributedSampler sampler(group, 1001, options);
    BOOST_TEST(sampler.seed() == 1000u);
    BOOST_TEST(sampler.replicas() == n_ranks);
    BOOST_TEST(sampler.rank() == group.rank());
    sampler.set_epoch(3);
    BOOST_TEST(sampler.epoch() == 3);

    // Equal lengths (lock step), and together the ranks cover the dataset.
    const std::int64_t length = sampler.length();
    std::vector<std::int64_t> lengths(n_ranks);
    group.all_gather(Kokkos::DefaultHostExecutionSpace(), host_view(&length, 1),
                     host_view(lengths.data(), lengths.size()));
    BOOST_TEST(std::all_of(lengths.begin(), lengths.end(), [&](auto l) { return l == length; }));
    const Indices mine = indices_of(sampler);
    Indices everyone(static_cast<std::size_t>(length * n_ranks));
    group.all_gather(Kokkos::DefaultHostExecutionSpace(), host_view(mine.data(), mine.size()),
                     host_view(everyone.data(), everyone.size()));
    const auto counts = counts_of({everyone}, 1001);
    std::int64_t duplicates = 0;
    for (auto count : counts) {
      BOOST_REQUIRE(count >= 1);
      duplicates += count - 1;
    }
    BOOST_TEST(duplicates == length * n_ranks - 1001);

    // The same as a sampler built without the group from the agreed values.
    options.seed = 1000;
    DistributedSampler local(1001, n_ranks, group.rank(), options);
    local.set_epoch(3);
    BOOST_TEST(indices_of(local) == mine, boost::test_tools::per_element());

    SamplerState state = sampler.state_after(1);
    sampler.restore(state);
    BOOST_TEST(sampler.length() == length - 1);
  }
  // Global batches of 12 over 1001 samples: no padding, the last batch of 5 shared unevenly, and
  // every rank agrees on the steps and each global batch's size.
  SamplerOptions options;
  options.batch_size = 12;
  DistributedSampler sampler(group, 1001, options);
  const std::int64_t facts[3] = {sampler.steps(), sampler.step(sampler.steps() - 1).samples,
                                 sampler.state_after_steps(3).samples_consumed};
  std::vector<std::int64_t> all(3 * static_cast<std::size_t>(n_ranks));
  group.all_gather(Kokkos::DefaultHostExecutionSpace(), host_view(facts, 3),
                   host_view(all.data(), all.size()));
  for (int r = 0; r < n_ranks; ++r) {
    BOOST_TEST(all[3 * r] == 84);
    BOOST_TEST(all[3 * r + 1] == 5);
    BOOST_TEST(all[3 * r + 2] == 36);
  }
  const Indices mine = indices_of(sampler);
  const std::int64_t length = sampler.length();
  std::vector<std::int64_t> lengths(n_ranks);
  group.all_gather(Kokkos::DefaultHostExecutionSpace(), host_view(&length, 1),
                   host_view(lengths.data(), lengths.size()));
  BOOST_TEST(std::accumulate(lengths.begin(), lengths.end(), std::int64_t{0}) == 1001);
  Indices everyone(1001);
  group.all_gather_v(Kokkos::DefaultHostExecutionSpace(), host_view(mine.data(), mine.size()),
                     host_view(everyone.data(), everyone.size()),
                     std::vector<std::size_t>(lengths.begin(), lengths.end()));
  const auto counts = counts_of({everyone}, 1001);
  BOOST_TEST(std::all_of(counts.begin(), counts.end(), [](auto c) { return c == 1; }));
}

// set_epoch and restore agree like the constructor: ranks that pass different values all throw,
// naming the first that differs, instead of quietly taking one rank's.
BOOST_AUTO_TEST_CASE(ranks_that_disagree_on_the_epoch_or_state_all_throw) {
  ProcessGroup group(MPI_COMM_WORLD);
  if (group.size() < 2) {
    return;
  }
  const std::string last = std::to_string(group.size() - 1);
  const bool odd_one = group.rank() == group.size() - 1;
  DistributedSampler sampler(group, 1000);
  const std::int64_t length = sampler.length();
  BOOST_CHECK_EXCEPTION(sampler.set_epoch(odd_one ? 4 : 3), Error, [&](const Error& error) {
    return error.kind() == ErrorKind::mismatch &&
           message_has({"ranks disagree on the sampler epoch: epoch is 3 on rank 0 but 4 on rank " +
                        last})(error);
  });
  BOOST_TEST(sampler.epoch() == 0);  // unchanged on every rank
  SamplerState state = sampler.state_after(odd_one ? 2 : 1);
  BOOST_CHECK_EXCEPTION(sampler.restore(state), Error, [&](const Error& error) {
    return error.kind() == ErrorKind::mismatch &&
           message_has({"ranks disagree on the sampler state: samples_consumed is " +
                        std::to_string(group.size()) + " on rank 0 but " +
                        std::to_string(2 * group.size()) + " on rank " + last})(error);
  });
  BOOST_TEST(sampler.length() == length);  // not restored on any rank
}

BOOST_AUTO_TEST_CASE(ranks_that_disagree_on_the_dataset_all_throw) {
  ProcessGroup group(MPI_COMM_WORLD);
  if (group.size() < 2) {
    return;
  }
  const std::int64_t size = group.rank() == 1 ? 999 : 1000;
  BOOST_CHECK_EXCEPTION(DistributedSampler(group, size), Error, [](const Error& error) {
    return error.kind() == ErrorKind::mismatch &&
           message_has({"ranks disagree on the sampler options: dataset_size is 1000 on rank 0 but "
                        "999 on rank 1; every rank must pass the same sampler options"})(error);
  });
  // A seed of its own on one rank (from its clock, say) would shuffle differently there: the
  // ranks would visit overlapping samples and miss others. The last rank's differs.
  SamplerOptions options;
  options.seed = group.rank() == group.size() - 1 ? 8 : 7;
  const std::string last = std::to_string(group.size() - 1);
  BOOST_CHECK_EXCEPTION(
      DistributedSampler(group, 1000, options), Error,
      message_has(
          {"ranks disagree on the sampler options: seed is 7 on rank 0 but 8 on rank " + last}));
  // And a bad argument everywhere throws everywhere, after the agreement.
  BOOST_CHECK_EXCEPTION(DistributedSampler(group, 0), Error,
                        message_has({"dataset_size must be at least 1"}));
}
