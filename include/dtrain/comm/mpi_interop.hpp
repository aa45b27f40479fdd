#pragma once
// Optional bridge for programs that use MPI themselves. The only public dtrain header that
// includes mpi.h; the rest of the API takes Fortran handles (MPI_Comm_c2f) instead.
#include <mpi.h>

#include <string>

#include "dtrain/comm/communicator.hpp"
#include "dtrain/comm/runtime.hpp"

namespace dtrain {

// A Runtime whose world() duplicates comm. MPI must be initialised by the caller.
inline Runtime runtime_from_mpi_comm(MPI_Comm comm) {
  return Runtime::from_fortran_comm(static_cast<int>(MPI_Comm_c2f(comm)));
}

inline Communicator communicator_from_mpi_comm(MPI_Comm comm, const std::string& name) {
  return Communicator::from_fortran_comm(static_cast<int>(MPI_Comm_c2f(comm)), name);
}

// The MPI communicator under a dtrain Communicator (owned by it: do not free).
inline MPI_Comm to_mpi_comm(const Communicator& comm) {
  return MPI_Comm_f2c(static_cast<MPI_Fint>(comm.fortran_handle()));
}

}  // namespace dtrain
