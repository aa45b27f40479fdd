#pragma once
// The CPUs a cgroup's CPU bandwidth limit lets this process use: a container's `--cpus`, a
// Kubernetes CPU limit, a systemd CPUQuota. Such a limit leaves the affinity mask whole, so
// counting the mask alone gives a rank one thread per host CPU, which the limit then
// throttles.
#include <string>

namespace dtrain::parallel {

struct CpuQuota {
  double cpus = 0;    // quota / period of the tightest limit from the process's cgroup up; 0: none
  std::string where;  // the cgroup directory that sets it
};

// Reads cgroup v1's cpu controller where the process has one (cpu.cfs_quota_us and
// cpu.cfs_period_us), else cgroup v2's cpu.max, in the process's cgroup and each one above
// it up to the mount. `root` prefixes every path read (tests hand in a made-up tree); a file
// that is missing or unreadable counts as no limit.
CpuQuota cgroup_cpu_quota(const std::string& root = "");

}  // namespace dtrain::parallel
