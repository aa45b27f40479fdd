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

// The room one cgroup directory's limit leaves; kNone where it sets none. v1 writes "no
// limit" as a huge number (the largest page-aligned long).
std::uint64_t room_in(const std::string& dir, bool v1) {
  const std::uint64_t limit = number_in(dir + (v1 ? "/memory.limit_in_bytes" : "/memory.max"));
  if (limit == kNone || limit >= (1ull << 62)) return kNone;
  std::uint64_t used = number_in(dir + (v1 ? "/memory.usage_in_bytes" : "/memory.current"));
  const std::uint64_t cache = value_of(dir + "/memory.stat", v1 ? "total_cache" : "file");
  if (used == kNone) used = 0;
  if (cache != kNone) used -= std::min(used, cache);
  return limit > used ? limit - used : 0;
}

}  // namespace

MemoryRoom memory_room(const std::string& root) {
  MemoryRoom r;
  const std::uint64_t available = value_of(root + "/proc/meminfo", "MemAvailable");
  const std::uint64_t swap = value_of(root + "/proc/meminfo", "SwapTotal");
  const std::uint64_t resident = value_of(root + "/proc/self/status", "VmRSS");
  r.node = available == kNone ? 0 : available;
  r.swap = swap != kNone && swap > 0;
  r.resident = resident == kNone ? 0 : resident;
  CgroupDir c;
  if (!find_cgroup_dir(root, "memory", c)) return r;
  std::uint64_t tightest = kNone;
  for (const std::string& dir : dirs_up(c)) {
    const std::uint64_t room = room_in(root + dir, c.v1);
    if (room < tightest) {
      tightest = room;
      r.where = dir;
    }
  }
  if (tightest == kNone) return r;
  r.cgroup = std::max<std::uint64_t>(tightest, 1);  // 0 means "no limit"
  identity_of(root + r.where, r.device, r.inode);
  return r;
}

}  // namespace dtrain::parallel
