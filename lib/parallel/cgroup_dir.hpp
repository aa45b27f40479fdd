#pragma once
// Where this process's cgroup lives for one controller: the directory whose files (cpu.max,
// memory.max, ...) set its limits, on cgroup v1 or v2, through whatever mount shows it.
#include <cstdint>
#include <string>
#include <vector>

namespace dtrain::parallel {

struct CgroupDir {
  bool v1 = false;  // the controller's own v1 hierarchy; false: the unified (v2) one
  std::string dir;  // the process's cgroup directory
  std::string top;  // the top of the mount that shows it: a walk up from dir stops there
};

// Finds the process's cgroup in the v1 hierarchy holding `controller` ("cpu", "memory")
// where /proc/self/cgroup lists one, else in the unified hierarchy. `root` prefixes every path
// read (tests hand in a made-up tree); false where none is found or no mount shows it.
bool find_cgroup_dir(const std::string& root, const std::string& controller, CgroupDir& found);

// dir, then each directory above it up to top.
std::vector<std::string> dirs_up(const CgroupDir& c);

// The device and inode of a directory: the same cgroup for two processes exactly when equal,
// whatever path each one's cgroup namespace gives it. {0, 0} where it cannot be read.
void identity_of(const std::string& path, std::uint64_t& device, std::uint64_t& inode);

}  // namespace dtrain::parallel
