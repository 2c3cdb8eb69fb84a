/* A C consumer of the installed fsdp: fsdp/fsdp.h and libfsdp, no C++ compiler in the project.
 * One parameter sharded over the ranks and read back whole. */
#include <fsdp/fsdp.h>
#include <mpi.h>
#include <stdio.h>

#define CHECK(call)                                                                      \
  do {                                                                                   \
    int code_ = (call);                                                                  \
    if (code_ != FSDP_SUCCESS) {                                                         \
      fprintf(stderr, "%s: %s: %s\n", #call, fsdp_error_name(code_), fsdp_last_error()); \
      MPI_Abort(MPI_COMM_WORLD, 1);                                                      \
    }                                                                                    \
  } while (0)

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  CHECK(fsdp_initialize());
  fsdp_model_t model;
  CHECK(fsdp_model_create(FSDP_FLOAT64, &model));
  const int64_t shape[2] = {2, 3};
  CHECK(fsdp_model_add_parameter(model, "w", 2, shape, "layer", 0));
  CHECK(fsdp_model_shard_comm(model, MPI_COMM_WORLD, "full"));
  double values[6], back[6];
  for (int i = 0; i < 6; ++i)
    values[i] = 1.5 * (i + 1);
  CHECK(fsdp_model_init_from_full(model, "w", values));
  CHECK(fsdp_model_copy_parameter(model, "w", back));
  int wrong = 0;
  for (int i = 0; i < 6; ++i)
    wrong |= back[i] != values[i];
  fsdp_model_destroy(model);
  CHECK(fsdp_finalize());
  if (rank == 0)
    printf("c consumer: fsdp.h %s\n", wrong ? "WRONG" : "ok");
  MPI_Finalize();
  return wrong;
}
