#include "parallel/cgroup_dir.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <sstream>

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

// /proc/self/cgroup lines are "ID:CONTROLLERS:PATH": v1's line with the controller, else
// v2's "0::PATH". The path goes to `cgroup`.
bool find_cgroup(const std::string& root, const std::string& controller, CgroupDir& h, std::string& cgroup) {
  bool v2 = false;
  for (const std::string& line : lines_of(root + "/proc/self/cgroup")) {
    const auto a = line.find(':');
    const auto b = a == std::string::npos ? a : line.find(':', a + 1);
    if (b == std::string::npos) continue;
    const std::string controllers = line.substr(a + 1, b - a - 1);
    if (lists(controllers, controller)) {
      h.v1 = true;
      cgroup = line.substr(b + 1);
      return true;
    }
    if (line.compare(0, a, "0") == 0 && controllers.empty()) {
      v2 = true;
      cgroup = line.substr(b + 1);
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
bool find_mount(const std::string& root, const std::string& controller, const std::string& cgroup, CgroupDir& h) {
  // A cgroup above a namespace's root reads as "/../x": no mount shows it.
  if (cgroup.empty() || cgroup[0] != '/' || cgroup.find("/..") != std::string::npos) return false;
  std::size_t deepest = 0;
  bool found = false;
  for (const std::string& line : lines_of(root + "/proc/self/mountinfo")) {
    std::istringstream in(line);
    std::vector<std::string> f;
    for (std::string word; in >> word;) f.push_back(word);
    const auto dash = std::find(f.begin(), f.end(), "-");
    if (dash - f.begin() < 6 || f.end() - dash < 4) continue;
    const bool holds = h.v1 ? dash[1] == "cgroup" && lists(dash[3], controller) : dash[1] == "cgroup2";
    const std::string mount_root = unescaped(f[3]);
    std::string rest;
    if (!holds || !below(cgroup, mount_root, rest) || (found && mount_root.size() <= deepest))
      continue;
    found = true;
    deepest = mount_root.size();
    h.top = unescaped(f[4]);
    h.dir = h.top + rest;
  }
  return found;
}

}  // namespace

bool find_cgroup_dir(const std::string& root, const std::string& controller, CgroupDir& found) {
  std::string cgroup;
  return find_cgroup(root, controller, found, cgroup) && find_mount(root, controller, cgroup, found);
}

std::vector<std::string> dirs_up(const CgroupDir& c) {
  std::vector<std::string> dirs;
  for (std::string dir = c.dir;; dir.erase(dir.rfind('/'))) {
    dirs.push_back(dir);
    if (dir.size() <= c.top.size()) break;
  }
  return dirs;
}

void identity_of(const std::string& path, std::uint64_t& device, std::uint64_t& inode) {
  struct stat st {};
  const bool ok = stat(path.c_str(), &st) == 0;
  device = ok ? static_cast<std::uint64_t>(st.st_dev) : 0;
  inode = ok ? static_cast<std::uint64_t>(st.st_ino) : 0;
}

}  // namespace dtrain::parallel
