#include "communicator.hpp"

#include <cstdio>
#include <string>
#include <utility>

#include "fsdp/core/error.hpp"
#include "mpi_types.hpp"

namespace fsdp::detail {

Communicator Communicator::duplicate(MPI_Comm comm, const char* who) {
  require(comm != MPI_COMM_NULL,
          std::string(who) + " needs a valid communicator, got MPI_COMM_NULL");
  int initialized = 0;
  mpi::check(MPI_Initialized(&initialized), "MPI_Initialized");
  require(initialized != 0,
          std::string(who) + " created before MPI_Init; initialize MPI (and Kokkos) first");
  Communicator result;
  mpi::check(MPI_Comm_dup(comm, &result.comm_), "MPI_Comm_dup");
  result.adopt_created();
  return result;
}

Communicator Communicator::split(int color, int key) const {
  Communicator result;
  mpi::check(MPI_Comm_split(comm_, color, key, &result.comm_), "MPI_Comm_split", rank_);
  result.adopt_created();
  return result;
}

Communicator Communicator::split_node_local() const {
  Communicator result;
  mpi::check(MPI_Comm_split_type(comm_, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &result.comm_),
             "MPI_Comm_split_type", rank_);
  result.adopt_created();
  return result;
}

// When a call here throws, the caller's Communicator already owns comm_ and frees it.
void Communicator::adopt_created() {
  mpi::check(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
  mpi::check(MPI_Comm_rank(comm_, &rank_), "MPI_Comm_rank");
  mpi::check(MPI_Comm_size(comm_, &size_), "MPI_Comm_size");
}

Communicator::~Communicator() {
  free();
}

Communicator::Communicator(Communicator&& other) noexcept
    : comm_(std::exchange(other.comm_, MPI_COMM_NULL)), rank_(other.rank_), size_(other.size_) {}

Communicator& Communicator::operator=(Communicator&& other) noexcept {
  if (this != &other) {
    free();
    comm_ = std::exchange(other.comm_, MPI_COMM_NULL);
    rank_ = other.rank_;
    size_ = other.size_;
  }
  return *this;
}

void Communicator::abandon() {
  comm_ = MPI_COMM_NULL;
}

void Communicator::free() {
  if (comm_ == MPI_COMM_NULL) {
    return;
  }
  int finalized = 1;  // when MPI cannot even say, freeing is the riskier choice
  if (MPI_Finalized(&finalized) != MPI_SUCCESS || finalized) {
    comm_ = MPI_COMM_NULL;
    return;
  }
  // Destructors must not throw: a failure is printed, like Work's.
  try {
    mpi::check(MPI_Comm_free(&comm_), "MPI_Comm_free", rank_);
  } catch (const std::exception& error) {
    std::fprintf(stderr, "%s\n", error.what());
  }
  comm_ = MPI_COMM_NULL;
}

}  // namespace fsdp::detail
