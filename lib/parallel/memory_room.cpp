#include "parallel/memory_room.hpp"

#include <algorithm>
#include <fstream>
#include <limits>
#include <sstream>

#include "parallel/cgroup_dir.hpp"

namespace dtrain::parallel {
namespace {

constexpr std::uint64_t kNone = std::numeric_limits<std::uint64_t>::max();

// The number after "KEY" in a "KEY VALUE [kB]" file (meminfo, status, memory.stat), in bytes
// where the line says kB; kNone where the key is missing.
std::uint64_t value_of(const std::string& path, const std::string& key) {
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    std::istringstream words(line);
    std::string name, unit;
    std::uint64_t value = 0;
    if (!(words >> name >> value) || (name != key && name != key + ":")) continue;
    words >> unit;
    return unit == "kB" ? value * 1024 : value;
  }
  return kNone;
}

// A one-number file (memory.max, memory.current, ...); kNone for "max", a missing file or text.
std::uint64_t number_in(const std::string& path) {
  std::ifstream in(path);
  std::uint64_t value = 0;
  return in >> value ? value : kNone;
}

// v1 writes "no limit" as a huge number (the largest page-aligned long).
std::uint64_t limit_or_none(std::uint64_t v) { return v >= (1ull << 62) ? kNone : v; }

std::uint64_t or_zero(std::uint64_t v) { return v == kNone ? 0 : v; }

// What the kernel reclaims in a cgroup before it kills: its file cache less shared memory
// (tmpfs, which only swap could take), and in v2 reclaimable slab. memory.stat read once.
std::uint64_t reclaimable_in(const std::string& dir, bool v1) {
  std::uint64_t file = 0, shmem = 0, slab = 0;
  std::ifstream in(dir + "/memory.stat");
  std::string name;
  for (std::uint64_t value = 0; in >> name >> value;) {
    if (name == (v1 ? "total_cache" : "file")) file = value;
    if (name == (v1 ? "total_shmem" : "shmem")) shmem = value;
    if (!v1 && name == "slab_reclaimable") slab = value;
  }
  return file - std::min(file, shmem) + slab;
}

// One cgroup directory's memory limit; kNone where it sets none.
std::uint64_t limit_in(const std::string& dir, bool v1) {
  return limit_or_none(number_in(dir + (v1 ? "/memory.limit_in_bytes" : "/memory.max")));
}

// The room that limit leaves.
std::uint64_t room_under(std::uint64_t limit, const std::string& dir, bool v1) {
  std::uint64_t used = or_zero(number_in(dir + (v1 ? "/memory.usage_in_bytes" : "/memory.current")));
  used -= std::min(used, reclaimable_in(dir, v1));
  return limit > used ? limit - used : 0;
}

// Whether the directory forbids swap: v2's memory.swap.max of 0, or v1's memory+swap limit
// no larger than its memory limit (`limit`, kNone for none). A small swap allowance counts
// as swap.
bool forbids_swap(const std::string& dir, bool v1, std::uint64_t limit) {
  if (!v1) return number_in(dir + "/memory.swap.max") == 0;
  const std::uint64_t both = limit_or_none(number_in(dir + "/memory.memsw.limit_in_bytes"));
  return both != kNone && limit != kNone && both <= limit;
}

}  // namespace

MemoryRoom memory_room(const std::string& root) {
  MemoryRoom r;
  const std::uint64_t available = value_of(root + "/proc/meminfo", "MemAvailable");
  const std::uint64_t swap = value_of(root + "/proc/meminfo", "SwapTotal");
  std::uint64_t resident = value_of(root + "/proc/self/status", "RssAnon");  // Linux 4.5 on
  if (resident == kNone) resident = value_of(root + "/proc/self/status", "VmRSS");
  r.node = or_zero(available);
  r.swap = or_zero(swap) > 0;
  r.cgroup_swap = r.swap;
  r.resident = or_zero(resident);
  CgroupDir c;
  if (!find_cgroup_dir(root, "memory", c)) return r;
  std::uint64_t tightest = kNone;
  for (const std::string& dir : dirs_up(c)) {
    const std::uint64_t limit = limit_in(root + dir, c.v1);
    const std::uint64_t room = limit == kNone ? kNone : room_under(limit, root + dir, c.v1);
    if (room < tightest) {
      tightest = room;
      r.where = dir;
    }
    if (forbids_swap(root + dir, c.v1, limit)) r.cgroup_swap = false;
  }
  if (tightest == kNone) return r;
  r.cgroup = std::max<std::uint64_t>(tightest, 1);  // 0 means "no limit"
  identity_of(root + r.where, r.device, r.inode);
  return r;
}

}  // namespace dtrain::parallel
