// Device selection on one node: node-local ranks, SLURM_LOCALID, rank -> device, and the errors
// for too many ranks or no device, which every rank must see.
#include <mpi.h>

#include <boost/test/unit_test.hpp>
#include <cstdlib>
#include <optional>
#include <string>

#include "error_message.hpp"
#include "fsdp/comm/device_selection.hpp"

using namespace fsdp;
using fsdp::test::message_has;

namespace {

int world_rank() {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}

int world_size() {
  int size = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  return size;
}

// Sets SLURM_LOCALID (or unsets it for nullopt) for one test and restores what was there, so the
// tests behave the same under srun, which sets it.
class SlurmLocalId {
 public:
  explicit SlurmLocalId(const std::optional<std::string>& value) {
    if (const char* old = std::getenv("SLURM_LOCALID")) {
      saved_ = old;
    }
    set(value);
  }
  ~SlurmLocalId() { set(saved_); }
  SlurmLocalId(const SlurmLocalId&) = delete;
  SlurmLocalId& operator=(const SlurmLocalId&) = delete;

 private:
  static void set(const std::optional<std::string>& value) {
    if (value) {
      setenv("SLURM_LOCALID", value->c_str(), 1);
    } else {
      unsetenv("SLURM_LOCALID");
    }
  }
  std::optional<std::string> saved_;
};

}  // namespace

// The test runs on one node: every rank of MPI_COMM_WORLD is node-local, in world order.
BOOST_AUTO_TEST_CASE(local_ranks_are_world_ranks_on_one_node) {
  const SlurmLocalId unset(std::nullopt);
  BOOST_TEST(local_rank(MPI_COMM_WORLD) == world_rank());
  const NodeLocalRank local = node_local_rank(MPI_COMM_WORLD);
  BOOST_TEST(local.rank == world_rank());
  BOOST_TEST(local.size == world_size());
  BOOST_TEST((local.source == LocalRankSource::mpi));
}

BOOST_AUTO_TEST_CASE(local_rank_of_a_sub_communicator) {
  // Odd and even world ranks: the local rank counts within the communicator given.
  MPI_Comm half = MPI_COMM_NULL;
  BOOST_REQUIRE(MPI_Comm_split(MPI_COMM_WORLD, world_rank() % 2, world_rank(), &half) ==
                MPI_SUCCESS);
  BOOST_TEST(local_rank(half) == world_rank() / 2);
  MPI_Comm_free(&half);
}

BOOST_AUTO_TEST_CASE(slurm_localid_wins_when_it_numbers_the_node) {
  // Reversed numbering: different from MPI's, so the test sees which one was used.
  const int reversed = world_size() - 1 - world_rank();
  const SlurmLocalId id(std::to_string(reversed));
  const NodeLocalRank local = node_local_rank(MPI_COMM_WORLD);
  BOOST_TEST(local.rank == reversed);
  BOOST_TEST(local.size == world_size());
  BOOST_TEST((local.source == LocalRankSource::slurm));
  // local_rank is MPI's numbering whatever Slurm says.
  BOOST_TEST(local_rank(MPI_COMM_WORLD) == world_rank());
}

BOOST_AUTO_TEST_CASE(slurm_localid_ignored_when_inconsistent) {
  // The same id on every rank (inherited from an enclosing step): not a numbering of the node.
  if (world_size() > 1) {
    const SlurmLocalId same("0");
    const NodeLocalRank local = node_local_rank(MPI_COMM_WORLD);
    BOOST_TEST(local.rank == world_rank());
    BOOST_TEST((local.source == LocalRankSource::mpi));
  }
  {
    // Set on some ranks only.
    const SlurmLocalId partial(world_rank() == 0 ? std::nullopt
                                                 : std::optional<std::string>(std::to_string(
                                                       world_size() - 1 - world_rank())));
    const NodeLocalRank local = node_local_rank(MPI_COMM_WORLD);
    BOOST_TEST(local.rank == world_rank());
    BOOST_TEST((local.source == LocalRankSource::mpi));
  }
  {
    // Not a number, or out of range.
    const SlurmLocalId garbage(world_rank() == 0 ? "x" : std::to_string(world_size()));
    const NodeLocalRank local = node_local_rank(MPI_COMM_WORLD);
    BOOST_TEST(local.rank == world_rank());
    BOOST_TEST((local.source == LocalRankSource::mpi));
  }
}

BOOST_AUTO_TEST_CASE(one_device_per_rank) {
  const SlurmLocalId unset(std::nullopt);
  BOOST_TEST(select_device(MPI_COMM_WORLD, world_size()) == world_rank());
  BOOST_TEST(select_device(MPI_COMM_WORLD, world_size() + 3) == world_rank());
}

BOOST_AUTO_TEST_CASE(two_devices_shared_round_robin) {
  const SlurmLocalId unset(std::nullopt);
  DeviceSelectionOptions sharing;
  sharing.allow_sharing = true;
  BOOST_TEST(select_device(MPI_COMM_WORLD, 2, sharing) == world_rank() % 2);
}

BOOST_AUTO_TEST_CASE(device_follows_slurm_localid) {
  const int reversed = world_size() - 1 - world_rank();
  const SlurmLocalId id(std::to_string(reversed));
  BOOST_TEST(select_device(MPI_COMM_WORLD, world_size()) == reversed);
}

BOOST_AUTO_TEST_CASE(more_ranks_than_devices_fails_on_every_rank) {
  const SlurmLocalId unset(std::nullopt);
  if (world_size() <= 2) {
    BOOST_TEST(select_device(MPI_COMM_WORLD, 2) == world_rank());
    return;
  }
  BOOST_CHECK_EXCEPTION(
      select_device(MPI_COMM_WORLD, 2), Error,
      message_has("fsdp: select_device: a node runs up to " + std::to_string(world_size() - 2) +
                  " more ranks than it has GPU devices (this rank's node: " +
                  std::to_string(world_size()) + " ranks, 2 devices)"));
}

BOOST_AUTO_TEST_CASE(a_rank_without_devices_fails_on_every_rank) {
  const SlurmLocalId unset(std::nullopt);
  const int count = world_rank() == world_size() - 1 ? 0 : world_size();
  BOOST_CHECK_EXCEPTION(select_device(MPI_COMM_WORLD, count), Error,
                        message_has("fsdp: select_device: a rank sees no GPU device (this rank: "
                                    "device_count " +
                                    std::to_string(count) + ")"));
}

BOOST_AUTO_TEST_CASE(kokkos_settings_carry_the_device) {
  const KokkosInitSettings settings = with_device_id(KokkosInitSettings{}, 3);
#if KOKKOS_VERSION >= 30700
  BOOST_TEST(settings.has_device_id());
  BOOST_TEST(settings.get_device_id() == 3);
#else
  BOOST_TEST(settings.device_id == 3);
#endif
  BOOST_CHECK_EXCEPTION(with_device_id(KokkosInitSettings{}, -1), Error,
                        message_has("fsdp: with_device_id: device id -1 is negative"));
}

BOOST_AUTO_TEST_CASE(host_build_settings_have_no_device) {
#ifdef KOKKOS_ENABLE_CUDA
  BOOST_TEST_MESSAGE("Kokkos has CUDA: the device comes from the GPUs this process sees");
#else
  BOOST_TEST(visible_device_count() == 0);
  const KokkosInitSettings settings = kokkos_settings_for_local_device(MPI_COMM_WORLD);
#if KOKKOS_VERSION >= 30700
  BOOST_TEST(!settings.has_device_id());
#else
  BOOST_TEST(settings.device_id == -1);
#endif
#endif
}
