// cgroup_cpu_quota on made-up /proc and /sys trees: cgroup v2 and v1, nested limits, a
// container's mount of its own cgroup, no limit, nothing to read.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "parallel/cpu_quota.hpp"

namespace fs = std::filesystem;
using dtrain::parallel::cgroup_cpu_quota;

namespace {

// A scratch root the test writes its tree under, removed at the end.
class FakeRoot : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = (fs::temp_directory_path() / "dtrain-cgroup-XXXXXX").string();
    ASSERT_NE(mkdtemp(pattern.data()), nullptr);
    root_ = pattern;
  }
  void TearDown() override { fs::remove_all(root_); }

  void write(const std::string& path, const std::string& text) {
    const fs::path p = root_ + path;
    fs::create_directories(p.parent_path());
    std::ofstream(p) << text;
  }
  // A v2-only system (the unified hierarchy at /sys/fs/cgroup), the process in `cgroup`.
  void unified(const std::string& cgroup) {
    write("/proc/self/cgroup", "0::" + cgroup + "\n");
    write("/proc/self/mountinfo",
          "22 1 0:21 / / rw - ext4 /dev/sda1 rw\n"
          "30 22 0:26 / /sys/fs/cgroup rw,nosuid shared:4 - cgroup2 cgroup2 rw,nsdelegate\n");
  }

  std::string root_;
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

TEST_F(FakeRoot, CgroupV1CpuControllerTakesPrecedence) {
  // A hybrid system: v1 holds the cpu controller (shared with cpuacct), v2 holds none.
  write("/proc/self/cgroup",
        "5:cpuset:/\n4:cpu,cpuacct:/batch/job7\n1:name=systemd:/\n0::/batch/job7\n");
  write("/proc/self/mountinfo",
        "30 22 0:26 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n"
        "31 22 0:27 / /sys/fs/cgroup/cpuset rw - cgroup cgroup rw,cpuset\n"
        "32 22 0:28 / /sys/fs/cgroup/cpu,cpuacct rw shared:9 - cgroup cgroup rw,cpu,cpuacct\n");
  write("/sys/fs/cgroup/cpu,cpuacct/batch/job7/cpu.cfs_quota_us", "150000\n");
  write("/sys/fs/cgroup/cpu,cpuacct/batch/job7/cpu.cfs_period_us", "100000\n");
  write("/sys/fs/cgroup/unified/batch/job7/cpu.max", "100000 100000\n");  // not the cpu's
  const auto q = cgroup_cpu_quota(root_);
  EXPECT_DOUBLE_EQ(q.cpus, 1.5);
  EXPECT_EQ(q.where, "/sys/fs/cgroup/cpu,cpuacct/batch/job7");
}

TEST_F(FakeRoot, CgroupV1UnlimitedQuota) {
  write("/proc/self/cgroup", "3:cpu:/dtq\n");
  write("/proc/self/mountinfo", "32 22 0:28 / /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu\n");
  write("/sys/fs/cgroup/cpu/dtq/cpu.cfs_quota_us", "-1\n");
  write("/sys/fs/cgroup/cpu/dtq/cpu.cfs_period_us", "100000\n");
  EXPECT_EQ(cgroup_cpu_quota(root_).cpus, 0);
}

TEST_F(FakeRoot, ContainerMountOfItsOwnCgroup) {
  // Without a cgroup namespace a container sees its full path, but the mount's top is its
  // own cgroup (mountinfo's root field), with a space escaped in the mount point.
  write("/proc/self/cgroup", "2:cpu,cpuacct:/docker/abc\n");
  write("/proc/self/mountinfo",
        "40 31 0:28 /docker/abc /sys/fs/cgroup/cpu\\040acct rw - cgroup cgroup rw,cpuacct,cpu\n");
  write("/sys/fs/cgroup/cpu acct/cpu.cfs_quota_us", "50000\n");
  write("/sys/fs/cgroup/cpu acct/cpu.cfs_period_us", "100000\n");
  const auto q = cgroup_cpu_quota(root_);
  EXPECT_DOUBLE_EQ(q.cpus, 0.5);
  EXPECT_EQ(q.where, "/sys/fs/cgroup/cpu acct");
}

TEST_F(FakeRoot, ControllerNamesAreWholeWords) {
  // cpuset and cpuacct are not the cpu controller.
  write("/proc/self/cgroup", "5:cpuset:/a\n2:cpuacct:/a\n");
  write("/proc/self/mountinfo", "31 22 0:27 / /sys/fs/cgroup/cpuset rw - cgroup cgroup rw,cpuset\n");
  write("/sys/fs/cgroup/cpuset/a/cpu.cfs_quota_us", "100000\n");
  write("/sys/fs/cgroup/cpuset/a/cpu.cfs_period_us", "100000\n");
  EXPECT_EQ(cgroup_cpu_quota(root_).cpus, 0);
}

}  // namespace
