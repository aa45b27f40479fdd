// cgroup_cpu_quota on made-up /proc and /sys trees: cgroup v2 and v1, nested limits, a
// container's mount of its own cgroup, no limit, nothing to read; threads_within's shares.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "cgroup_tree.hpp"
#include "parallel/cpu_quota.hpp"

namespace fs = std::filesystem;
using dtrain::parallel::cgroup_cpu_quota;
using dtrain::parallel::threads_within;

namespace {

class FakeRoot : public CgroupTree {
 protected:
  // A cgroup v1 directory's limit: `quota` microseconds of CPU time each 100 ms.
  void v1_limit(const std::string& dir, const std::string& quota) {
    write(dir + "/cpu.cfs_quota_us", quota + "\n");
    write(dir + "/cpu.cfs_period_us", "100000\n");
  }
};

TEST_F(FakeRoot, NoFilesMeansNoLimit) {
  EXPECT_EQ(cgroup_cpu_quota(root_).cpus, 0);
}

TEST_F(FakeRoot, UnifiedHierarchyLimit) {
  unified("/");  // a container's cgroup namespace: its own cgroup is the top
  write("/sys/fs/cgroup/cpu.max", "250000 100000\n");
  const auto q = cgroup_cpu_quota(root_);
  EXPECT_DOUBLE_EQ(q.cpus, 2.5);
  EXPECT_EQ(q.where, "/sys/fs/cgroup");
}

TEST_F(FakeRoot, UnifiedHierarchyWithoutLimit) {
  unified("/user.slice/session-1.scope");
  write("/sys/fs/cgroup/user.slice/session-1.scope/cpu.max", "max 100000\n");
  EXPECT_EQ(cgroup_cpu_quota(root_).cpus, 0);
}

TEST_F(FakeRoot, TightestLimitOnTheWayUp) {
  unified("/job/step/task");
  write("/sys/fs/cgroup/job/cpu.max", "200000 100000\n");
  write("/sys/fs/cgroup/job/step/cpu.max", "max 100000\n");
  write("/sys/fs/cgroup/job/step/task/cpu.max", "600000 100000\n");
  write("/sys/fs/cgroup/cpu.max", "bogus\n");  // unreadable: no limit there
  const auto q = cgroup_cpu_quota(root_);
  EXPECT_DOUBLE_EQ(q.cpus, 2);
  EXPECT_EQ(q.where, "/sys/fs/cgroup/job");
}

TEST_F(FakeRoot, ALowerLimitIsTighter) {
  unified("/job/step/task");
  write("/sys/fs/cgroup/job/cpu.max", "200000 100000\n");
  // none in job/step (the cpu controller not enabled there)
  write("/sys/fs/cgroup/job/step/task/cpu.max", "100000 100000\n");
  const auto q = cgroup_cpu_quota(root_);
  EXPECT_DOUBLE_EQ(q.cpus, 1);
  EXPECT_EQ(q.where, "/sys/fs/cgroup/job/step/task");
  EXPECT_NE(q.inode, 0u);  // the directory's identity, for telling cgroups apart
}

TEST_F(FakeRoot, CgroupV1CpuControllerTakesPrecedence) {
  // A hybrid system: v1 holds the cpu controller (shared with cpuacct), v2 holds none.
  write("/proc/self/cgroup",
        "5:cpuset:/\n4:cpu,cpuacct:/batch/job7\n1:name=systemd:/\n0::/batch/job7\n");
  write("/proc/self/mountinfo",
        "30 22 0:26 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n"
        "31 22 0:27 / /sys/fs/cgroup/cpuset rw - cgroup cgroup rw,cpuset\n"
        "32 22 0:28 / /sys/fs/cgroup/cpu,cpuacct rw shared:9 - cgroup cgroup rw,cpu,cpuacct\n");
  v1_limit("/sys/fs/cgroup/cpu,cpuacct/batch/job7", "150000");
  write("/sys/fs/cgroup/unified/batch/job7/cpu.max", "100000 100000\n");  // not the cpu's
  const auto q = cgroup_cpu_quota(root_);
  EXPECT_DOUBLE_EQ(q.cpus, 1.5);
  EXPECT_EQ(q.where, "/sys/fs/cgroup/cpu,cpuacct/batch/job7");
}

TEST_F(FakeRoot, CgroupV1UnlimitedQuota) {
  write("/proc/self/cgroup", "3:cpu:/dtq\n");
  write("/proc/self/mountinfo", "32 22 0:28 / /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu\n");
  v1_limit("/sys/fs/cgroup/cpu/dtq", "-1");
  EXPECT_EQ(cgroup_cpu_quota(root_).cpus, 0);
}

TEST_F(FakeRoot, ContainerMountOfItsOwnCgroup) {
  // Without a cgroup namespace a container sees its full path, but the mount's top is its
  // own cgroup (mountinfo's root field), here with a space escaped in the mount point.
  write("/proc/self/cgroup", "2:cpu,cpuacct:/docker/abc/sub\n");
  write("/proc/self/mountinfo",
        "40 31 0:28 /docker/abc /sys/fs/cgroup/cpu\\040acct rw - cgroup cgroup rw,cpuacct,cpu\n");
  v1_limit("/sys/fs/cgroup/cpu acct", "100000");
  v1_limit("/sys/fs/cgroup/cpu acct/sub", "50000");
  // What reading the whole path below the mount point would find instead:
  v1_limit("/sys/fs/cgroup/cpu acct/docker/abc/sub", "25000");
  const auto q = cgroup_cpu_quota(root_);
  EXPECT_DOUBLE_EQ(q.cpus, 0.5);
  EXPECT_EQ(q.where, "/sys/fs/cgroup/cpu acct/sub");
}

TEST_F(FakeRoot, TheMountThatShowsTheCgroup) {
  // Two mounts of the hierarchy: the first shows another container's cgroup only.
  write("/proc/self/cgroup", "0::/pods/b\n");
  write("/proc/self/mountinfo",
        "30 22 0:26 /pods/a /mnt/a rw - cgroup2 cgroup2 rw\n"
        "31 22 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n");
  write("/mnt/a/cpu.max", "100000 100000\n");
  write("/sys/fs/cgroup/pods/b/cpu.max", "300000 100000\n");
  const auto q = cgroup_cpu_quota(root_);
  EXPECT_DOUBLE_EQ(q.cpus, 3);
  EXPECT_EQ(q.where, "/sys/fs/cgroup/pods/b");
}

TEST_F(FakeRoot, ACgroupNoMountShowsHasNoLimit) {
  write("/proc/self/mountinfo", "31 22 0:26 /pods/a /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n");
  write("/sys/fs/cgroup/cpu.max", "100000 100000\n");
  write("/proc/self/cgroup", "0::/pods/b\n");  // outside the mount's root
  EXPECT_EQ(cgroup_cpu_quota(root_).cpus, 0);
  write("/proc/self/cgroup", "0::/../b\n");  // above a cgroup namespace's root
  EXPECT_EQ(cgroup_cpu_quota(root_).cpus, 0);
}

TEST_F(FakeRoot, ControllerNamesAreWholeWords) {
  // cpuset and cpuacct are not the cpu controller.
  write("/proc/self/cgroup", "5:cpuset:/a\n2:cpuacct:/a\n");
  write("/proc/self/mountinfo", "31 22 0:27 / /sys/fs/cgroup/cpuset rw - cgroup cgroup rw,cpuset\n");
  v1_limit("/sys/fs/cgroup/cpuset/a", "100000");
  EXPECT_EQ(cgroup_cpu_quota(root_).cpus, 0);
}

TEST(ThreadsWithin, WholeCpusOfTheSmallerShare) {
  EXPECT_EQ(threads_within(8, 1, 0, 1), 8);      // no limit: the mask
  EXPECT_EQ(threads_within(8, 2, 0, 1), 4);      // two ranks on the mask
  EXPECT_EQ(threads_within(2, 4, 0, 1), 1);      // at least one
  EXPECT_EQ(threads_within(16, 1, 2.4, 1), 2);   // the limit's nearest whole CPUs
  EXPECT_EQ(threads_within(16, 1, 2.6, 1), 3);
  EXPECT_EQ(threads_within(16, 1, 0.3, 1), 1);
  EXPECT_EQ(threads_within(8, 2, 4, 4), 1);      // four ranks under one limit, two per mask
  EXPECT_EQ(threads_within(8, 1, 16, 1), 8);     // a limit above the mask changes nothing
  EXPECT_EQ(threads_within(4, 1, 1.8e10, 1), 4); // nor does an enormous one
}

}  // namespace
