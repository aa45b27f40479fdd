#pragma once
// The CPUs a cgroup's CPU bandwidth limit lets this process use: a container's `--cpus`, a
// Kubernetes CPU limit, a systemd CPUQuota. Such a limit leaves the affinity mask whole, so
// counting the mask alone gives a rank one thread per host CPU, which the limit then
// throttles.
#include <cstdint>
#include <string>

namespace dtrain::parallel {

struct CpuQuota {
  double cpus = 0;    // quota / period of the tightest limit from the process's cgroup up; 0: none
  std::string where;  // the cgroup directory that sets it
  // That directory's device and inode: the same cgroup for two processes exactly when equal,
  // whatever path each one's cgroup namespace gives it.
  std::uint64_t device = 0, inode = 0;
};

// Reads cgroup v1's cpu controller where the process has one (cpu.cfs_quota_us and
// cpu.cfs_period_us), else cgroup v2's cpu.max, in the process's cgroup and each one above
// it up to the top of the mount that shows it. `root` prefixes every path read (tests hand
// in a made-up tree); a file that is missing or unreadable counts as no limit, and so does a
// cgroup that no mount shows.
CpuQuota cgroup_cpu_quota(const std::string& root = "");

// The threads of a rank that may run on `mask_cpus` CPUs, which `mask_sharers` ranks share,
// under a CPU limit of `limit_cpus` (0: none), which `limit_sharers` ranks share: the
// smaller share in whole CPUs (the limit's rounded to the nearest), at least one.
int threads_within(int mask_cpus, int mask_sharers, double limit_cpus, int limit_sharers);

}  // namespace dtrain::parallel
