#include "train/host_memory.hpp"

#include <algorithm>
#include <cstdio>
#include <map>

#include "core/host_name.hpp"
#include "dtrain/core/env.hpp"
#include "dtrain/core/error.hpp"
#include "dtrain/core/rng.hpp"
#include "parallel/memory_room.hpp"

namespace dtrain::train {
namespace {

std::string gib(std::uint64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.2f GiB", static_cast<double>(bytes) / (1ull << 30));
  return text;
}

// Ranks grouped by a key: the sum of what they will take and the smallest room any of them
// sees, with the first rank of the group (for its names).
struct Group {
  std::uint64_t more = 0, room = 0;
  int ranks = 0;
  const RankRoom* first = nullptr;
};

void add(Group& g, const RankRoom& r, std::uint64_t room) {
  g.more += r.more;
  g.room = g.ranks == 0 ? room : std::min(g.room, room);
  if (g.ranks++ == 0) g.first = &r;
}

std::string ranks_text(int n) { return n == 1 ? "the rank" : "the " + std::to_string(n) + " ranks"; }

}  // namespace

std::string host_memory_shortfall(const std::vector<RankRoom>& ranks) {
  std::map<std::uint64_t, Group> nodes, cgroups;
  for (const RankRoom& r : ranks) {
    if (r.node_room > 0 && r.swap == 0) add(nodes[r.node_key], r, r.node_room);
    if (r.cgroup_room > 0 && r.cgroup_key != 0 && r.cgroup_swap == 0) add(cgroups[r.cgroup_key], r, r.cgroup_room);
  }
  const std::string will_take = " will take about ";
  const std::string what = " more once the run uses its buffers (parameters, gradients, optimizer state and activations)";
  const std::string advice = ": a smaller model, --micro-batch or --seq-len, --recompute, --zero, or more nodes";
  for (const auto& [key, g] : cgroups) {
    if (g.more > g.room)
      return "host memory: " + ranks_text(g.ranks) + " on node '" + g.first->host + "' in cgroup '" +
             g.first->where + "'" + will_take + gib(g.more) + what + ", and its memory limit leaves " +
             gib(g.room) + advice;
  }
  for (const auto& [key, g] : nodes) {
    if (g.more > g.room)
      return "host memory: " + ranks_text(g.ranks) + " on node '" + g.first->host + "'" + will_take +
             gib(g.more) + what + ", and the node has " + gib(g.room) + " available (MemAvailable)" + advice;
  }
  return "";
}

void check_host_memory(Communicator& world, std::uint64_t need) {
  const parallel::MemoryRoom room = parallel::memory_room(env::get_string("DTRAIN_TEST_HOST_MEMORY_ROOT", ""));
  RankRoom mine;
  mine.checks = env::params().host_memory_check ? 1 : 0;
  std::snprintf(mine.host, sizeof mine.host, "%s", host_name("?").c_str());
  std::snprintf(mine.where, sizeof mine.where, "%s", room.where.c_str());
  // One kernel is one node, whatever names its containers give it (core/host_name.hpp); a
  // rank that can tell neither is a node of its own, never summed with others.
  std::string node = node_id();
  if (node.empty()) node = "rank " + std::to_string(world.rank());
  mine.node_key = rng::stream_id(node);
  if (room.cgroup > 0) {
    std::string key = node + '\0';
    key.append(reinterpret_cast<const char*>(&room.device), sizeof room.device);
    key.append(reinterpret_cast<const char*>(&room.inode), sizeof room.inode);
    mine.cgroup_key = rng::stream_id(key);
  }
  mine.more = need > room.resident ? need - room.resident : 0;
  mine.node_room = room.node;
  mine.cgroup_room = room.cgroup;
  mine.swap = room.swap ? 1 : 0;
  mine.cgroup_swap = room.cgroup_swap ? 1 : 0;
  // Gathered also where the check is off, so that a setting that differs between the ranks
  // fails them all instead of leaving some in this collective and others in the next.
  std::vector<RankRoom> all(static_cast<std::size_t>(world.size()));
  world.all_gather(&mine, all.data(), sizeof mine, DType::u8);
  for (const RankRoom& r : all)
    DTRAIN_CHECK(r.checks == mine.checks, Errc::invalid_config,
                 "DTRAIN_HOST_MEMORY_CHECK differs between the ranks: set it for every rank or none");
  if (mine.checks == 0) return;
  const std::string shortfall = host_memory_shortfall(all);
  // A configuration that does not fit, as sizes that do not divide are.
  DTRAIN_CHECK(shortfall.empty(), Errc::invalid_config, shortfall);
}

}  // namespace dtrain::train
