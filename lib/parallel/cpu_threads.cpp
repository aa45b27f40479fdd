#include "dtrain/parallel/cpu_threads.hpp"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <cstdint>
#include <sstream>
#include <thread>
#include <vector>

#include "core/host_name.hpp"
#include "dtrain/core/env.hpp"
#include "dtrain/core/rng.hpp"
#include "parallel/cpu_quota.hpp"

namespace dtrain::parallel {

namespace {

// Where this process runs: the CPUs of its affinity mask and its cgroup's CPU limit, each
// with a key that is equal on two ranks exactly when they share it (same node and mask; same
// node and limiting cgroup).
struct Seat {
  int mask_cpus = 1;
  CpuQuota limit;
  std::uint64_t keys[2] = {0, 0};  // mask, limit
};

Seat my_seat() {
  std::string mask = node_id();  // one kernel's CPUs, whatever its containers are called
  mask.push_back('\0');
  std::string limit = mask;
  Seat s;
  s.mask_cpus = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
#if defined(__linux__)
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) {
    s.mask_cpus = std::max(1, CPU_COUNT(&set));
    mask.append(reinterpret_cast<const char*>(&set), sizeof set);
  }
#endif
  s.limit = cgroup_cpu_quota();
  limit.append(reinterpret_cast<const char*>(&s.limit.device), sizeof s.limit.device);
  limit.append(reinterpret_cast<const char*>(&s.limit.inode), sizeof s.limit.inode);
  s.keys[0] = rng::stream_id(mask);
  s.keys[1] = rng::stream_id(limit);
  return s;
}

// ", shared with 2 other ranks" where more than one rank shares it.
std::string shared_with(int sharers) {
  if (sharers <= 1) return "";
  return ", shared with " + std::to_string(sharers - 1) + " other rank" + (sharers > 2 ? "s" : "");
}

// OMP_NUM_THREADS as OpenMP reads it for the outermost level (the first of a list such as
// "8,2"); 0 where unset or not a positive number.
int omp_num_threads() {
  const char* v = std::getenv("OMP_NUM_THREADS");
  if (!v) return 0;
  char* end = nullptr;
  const long n = std::strtol(v, &end, 10);
  const bool whole = end != v && (*end == '\0' || *end == ',' || std::isspace(static_cast<unsigned char>(*end)));
  return whole && n > 0 && n <= 4096 ? static_cast<int>(n) : 0;
}

}  // namespace

CpuThreads threads_per_rank(Communicator& world) {
  const Seat mine = my_seat();
  std::vector<std::uint64_t> keys(2 * static_cast<std::size_t>(world.size()));
  world.all_gather(mine.keys, keys.data(), 2, DType::i64);
  int mask_sharers = 0, limit_sharers = 0;
  for (std::size_t r = 0; r < keys.size(); r += 2) {
    mask_sharers += keys[r] == mine.keys[0];
    limit_sharers += keys[r + 1] == mine.keys[1];
  }
  CpuThreads t;
  if (env::params().num_threads > 0) {
    t.threads = env::params().num_threads;
    t.why = "DTRAIN_NUM_THREADS";
    return t;
  }
  if (const int omp = omp_num_threads(); omp > 0) {
    t.threads = omp;
    t.why = "OMP_NUM_THREADS";
    return t;
  }
  t.threads = threads_within(mine.mask_cpus, mask_sharers, mine.limit.cpus, limit_sharers);
  std::ostringstream why;  // e.g. "rank 0 may run on 1 of its node's 2 CPUs"
  why << "rank " << world.rank() << " may run on " << mine.mask_cpus;
  const long online = sysconf(_SC_NPROCESSORS_ONLN);
  if (online > mine.mask_cpus) why << " of its node's " << online;
  why << (mine.mask_cpus == 1 && online <= 1 ? " CPU" : " CPUs") << shared_with(mask_sharers);
  if (mine.limit.cpus > 0)
    why << "; its cgroup's CPU limit is " << mine.limit.cpus << " (" << mine.limit.where << ")"
        << shared_with(limit_sharers);
  t.why = why.str();
  return t;
}

}  // namespace dtrain::parallel
