#include "dtrain/comm/runtime.hpp"

#include <mpi.h>

#include <climits>
#include <cstdlib>
#include <string>

#include "comm/comm_state.hpp"
#include "comm/mpi_backend.hpp"
#include "comm/mpi_session.hpp"
#include "comm/mpi_util.hpp"
#include "dtrain/core/env.hpp"
#include "dtrain/core/error.hpp"
#include "dtrain/core/log.hpp"

namespace dtrain {
namespace {

// The DTRAIN_* variables every rank reads (env::params()), checked by all ranks together over
// `comm` before anything else uses them: a value malformed on one node only would otherwise
// fail that rank alone while the others wait for it in the world's first collective. Throws
// the first failing rank's message on every rank. Raw MPI on the base communicator (the
// program's own one under dt_init_mpi_comm, whose initialisation is collective over it): a
// Communicator's collectives start the watchdog, which reads these very variables.
void agree_on_environment(MPI_Comm comm) {
  std::string problem;
  try {
    env::params();
  } catch (const std::exception& e) {  // an Error; anything else must not skip the agreement
    problem = e.what();
  }
  int rank = 0, world_rank = 0;
  comm::mpi_check(MPI_Comm_rank(comm, &rank), "MPI_Comm_rank");
  comm::mpi_check(MPI_Comm_rank(MPI_COMM_WORLD, &world_rank), "MPI_Comm_rank");
  if (!problem.empty() && world_rank != 0)
    problem += " (in world rank " + std::to_string(world_rank) + "'s environment)";
  int first = problem.empty() ? INT_MAX : rank;
  comm::mpi_check(MPI_Allreduce(MPI_IN_PLACE, &first, 1, MPI_INT, MPI_MIN, comm), "MPI_Allreduce");
  if (first == INT_MAX) return;
  int length = static_cast<int>(problem.size());
  comm::mpi_check(MPI_Bcast(&length, 1, MPI_INT, first, comm), "MPI_Bcast");
  problem.resize(static_cast<std::size_t>(length));
  comm::mpi_check(MPI_Bcast(&problem[0], length, MPI_CHAR, first, comm), "MPI_Bcast");
  throw AgreedError(Errc::invalid_config, problem);
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
    comm::session::acquire(argc, argv, may_initialize);
    session = std::make_unique<SessionGuard>();
    MPI_Comm base = MPI_COMM_WORLD;
    if (!may_initialize) base = comm::communicator_of_fortran_handle(user_fortran_comm);
    agree_on_environment(base);
    // Communicator::from_fortran_comm duplicates, so dtrain's traffic (all but the agreement
    // above, a start-up collective of its own) never mixes with the user's.
    world = Communicator::from_fortran_comm(static_cast<int>(MPI_Comm_c2f(base)), "world");
    log::set_rank(world.rank(), world.size());
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
