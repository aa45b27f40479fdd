#pragma once
// Host memory a process may still take before the kernel's OOM killer ends it: what its node
// has available (MemAvailable) and what its cgroup's memory limit leaves (a SLURM job's
// --mem, a container's limit). The Trainer compares it with what the run will touch, so
// that a run that cannot fit fails at its start with a message, not at its first step by
// signal 9 (memory that mmap grants is taken only when written).
#include <cstdint>
#include <string>

namespace dtrain::parallel {

struct MemoryRoom {
  bool swap = false;           // the node has swap: going over means paging, not the OOM killer
  bool cgroup_swap = false;    // ... and the limiting cgroup may use it
  std::uint64_t node = 0;      // MemAvailable, bytes; 0: unknown
  std::uint64_t cgroup = 0;    // room under the tightest cgroup limit, bytes; 0: no limit
  std::string where;           // the cgroup directory that sets it
  std::uint64_t device = 0, inode = 0;  // its identity (cgroup_dir.hpp)
  std::uint64_t resident = 0;  // this process's anonymous resident bytes now (RssAnon); 0: unknown
};

// Reads /proc/meminfo, /proc/self/status and the memory controller's files in the process's
// cgroup and each one above it: cgroup v2's memory.max, memory.current, memory.stat and
// memory.swap.max, or v1's memory.limit_in_bytes, memory.usage_in_bytes, memory.stat and
// memory.memsw.limit_in_bytes. A cgroup's room is its limit less its use without what the
// kernel reclaims before it kills: the file cache (not shared memory, which needs swap to
// go) and, in v2, reclaimable slab. A cgroup may swap where the node has swap and no level
// sets its swap to none. `root` prefixes every path read (tests hand in a made-up tree); what
// cannot be read counts as unknown or no limit.
MemoryRoom memory_room(const std::string& root = "");

}  // namespace dtrain::parallel
