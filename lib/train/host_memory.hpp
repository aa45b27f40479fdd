#pragma once
// The run's host memory against what each node, and each cgroup with a memory limit, has
// room for (parallel/memory_room.hpp): a run that will not fit fails at its start with a
// message naming the node, instead of the OOM killer ending a rank at its first step with
// signal 9 (mmap grants memory that is taken only when first written).
#include <cstdint>
#include <string>
#include <vector>

#include "dtrain/comm/communicator.hpp"

namespace dtrain::train {

// One rank's figures, as every rank gathers them.
struct RankRoom {
  std::uint64_t node_key = 0;    // equal on two ranks that share a node (its kernel's boot
                                 // id, else its name; a rank with neither has its own)
  std::uint64_t cgroup_key = 0;  // equal when they share a limiting cgroup; 0: no limit
  std::uint64_t more = 0;        // bytes the rank will still take: its arenas and activations
                                 // less what it holds already
  std::uint64_t node_room = 0;   // the node's MemAvailable; 0: unknown
  std::uint64_t cgroup_room = 0;
  std::uint64_t swap = 0;        // 1: the node has swap (going over pages instead of killing)
  std::uint64_t cgroup_swap = 0; // 1: ... and the limiting cgroup may use it
  std::uint64_t checks = 1;      // DTRAIN_HOST_MEMORY_CHECK: equal on every rank
  char host[256] = {};
  char where[256] = {};          // the limiting cgroup's directory
};

// The first node or cgroup whose ranks will take more than its room, as a message; "" where
// every one has room. Nodes and cgroups that may swap, and rooms that are unknown, are not
// judged.
std::string host_memory_shortfall(const std::vector<RankRoom>& ranks);

// Collective over world: `need` is the host memory this rank's buffers take once the run
// uses them (parameters, gradients, optimizer state and activations).
// Throws Error(Errc::invalid_config) with host_memory_shortfall's message on every rank where
// it is not empty. DTRAIN_HOST_MEMORY_CHECK=0 on every rank turns the check off (env.hpp; a
// setting that differs between the ranks fails them all);
// DTRAIN_TEST_HOST_MEMORY_ROOT (tests only) reads a made-up /proc and /sys tree instead.
void check_host_memory(Communicator& world, std::uint64_t need);

}  // namespace dtrain::train
