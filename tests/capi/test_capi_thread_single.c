/* A program that starts MPI with plain MPI_Init (MPI_THREAD_SINGLE) gets dtrain's warning
 * once, from world rank 0 and labelled with the world's size (the test checks the output):
 * it came before any rank was named, so every rank printed it as "r0/1". */
#include <mpi.h>
#include <stdio.h>

#include "dtrain_mpi.h"

int main(int argc, char** argv) {
  dt_context_t ctx = NULL;
  int rank = 0;
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (dt_init_mpi_comm(MPI_COMM_WORLD, &ctx) != DT_SUCCESS || dt_finalize(ctx) != DT_SUCCESS) {
    fprintf(stderr, "thread_single: %s\n", dt_get_last_error(NULL));
    return 1;
  }
  MPI_Finalize();
  if (rank == 0) printf("thread_single: done\n");
  return 0;
}
