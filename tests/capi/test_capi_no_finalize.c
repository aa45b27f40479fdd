/* A program that leaves without dt_finalize (it finalizes MPI itself) still exits cleanly:
 * nothing of dtrain's may end the process in an abort at exit. The exit code is the test.
 * A collective called after that MPI_Finalize fails with a message, where MPI would abort. */
#include <mpi.h>
#include <stdio.h>
#include <string.h>

#include "dtrain_mpi.h"

int main(int argc, char** argv) {
  int provided = 0;
  dt_context_t ctx = NULL;
  dt_comm_t world = NULL;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  if (dt_init_mpi_comm(MPI_COMM_WORLD, &ctx) != DT_SUCCESS || dt_context_world(ctx, &world) != DT_SUCCESS) {
    fprintf(stderr, "no_finalize: dt_init_mpi_comm failed: %s\n", dt_get_last_error(NULL));
    return 1;
  }
  MPI_Finalize();
  if (dt_barrier(world) != DT_ERR_COMM || !strstr(dt_get_last_error(ctx), "after MPI_Finalize")) {
    fprintf(stderr, "no_finalize: a barrier after MPI_Finalize gave: %s\n", dt_get_last_error(ctx));
    return 1;
  }
  return 0;
}
