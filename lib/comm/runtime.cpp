#include "dtrain/comm/runtime.hpp"

#include <mpi.h>

#include <chrono>
#include <climits>
#include <cstdlib>
#include <initializer_list>
#include <string>
#include <thread>

#include "comm/comm_state.hpp"
#include "comm/mpi_backend.hpp"
#include "comm/mpi_session.hpp"
#include "comm/mpi_util.hpp"
#include "comm/watchdog.hpp"
#include "dtrain/core/env.hpp"
#include "dtrain/core/error.hpp"
#include "dtrain/core/log.hpp"

namespace dtrain {
namespace {

// What each rank sets up alone before its first collective, checked by all ranks together
// over `comm`: the DTRAIN_* variables every rank reads (env::params()), where a value
// malformed on one node only would otherwise fail that rank alone while the others wait for
// it, and the watchdog's thread, which a rank short of memory or threads cannot start (its
// MPI_Finalize would then wait for the others). Throws the first failing rank's message on
// every rank. Raw MPI on the base communicator (the program's own one under
// dt_init_mpi_comm, whose initialisation is collective over it): a Communicator's
// collectives start the watchdog, which reads these very variables.
void agree_on_start(MPI_Comm comm) {
  int rank = 0, world_rank = 0;
  comm::mpi_check(MPI_Comm_rank(comm, &rank), "MPI_Comm_rank");
  comm::mpi_check(MPI_Comm_rank(MPI_COMM_WORLD, &world_rank), "MPI_Comm_rank");
  const std::string which = "world rank " + std::to_string(world_rank);
  std::string problem;
  Errc code = Errc::invalid_config;
  try {
    env::params();
  } catch (const std::exception& e) {  // an Error; anything else must not skip the agreement
    problem = e.what();
    if (world_rank != 0) problem += " (in " + which + "'s environment)";
  }
  if (problem.empty()) {
    try {
      comm::watchdog::ensure_running();
    } catch (const std::exception& e) {  // std::system_error
      problem = "cannot start the watchdog's thread: " + std::string(e.what());
      if (world_rank != 0) problem += " (on " + which + ")";
      code = Errc::out_of_memory;
    }
  }
  int first = problem.empty() ? INT_MAX : rank;
  comm::mpi_check(MPI_Allreduce(MPI_IN_PLACE, &first, 1, MPI_INT, MPI_MIN, comm), "MPI_Allreduce");
  if (first == INT_MAX) return;
  int length_and_code[2] = {static_cast<int>(problem.size()), static_cast<int>(code)};
  comm::mpi_check(MPI_Bcast(length_and_code, 2, MPI_INT, first, comm), "MPI_Bcast");
  problem.resize(static_cast<std::size_t>(length_and_code[0]));
  comm::mpi_check(MPI_Bcast(&problem[0], length_and_code[0], MPI_CHAR, first, comm), "MPI_Bcast");
  throw AgreedError(static_cast<Errc>(length_and_code[1]), problem);
}

// A launcher that started several tasks which MPI made worlds of one each (srun's --mpi or
// the site's MpiDefault not the MPI library's, another MPI's mpiexec) had every task train
// alone, each refused in turn by the checkpoint directory's lock: said at once. (SLURM_NTASKS
// is the allocation's, set in an salloc shell too: the step's own count is asked for.)
void warn_if_alone_among_several() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_STEP_NUM_TASKS"}) {
    const char* value = std::getenv(name);
    if (!value) continue;
    if (std::atoi(value) > 1) {
      DTRAIN_LOG(warn, "MPI started this process as a world of one rank, but " << name << "=" << value
                       << " says the launcher started " << value << " tasks: the launcher does not wire up "
                       << "this MPI library (srun --mpi, or the site's MpiDefault: jobscripts/README.md), "
                       << "and every task runs alone");
    }
    return;
  }
}

}  // namespace

struct Runtime::Impl {
  Communicator world;
  // Releases the MPI session; ~Impl frees `world` first, while MPI is still up.
  struct SessionGuard {
    ~SessionGuard() { comm::session::release(); }
  };
  std::unique_ptr<SessionGuard> session;

  Impl(int* argc, char*** argv, bool may_initialize, int user_fortran_comm) {
    // MPI's state is checked before the handle is read: dt_init_mpi_comm passes 0 for "no
    // communicator" outside MPI's lifetime and relies on this order.
    comm::session::acquire(argc, argv, may_initialize);
    session = std::make_unique<SessionGuard>();
    MPI_Comm base = MPI_COMM_WORLD;
    if (!may_initialize) base = comm::communicator_of_fortran_handle(user_fortran_comm);
    agree_on_start(base);
    // Communicator::from_fortran_comm duplicates, so dtrain's traffic (all but the agreement
    // above, a start-up collective of its own) never mixes with the user's.
    world = Communicator::from_fortran_comm(static_cast<int>(MPI_Comm_c2f(base)), "world");
    log::set_rank(world.rank(), world.size());
    if (may_initialize && world.size() == 1) warn_if_alone_among_several();
  }
  ~Impl() { world = Communicator(); }
};

Runtime::Runtime(int* argc, char*** argv) : impl_(std::make_unique<Impl>(argc, argv, true, 0)) {}

Runtime::Runtime(std::unique_ptr<Impl> impl) noexcept : impl_(std::move(impl)) {}

Runtime Runtime::from_fortran_comm(int fortran_comm_handle) {
  return Runtime(std::make_unique<Impl>(nullptr, nullptr, false, fortran_comm_handle));
}

Runtime::~Runtime() = default;
Runtime::Runtime(Runtime&& other) noexcept = default;
Runtime& Runtime::operator=(Runtime&& other) noexcept = default;

Runtime::Impl& Runtime::impl() const {
  DTRAIN_CHECK(impl_ != nullptr, Errc::invalid_argument, "use of a moved-from Runtime");
  return *impl_;
}

Communicator& Runtime::world() { return impl().world; }
int Runtime::rank() const { return impl().world.rank(); }
void Runtime::abort_job(int code) noexcept {
  MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);  // MPI_Abort should not return; never go on if it does
}

namespace {
int from_launcher(std::initializer_list<const char*> names) {
  for (const char* name : names) {
    if (const char* v = std::getenv(name)) return std::atoi(v);
  }
  return -1;
}
}  // namespace

int Runtime::launcher_rank() noexcept {
  return from_launcher({"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID"});
}
int Runtime::launcher_size() noexcept {
  return from_launcher({"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE", "SLURM_NTASKS"});
}

bool Runtime::reports_start_failure() noexcept {
  if (launcher_rank() <= 0) return true;
  std::this_thread::sleep_for(std::chrono::seconds(5));
  return false;
}

int Runtime::size() const { return impl().world.size(); }
int Runtime::local_rank() const { return impl().world.local_rank(); }
int Runtime::local_size() const { return impl().world.local_size(); }

int Runtime::local_device_index(int devices_on_node) const {
  if (devices_on_node <= 0) return -1;
  return local_rank() % devices_on_node;
}

int Runtime::thread_level() const { return comm::session::thread_level(); }
bool Runtime::owns_mpi() const { return comm::session::owns_mpi(); }

}  // namespace dtrain
