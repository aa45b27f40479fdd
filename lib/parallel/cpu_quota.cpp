#include "parallel/cpu_quota.hpp"

#include <algorithm>
#include <cstdlib>
#include <fstream>

#include "parallel/cgroup_dir.hpp"

namespace dtrain::parallel {

namespace {

// The CPUs one cgroup directory's limit allows; 0 where it sets none.
double limit_in(const std::string& dir, bool v1) {
  long long quota = -1, period = 0;
  if (v1) {
    std::ifstream(dir + "/cpu.cfs_quota_us") >> quota;  // -1: no limit
    std::ifstream(dir + "/cpu.cfs_period_us") >> period;
  } else {
    std::ifstream in(dir + "/cpu.max");  // "QUOTA PERIOD", QUOTA "max" for no limit
    std::string q;
    if (in >> q >> period) {
      char* end = nullptr;
      quota = std::strtoll(q.c_str(), &end, 10);
      if (end == q.c_str() || *end != '\0') quota = -1;
    }
  }
  return quota > 0 && period > 0 ? static_cast<double>(quota) / static_cast<double>(period) : 0;
}

}  // namespace

CpuQuota cgroup_cpu_quota(const std::string& root) {
  CpuQuota tightest;
  CgroupDir h;
  if (!find_cgroup_dir(root, "cpu", h)) return tightest;
  for (const std::string& dir : dirs_up(h)) {
    const double cpus = limit_in(root + dir, h.v1);
    if (cpus > 0 && (tightest.cpus == 0 || cpus < tightest.cpus)) {
      tightest.cpus = cpus;
      tightest.where = dir;
    }
  }
  if (tightest.cpus > 0) identity_of(root + tightest.where, tightest.device, tightest.inode);
  return tightest;
}

int threads_within(int mask_cpus, int mask_sharers, double limit_cpus, int limit_sharers) {
  int threads = std::max(1, mask_cpus / std::max(1, mask_sharers));
  if (limit_cpus > 0) {
    const double share = limit_cpus / std::max(1, limit_sharers);
    // The nearest whole CPUs: under a limit of 1.2 CPUs one thread ran 10-25% faster than
    // two, under 1.9 two ran 40% faster than one, under 1.5 they were even.
    if (share < threads) threads = std::max(1, static_cast<int>(share + 0.5));
  }
  return threads;
}

}  // namespace dtrain::parallel
