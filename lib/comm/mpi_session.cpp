#include "comm/mpi_session.hpp"

#include <mpi.h>

#include <mutex>

#include "comm/mpi_util.hpp"
#include "comm/watchdog.hpp"
#include "dtrain/core/error.hpp"
#include "dtrain/core/log.hpp"

namespace dtrain::comm::session {
namespace {
std::mutex g_mutex;
int g_users = 0;
bool g_owns_mpi = false;
int g_thread_level = MPI_THREAD_SINGLE;
}  // namespace

void acquire(int* argc, char*** argv, bool may_initialize) {
  std::lock_guard<std::mutex> lock(g_mutex);
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  DTRAIN_CHECK(!finalized, Errc::invalid_config, "MPI was already finalized");
  if (!initialized) {
    DTRAIN_CHECK(may_initialize, Errc::invalid_config,
                 "MPI is not initialised; a Runtime over a user communicator needs MPI_Init first");
    int provided = MPI_THREAD_SINGLE;
    mpi_check(MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided), "MPI_Init_thread");
    g_owns_mpi = true;
  }
  MPI_Query_thread(&g_thread_level);
  if (g_users == 0) create_half_ops();
  ++g_users;
  if (g_thread_level < MPI_THREAD_FUNNELED) {
    // Before any Runtime has named this rank in the log: every rank would print it as r0/1.
    int rank = 0, size = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    log::set_rank(rank, size);
    DTRAIN_LOG(warn, "MPI provides only MPI_THREAD_SINGLE; use MPI_THREAD_FUNNELED or better");
  }
}

void release() noexcept {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_users == 0 || --g_users > 0) return;
  watchdog::shutdown();
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  free_half_ops();
  if (g_owns_mpi) {
    MPI_Finalize();
    g_owns_mpi = false;
  }
}

bool owns_mpi() noexcept { return g_owns_mpi; }
int thread_level() noexcept { return g_thread_level; }

}  // namespace dtrain::comm::session
