/**
 * @file dtrain_mpi.h
 * @brief Optional bridge for C programs that use MPI themselves: include it instead of (or
 * after) dtrain.h. Only this header needs mpi.h; the library's ABI passes communicators as
 * Fortran handles (MPI_Fint), which every MPI implementation can convert to and from.
 */
#ifndef DTRAIN_MPI_H
#define DTRAIN_MPI_H

#include <mpi.h>

#include "dtrain.h"

/**
 * @brief dt_init_fortran_comm() over a C communicator.
 *
 * dtrain works on a duplicate of comm, so its traffic never mixes with the program's. MPI
 * must be initialised (and is finalised by the program). Collective over comm.
 * @param comm the program's communicator, e.g. MPI_COMM_WORLD or a split of it.
 * @param[out] ctx the new context; NULL on failure.
 * @return ::DT_SUCCESS; ::DT_ERR_INVALID_ARGUMENT (ctx NULL, comm is MPI_COMM_NULL),
 *         ::DT_ERR_INVALID_CONFIG (MPI not initialised, or finalized), ::DT_ERR_COMM.
 */
static inline dt_result_t dt_init_mpi_comm(MPI_Comm comm, dt_context_t* ctx) {
  /* MPI_Comm_c2f may be called only while MPI is up (elsewhere MPI aborts the job): outside
   * that, the library is handed no communicator and reports why. */
  int up = 0, down = 0;
  MPI_Initialized(&up);
  MPI_Finalized(&down);
  return dt_init_fortran_comm(up && !down ? (int)MPI_Comm_c2f(comm) : 0, ctx);
}

#endif /* DTRAIN_MPI_H */
