// PairwiseMinimum, the all-reduce under every collective's signature check: each rank gets the
// minimum of both words over every rank, at sizes that are and are not powers of two (the ranks
// that pair up first, and the exchange rounds), with many in flight at once and polled in any
// order when their tags differ.
#include <mpi.h>

#include <boost/test/unit_test.hpp>
#include <cstdint>
#include <memory>
#include <vector>

#include "pairwise_minimum.hpp"

using fsdp::detail::PairwiseMinimum;

namespace {

int rank_of(MPI_Comm comm) {
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  return rank;
}

int size_of(MPI_Comm comm) {
  int size = 0;
  MPI_Comm_size(comm, &size);
  return size;
}

// Round k's words on rank r: the least of word 0 sits on rank k % n and of word 1 on rank
// (k * 7 + 3) % n, so every position of the minimum is tried and the two words differ in it.
std::int64_t word(int k, int which, int rank, int size) {
  const int holder = which == 0 ? k % size : (k * 7 + 3) % size;
  return rank == holder ? -1000 - k : 1000 + 10 * rank + which;
}

void check_round(const PairwiseMinimum& minimum, int k) {
  BOOST_TEST(minimum.words()[0] == -1000 - k, "round " << k);
  BOOST_TEST(minimum.words()[1] == -1000 - k, "round " << k);
}

}  // namespace

BOOST_AUTO_TEST_CASE(every_rank_gets_the_minimum_of_each_word) {
  const int rank = rank_of(MPI_COMM_WORLD);
  const int size = size_of(MPI_COMM_WORLD);
  for (int k = 0; k < 2 * size + 3; ++k) {
    const std::int64_t words[2] = {word(k, 0, rank, size), word(k, 1, rank, size)};
    PairwiseMinimum minimum(MPI_COMM_WORLD, 100, words);
    while (!minimum.poll()) {
    }
    check_round(minimum, k);
  }
}

// One tag: started in the same order on every rank and polled in that order, as the guard does.
// Different tags: polled last to first.
BOOST_AUTO_TEST_CASE(many_in_flight_complete_with_their_own_words) {
  const int rank = rank_of(MPI_COMM_WORLD);
  const int size = size_of(MPI_COMM_WORLD);
  for (const bool own_tags : {false, true}) {
    std::vector<std::unique_ptr<PairwiseMinimum>> started;
    for (int k = 0; k < 40; ++k) {
      const std::int64_t words[2] = {word(k, 0, rank, size), word(k, 1, rank, size)};
      started.push_back(
          std::make_unique<PairwiseMinimum>(MPI_COMM_WORLD, own_tags ? 200 + k : 100, words));
    }
    if (own_tags) {
      for (int k = 39; k >= 0; --k) {
        while (!started[static_cast<std::size_t>(k)]->poll()) {
        }
      }
    } else {
      for (auto& minimum : started) {
        while (!minimum->poll()) {
        }
      }
    }
    for (int k = 0; k < 40; ++k) {
      BOOST_TEST_CONTEXT("own tags " << own_tags) {
        check_round(*started[static_cast<std::size_t>(k)], k);
      }
    }
  }
}
