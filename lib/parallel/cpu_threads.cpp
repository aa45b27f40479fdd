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

#include "dtrain/core/env.hpp"
#include "dtrain/core/rng.hpp"
#include "parallel/cpu_quota.hpp"

namespace dtrain::parallel {

namespace {

// The CPUs this process may run on (its mask, or fewer where a cgroup limits its CPU time),
// and a key equal on two ranks exactly when they share a node and those CPUs.
struct AllowedCpus {
  int count = 1;
  CpuQuota quota;
  std::uint64_t key = 0;
};

AllowedCpus allowed_cpus() {
  char host[256] = {};
  if (gethostname(host, sizeof host - 1) != 0) host[0] = '\0';
  std::string seat(host);
  seat.push_back('\0');
  AllowedCpus a;
  a.count = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
#if defined(__linux__)
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) {
    a.count = std::max(1, CPU_COUNT(&set));
    seat.append(reinterpret_cast<const char*>(&set), sizeof set);
  }
#endif
  a.quota = cgroup_cpu_quota();
  if (a.quota.cpus > 0) {  // whole CPUs: a thread more than the limit would be throttled
    a.count = std::max(1, std::min(a.count, static_cast<int>(a.quota.cpus)));
    seat.append(a.quota.where).push_back('\0');
  }
  a.key = rng::stream_id(seat);
  return a;
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
  const AllowedCpus mine = allowed_cpus();
  std::vector<std::uint64_t> keys(static_cast<std::size_t>(world.size()));
  world.all_gather(&mine.key, keys.data(), 1, DType::i64);
  const auto sharers = static_cast<int>(std::count(keys.begin(), keys.end(), mine.key));
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
  t.threads = std::max(1, mine.count / sharers);
  std::ostringstream why;  // e.g. "rank 0 may run on 1 of its node's 2 CPUs"
  why << "rank " << world.rank() << " may run on " << mine.count;
  const long online = sysconf(_SC_NPROCESSORS_ONLN);
  if (online > mine.count) why << " of its node's " << online;
  why << (mine.count == 1 && online <= 1 ? " CPU" : " CPUs");
  if (mine.quota.cpus > 0)
    why << " under a CPU limit of " << mine.quota.cpus << " (" << mine.quota.where << ")";
  if (sharers > 1) why << ", shared with " << sharers - 1 << " other rank" << (sharers > 2 ? "s" : "");
  t.why = why.str();
  return t;
}

}  // namespace dtrain::parallel
