// A token from another rank, received by polling with MPI_Test for at most a given time: for
// tests in which the rank that waits must not block forever when the token never comes.
#pragma once

#include <mpi.h>

#include <chrono>

namespace fsdp::test {

// True when an int from source arrived in token (tag, comm) within `limit`.
inline bool token_within(int& token, int source, int tag, MPI_Comm comm,
                         std::chrono::seconds limit) {
  MPI_Request request = MPI_REQUEST_NULL;
  if (MPI_Irecv(&token, 1, MPI_INT, source, tag, comm, &request) != MPI_SUCCESS) {
    return false;
  }
  const auto deadline = std::chrono::steady_clock::now() + limit;
  int arrived = 0;
  while (!arrived && std::chrono::steady_clock::now() < deadline) {
    if (MPI_Test(&request, &arrived, MPI_STATUS_IGNORE) != MPI_SUCCESS) {
      break;
    }
  }
  if (!arrived) {
    MPI_Cancel(&request);
    MPI_Request_free(&request);
  }
  return arrived != 0;
}

}  // namespace fsdp::test
