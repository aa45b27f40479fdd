#pragma once
// A made-up /proc and /sys tree under a scratch root, for the readers of cgroup limits
// (cpu_quota, memory_room), which take the root as a prefix of every path they read.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <string>

class CgroupTree : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = (std::filesystem::temp_directory_path() / "dtrain-cgroup-XXXXXX").string();
    ASSERT_NE(mkdtemp(pattern.data()), nullptr);
    root_ = pattern;
  }
  void TearDown() override { std::filesystem::remove_all(root_); }

  void write(const std::string& path, const std::string& text) {
    const std::filesystem::path p = root_ + path;
    std::filesystem::create_directories(p.parent_path());
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
