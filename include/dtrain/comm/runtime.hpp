#pragma once
// Runtime: the MPI bootstrap, RAII. Initialises MPI (MPI_THREAD_MULTIPLE requested) unless
// the caller already did - then it never finalises it. Sets the logger's rank prefix.
// Destroying the last Runtime stops the watchdog and, if it initialised MPI, finalises it.
#include <memory>

#include "dtrain/comm/communicator.hpp"
#include "dtrain/export.hpp"

namespace dtrain {

class DTRAIN_API Runtime {
 public:
  // world() is a duplicate of MPI_COMM_WORLD. argc/argv may be null.
  Runtime(int* argc, char*** argv);
  // world() is a duplicate of the user's communicator (its MPI_Fint handle, MPI_Comm_c2f).
  // MPI must already be initialised by the caller.
  static Runtime from_fortran_comm(int fortran_comm_handle);

  ~Runtime();
  Runtime(Runtime&& other) noexcept;
  Runtime& operator=(Runtime&& other) noexcept;
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  Communicator& world();
  int rank() const;
  int size() const;
  int local_rank() const;   // among ranks of world() on this node (MPI_COMM_TYPE_SHARED)
  int local_size() const;
  // The device this rank should use: local_rank % devices_on_node, -1 when there are none.
  int local_device_index(int devices_on_node) const;
  // MPI thread support level obtained (MPI_THREAD_* value).
  int thread_level() const;
  bool owns_mpi() const;    // true when this process' MPI was initialised by dtrain
  // Ends every process of the job now, with exit status `code` (MPI_Abort on
  // MPI_COMM_WORLD): after a failure on some ranks only, in the middle of collectives the
  // others wait in, which no agreement can reach any more.
  [[noreturn]] static void abort_job(int code) noexcept;
  // This process's rank and the job's size as its launcher (mpiexec, srun) set them in the
  // environment, readable before MPI starts: which rank reports a failure of the constructor.
  // -1 where no launcher known here set them (a process started alone).
  static int launcher_rank() noexcept;
  static int launcher_size() noexcept;
  // After the constructor threw an AgreedError (every rank has it): true on the launcher's
  // first rank, which reports it; the others return false after 5 s, time for that report
  // to come out on a loaded node before the launcher, seeing a rank exit with an error, ends
  // the job (seen in CI). mpiexec ends the waiting ranks as soon as the first one exits.
  static bool reports_start_failure() noexcept;

 private:
  struct Impl;
  explicit Runtime(std::unique_ptr<Impl> impl) noexcept;
  Impl& impl() const;
  std::unique_ptr<Impl> impl_;
};

}  // namespace dtrain
