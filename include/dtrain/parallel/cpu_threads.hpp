#pragma once
// How many threads a rank's CPU kernels and OpenBLAS run: the Trainer and the C ABI's CPU
// models apply it (Device::set_num_threads), as a C++ program can.
#include <string>

#include "dtrain/comm/communicator.hpp"
#include "dtrain/export.hpp"

namespace dtrain::parallel {

struct CpuThreads {
  int threads = 1;
  std::string why;  // for the start-up log: where the count came from
};

// DTRAIN_NUM_THREADS where set, else OMP_NUM_THREADS (as batch scripts set it from
// --cpus-per-task); else the CPUs this rank may run on (its affinity mask: what
// mpiexec's binding, srun's --cpus-per-task or a cpuset left it; fewer where its cgroup
// limits its CPU time, as a container's --cpus does) shared out among the ranks of its node
// that may run on the same CPUs. Counting the node's cores instead put 32 threads
// on each core that Open MPI binds `mpiexec -n 2` to on a 64-core node. Collective over the
// world, whatever the environment says.
DTRAIN_API CpuThreads threads_per_rank(Communicator& world);

}  // namespace dtrain::parallel
