#include "parallel/cpu_quota.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <vector>

namespace dtrain::parallel {

namespace {

std::vector<std::string> lines_of(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// Whether the comma-separated list holds `token` ("rw,cpu,cpuacct" holds "cpu").
bool lists(const std::string& list, const std::string& token) {
  std::istringstream in(list);
  for (std::string item; std::getline(in, item, ',');)
    if (item == token) return true;
  return false;
}

// mountinfo writes a space in a path as \040: octal escapes back to bytes.
std::string unescaped(const std::string& s) {
  std::string out;
  for (std::size_t i = 0; i < s.size(); ++i) {
    const bool escape = s[i] == '\\' && i + 3 < s.size() &&
                        std::all_of(s.begin() + static_cast<long>(i) + 1,
                                    s.begin() + static_cast<long>(i) + 4,
                                    [](char c) { return c >= '0' && c <= '7'; });
    if (escape) {
      out.push_back(static_cast<char>(std::strtol(s.substr(i + 1, 3).c_str(), nullptr, 8)));
      i += 3;
    } else {
      out.push_back(s[i]);
    }
  }
  return out;
}

// The hierarchy that holds the cpu controller, and where this process sits in it.
struct Hierarchy {
  bool v1 = false;
  std::string cgroup;  // the process's cgroup, as /proc/self/cgroup names it
  std::string dir;     // its directory, through the mount that shows it
  std::string top;     // that mount's point: the walk up stops there
};

// /proc/self/cgroup lines are "ID:CONTROLLERS:PATH": v1's line with the cpu controller,
// else v2's "0::PATH".
bool find_cgroup(const std::string& root, Hierarchy& h) {
  bool v2 = false;
  for (const std::string& line : lines_of(root + "/proc/self/cgroup")) {
    const auto a = line.find(':');
    const auto b = a == std::string::npos ? a : line.find(':', a + 1);
    if (b == std::string::npos) continue;
    const std::string controllers = line.substr(a + 1, b - a - 1);
    if (lists(controllers, "cpu")) {
      h.v1 = true;
      h.cgroup = line.substr(b + 1);
      return true;
    }
    if (line.compare(0, a, "0") == 0 && controllers.empty()) {
      v2 = true;
      h.cgroup = line.substr(b + 1);
    }
  }
  return v2;
}

// The part of `path` below `top` ("" for top itself), or false where path is not under it.
bool below(const std::string& path, const std::string& top, std::string& rest) {
  if (top == "/") {
    rest = path == "/" ? "" : path;
    return true;
  }
  if (path.compare(0, top.size(), top) != 0) return false;
  if (path.size() > top.size() && path[top.size()] != '/') return false;
  rest = path.substr(top.size());
  return true;
}

// The cgroup's directory, from /proc/self/mountinfo ("ID PARENT DEV ROOT POINT OPTIONS
// [OPTIONAL...] - TYPE SOURCE SUPER_OPTIONS"): of the hierarchy's mounts whose root (the
// cgroup they show at their point: a container's own, without a cgroup namespace) holds the
// process's cgroup, the one with the deepest root.
bool find_mount(const std::string& root, Hierarchy& h) {
  // A cgroup above a namespace's root reads as "/../x": no mount shows it.
  if (h.cgroup.empty() || h.cgroup[0] != '/' || h.cgroup.find("/..") != std::string::npos)
    return false;
  std::size_t deepest = 0;
  bool found = false;
  for (const std::string& line : lines_of(root + "/proc/self/mountinfo")) {
    std::istringstream in(line);
    std::vector<std::string> f;
    for (std::string word; in >> word;) f.push_back(word);
    const auto dash = std::find(f.begin(), f.end(), "-");
    if (dash - f.begin() < 6 || f.end() - dash < 4) continue;
    const bool cpu = h.v1 ? dash[1] == "cgroup" && lists(dash[3], "cpu") : dash[1] == "cgroup2";
    const std::string mount_root = unescaped(f[3]);
    std::string rest;
    if (!cpu || !below(h.cgroup, mount_root, rest) || (found && mount_root.size() <= deepest))
      continue;
    found = true;
    deepest = mount_root.size();
    h.top = unescaped(f[4]);
    h.dir = h.top + rest;
  }
  return found;
}

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
  Hierarchy h;
  if (!find_cgroup(root, h) || !find_mount(root, h)) return tightest;
  for (std::string dir = h.dir;; dir.erase(dir.rfind('/'))) {
    const double cpus = limit_in(root + dir, h.v1);
    if (cpus > 0 && (tightest.cpus == 0 || cpus < tightest.cpus)) {
      tightest.cpus = cpus;
      tightest.where = dir;
    }
    if (dir.size() <= h.top.size()) break;
  }
  struct stat st {};
  if (tightest.cpus > 0 && stat((root + tightest.where).c_str(), &st) == 0) {
    tightest.device = static_cast<std::uint64_t>(st.st_dev);
    tightest.inode = static_cast<std::uint64_t>(st.st_ino);
  }
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
