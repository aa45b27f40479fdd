#pragma once
// Process-wide MPI lifetime shared by all Runtime objects: the first one initialises MPI
// (unless the caller already did), the last one stops the watchdog and finalises.
namespace dtrain::comm::session {

// may_initialize=false: MPI must already be initialised (the caller owns it).
void acquire(int* argc, char*** argv, bool may_initialize);
void release() noexcept;
bool owns_mpi() noexcept;
int thread_level() noexcept;

}  // namespace dtrain::comm::session
