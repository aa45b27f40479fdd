// memory_room on made-up /proc and /sys trees (cgroup v2 and v1 limits, nested, the file cache
// left out of the use, no limit, nothing to read) and host_memory_shortfall's judgement over
// the ranks of nodes and cgroups.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cgroup_tree.hpp"
#include "parallel/memory_room.hpp"
#include "train/host_memory.hpp"

using dtrain::parallel::memory_room;
using dtrain::train::host_memory_shortfall;
using dtrain::train::RankRoom;

namespace {

constexpr std::uint64_t MiB = 1ull << 20, GiB = 1ull << 30;

using MemoryTree = CgroupTree;

TEST_F(MemoryTree, NothingToReadIsUnknown) {
  const auto r = memory_room(root_);
  EXPECT_EQ(r.node, 0u);
  EXPECT_EQ(r.cgroup, 0u);
  EXPECT_EQ(r.resident, 0u);
  EXPECT_FALSE(r.swap);
}

TEST_F(MemoryTree, NodeAvailableSwapAndResident) {
  write("/proc/meminfo", "MemTotal:       16000000 kB\nMemFree:  100 kB\nMemAvailable:    8000000 kB\n"
                         "SwapTotal:      0 kB\n");
  write("/proc/self/status", "Name:\tx\nVmPeak:\t 9999 kB\nVmRSS:\t    2048 kB\n");
  auto r = memory_room(root_);
  EXPECT_EQ(r.node, 8000000ull * 1024);
  EXPECT_EQ(r.resident, 2048ull * 1024);  // VmRSS where the kernel gives no RssAnon
  EXPECT_FALSE(r.swap);
  write("/proc/self/status", "VmRSS:\t    2048 kB\nRssAnon:\t  1024 kB\nRssFile:\t 1024 kB\n");
  write("/proc/meminfo", "MemAvailable:    8000000 kB\nSwapTotal:  1024 kB\n");
  r = memory_room(root_);
  EXPECT_EQ(r.resident, 1024ull * 1024);  // the mapped files are not the run's buffers
  EXPECT_TRUE(r.swap);
  EXPECT_TRUE(r.cgroup_swap);  // no cgroup forbids it
}

TEST_F(MemoryTree, UnifiedLimitLessUseWithoutWhatIsReclaimed) {
  unified("/slurm/job5/step0");
  // The job's limit of 4 GiB, 3 GiB in use: 2 GiB of file cache, of which 512 MiB is shared
  // memory (not reclaimed without swap), and 256 MiB of reclaimable slab: 1.25 GiB used,
  // 2.75 GiB of room. The step below sets none ("max"); the top's larger limit does not bind.
  write("/sys/fs/cgroup/slurm/job5/memory.max", std::to_string(4 * GiB) + "\n");
  write("/sys/fs/cgroup/slurm/job5/memory.current", std::to_string(3 * GiB) + "\n");
  write("/sys/fs/cgroup/slurm/job5/memory.stat", "anon 1073741824\nfile " + std::to_string(2 * GiB) +
                                                     "\nkernel 0\nshmem " + std::to_string(512 * MiB) +
                                                     "\nslab_reclaimable " + std::to_string(256 * MiB) + "\n");
  write("/sys/fs/cgroup/slurm/job5/step0/memory.max", "max\n");
  write("/sys/fs/cgroup/slurm/memory.max", std::to_string(64 * GiB) + "\n");
  write("/sys/fs/cgroup/slurm/memory.current", std::to_string(3 * GiB) + "\n");
  const auto r = memory_room(root_);
  EXPECT_EQ(r.cgroup, 2 * GiB + 768 * MiB);
  EXPECT_EQ(r.where, "/sys/fs/cgroup/slurm/job5");
  EXPECT_NE(r.inode, 0u);
}

TEST_F(MemoryTree, ACgroupMayForbidTheNodesSwap) {
  write("/proc/meminfo", "MemAvailable: 8000000 kB\nSwapTotal: 4000000 kB\n");
  unified("/slurm/job5/step0");
  write("/sys/fs/cgroup/slurm/job5/memory.max", std::to_string(4 * GiB) + "\n");
  EXPECT_TRUE(memory_room(root_).cgroup_swap);
  write("/sys/fs/cgroup/slurm/job5/memory.swap.max", "0\n");  // SLURM's default on cgroup v2
  const auto r = memory_room(root_);
  EXPECT_TRUE(r.swap);
  EXPECT_FALSE(r.cgroup_swap);
}

TEST_F(MemoryTree, VersionOneLimitAndItsNoLimitValue) {
  write("/proc/self/cgroup", "4:memory:/process/abc\n3:cpu,cpuacct:/\n0::/\n");
  write("/proc/self/mountinfo",
        "22 1 0:21 / / rw - ext4 /dev/sda1 rw\n"
        "35 22 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n");
  const std::string dir = "/sys/fs/cgroup/memory/process/abc";
  write(dir + "/memory.limit_in_bytes", "9223372036854771712\n");  // v1's "no limit"
  write(dir + "/memory.usage_in_bytes", "431419392\n");
  EXPECT_EQ(memory_room(root_).cgroup, 0u);
  write(dir + "/memory.limit_in_bytes", std::to_string(GiB) + "\n");
  write(dir + "/memory.stat", "cache 100\ntotal_cache 141419392\ntotal_shmem 10000000\n");
  write("/proc/meminfo", "MemAvailable: 8000000 kB\nSwapTotal: 4000000 kB\n");
  auto r = memory_room(root_);
  EXPECT_EQ(r.cgroup, GiB - 300 * 1000 * 1000);  // used: 431419392 - (141419392 - 10000000)
  EXPECT_EQ(r.where, dir);
  EXPECT_TRUE(r.cgroup_swap);
  write(dir + "/memory.memsw.limit_in_bytes", std::to_string(GiB) + "\n");  // memory + swap = memory
  EXPECT_FALSE(memory_room(root_).cgroup_swap);
}

TEST_F(MemoryTree, UseOverTheLimitLeavesNoRoomButStillALimit) {
  unified("/job");
  write("/sys/fs/cgroup/job/memory.max", "1000\n");
  write("/sys/fs/cgroup/job/memory.current", "5000\n");
  EXPECT_EQ(memory_room(root_).cgroup, 1u);  // 0 would read as "no limit"
}

RankRoom rank_on(const char* host, std::uint64_t more, std::uint64_t node_room) {
  RankRoom r;
  std::snprintf(r.host, sizeof r.host, "%s", host);
  r.node_key = std::hash<std::string>()(host);
  r.more = more;
  r.node_room = node_room;
  return r;
}

TEST(HostMemory, TheRanksOfANodeShareItsRoom) {
  // Two nodes of two ranks each, 3 GiB a rank: 6 GiB fit in 7, not in 5.
  std::vector<RankRoom> ranks = {rank_on("n1", 3 * GiB, 7 * GiB), rank_on("n1", 3 * GiB, 7 * GiB),
                                 rank_on("n2", 3 * GiB, 5 * GiB), rank_on("n2", 3 * GiB, 5 * GiB)};
  const std::string message = host_memory_shortfall(ranks);
  EXPECT_NE(message.find("the 2 ranks on node 'n2' will take about 6.00 GiB more"), std::string::npos) << message;
  EXPECT_NE(message.find("the node has 5.00 GiB available (MemAvailable)"), std::string::npos) << message;
  ranks[2].node_room = ranks[3].node_room = 7 * GiB;
  EXPECT_EQ(host_memory_shortfall(ranks), "");
}

TEST(HostMemory, UnknownRoomAndSwapAreNotJudged) {
  std::vector<RankRoom> ranks = {rank_on("n1", 3 * GiB, 0), rank_on("n2", 3 * GiB, 1 * GiB)};
  EXPECT_NE(host_memory_shortfall(ranks), "");
  ranks[1].swap = 1;
  EXPECT_EQ(host_memory_shortfall(ranks), "");
}

TEST(HostMemory, ACgroupLimitBindsItsRanksOnly) {
  // One node with room; two of its ranks in one job's cgroup of 4 GiB, the third in another.
  std::vector<RankRoom> ranks = {rank_on("n1", 3 * GiB, 64 * GiB), rank_on("n1", 3 * GiB, 64 * GiB),
                                 rank_on("n1", 3 * GiB, 64 * GiB)};
  for (int i = 0; i < 3; ++i) {
    ranks[i].cgroup_key = i < 2 ? 11 : 12;
    ranks[i].cgroup_room = 4 * GiB;
    std::snprintf(ranks[i].where, sizeof ranks[i].where, "/sys/fs/cgroup/job%d", i < 2 ? 1 : 2);
  }
  const std::string message = host_memory_shortfall(ranks);
  EXPECT_NE(message.find("the 2 ranks on node 'n1' in cgroup '/sys/fs/cgroup/job1' will take about 6.00 GiB"),
            std::string::npos) << message;
  EXPECT_NE(message.find("its memory limit leaves 4.00 GiB"), std::string::npos) << message;
  ranks[1].more = 512 * MiB;
  EXPECT_EQ(host_memory_shortfall(ranks), "");
  ranks[1].more = 3 * GiB;
  ranks[0].swap = ranks[1].swap = ranks[2].swap = 1;  // the node may swap, the job may not
  EXPECT_NE(host_memory_shortfall(ranks), "");
  ranks[0].cgroup_swap = 1;
  EXPECT_EQ(host_memory_shortfall(ranks), "");
}

}  // namespace
