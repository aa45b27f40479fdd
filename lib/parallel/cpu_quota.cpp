#include "parallel/cpu_quota.hpp"

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
  std::string cgroup;      // the process's cgroup, as /proc/self/cgroup names it
  std::string mount_root;  // the cgroup the mount shows at its top ("/": the whole hierarchy)
  std::string mount_point;
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

// Its mount, from /proc/self/mountinfo: "ID PARENT DEV ROOT POINT OPTIONS [OPTIONAL...] -
// TYPE SOURCE SUPER_OPTIONS".
bool find_mount(const std::string& root, Hierarchy& h) {
  for (const std::string& line : lines_of(root + "/proc/self/mountinfo")) {
    std::istringstream in(line);
    std::vector<std::string> f;
    for (std::string word; in >> word;) f.push_back(word);
    const auto dash = std::find(f.begin(), f.end(), "-");
    if (dash - f.begin() < 6 || f.end() - dash < 4) continue;
    const bool cpu = h.v1 ? dash[1] == "cgroup" && lists(dash[3], "cpu") : dash[1] == "cgroup2";
    if (!cpu) continue;
    h.mount_root = unescaped(f[3]);
    h.mount_point = unescaped(f[4]);
    return true;
  }
  return false;
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
  // The process's cgroup below the mount's top. A mount of one cgroup (a container's,
  // without a cgroup namespace) shows that cgroup at its top; a process outside it can read
  // only the top.
  std::string below = h.cgroup;
  if (h.mount_root != "/") {
    const bool inside = below.compare(0, h.mount_root.size(), h.mount_root) == 0 &&
                        (below.size() == h.mount_root.size() || below[h.mount_root.size()] == '/');
    below = inside ? below.substr(h.mount_root.size()) : "";
  }
  if (below == "/") below.clear();
  for (std::string dir = h.mount_point + below;; dir.erase(dir.rfind('/'))) {
    const double cpus = limit_in(root + dir, h.v1);
    if (cpus > 0 && (tightest.cpus == 0 || cpus < tightest.cpus)) tightest = {cpus, dir};
    if (dir.size() <= h.mount_point.size()) break;
  }
  return tightest;
}

}  // namespace dtrain::parallel
