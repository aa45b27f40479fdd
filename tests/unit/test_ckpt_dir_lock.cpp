// One process per checkpoint directory (ckpt/dir_lock.hpp): claims within a process share
// one lock, another process is refused with the holder named, and a released or dead
// holder leaves the directory free.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <chrono>

#include "ckpt/dir_lock.hpp"
#include "dtrain/core/error.hpp"

using namespace dtrain;
namespace fs = std::filesystem;

namespace {

fs::path fresh_dir(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("dtrain_lock_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::remove(dir.string() + "_link");  // left by an earlier run of the same pid that died
  fs::create_directories(dir);
  return dir;
}

// Claims dir in a child process: 0 when it got the lock, 1 when refused with a message
// naming `holder_pid`, 2 on anything else.
int claim_in_child(const fs::path& dir, pid_t holder_pid) {
  const pid_t child = ::fork();
  if (child == 0) {
    int code = 2;
    try {
      auto lock = ckpt::lock_directory(dir.string());
      code = 0;
    } catch (const Error& e) {
      const std::string what = e.what();
      const bool named = what.find("is in use by another run (process " +
                                   std::to_string(holder_pid) + " on host ") != std::string::npos;
      code = e.code() == Errc::io && named ? 1 : 2;
    } catch (...) {
    }
    ::_exit(code);
  }
  int status = 0;
  ::waitpid(child, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 3;
}

}  // namespace

TEST(DirectoryLock, ClaimsInOneProcessShareTheLock) {
  const fs::path dir = fresh_dir("shared");
  fs::create_directory_symlink(dir, dir.string() + "_link");
  auto a = ckpt::lock_directory(dir.string());
  auto b = ckpt::lock_directory((dir / ".").string());
  auto c = ckpt::lock_directory(dir.string() + "_link");
  EXPECT_EQ(a.get(), b.get());
  EXPECT_EQ(a.get(), c.get());
  std::ifstream in(dir / ckpt::kLockFileName);
  std::string line;
  std::getline(in, line);
  EXPECT_EQ(line.rfind("process " + std::to_string(::getpid()) + " on host ", 0), 0u) << line;
  fs::remove(dir.string() + "_link");
  fs::remove_all(dir);
}

TEST(DirectoryLock, AnotherProcessIsRefusedUntilTheLockIsReleased) {
  const fs::path dir = fresh_dir("other");
  {
    auto held = ckpt::lock_directory(dir.string());
    EXPECT_EQ(claim_in_child(dir, ::getpid()), 1);
    auto again = ckpt::lock_directory(dir.string());  // still this process's
    EXPECT_EQ(again.get(), held.get());
  }
  EXPECT_EQ(claim_in_child(dir, ::getpid()), 0);  // released with the last claim
  fs::remove_all(dir);
}

TEST(DirectoryLock, ADeadHolderLeavesTheDirectoryFree) {
  const fs::path dir = fresh_dir("dead");
  const pid_t holder = ::fork();
  if (holder == 0) {
    try {
      auto lock = ckpt::lock_directory(dir.string());
      ::_exit(0);  // dies holding it: the kernel drops the lock
    } catch (...) {
      ::_exit(1);
    }
  }
  int status = 0;
  ::waitpid(holder, &status, 0);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  auto lock = ckpt::lock_directory(dir.string());
  EXPECT_NE(lock, nullptr);
  fs::remove_all(dir);
}

TEST(DirectoryLock, AForkedChildDoesNotKeepItsParentsLock) {
  const fs::path dir = fresh_dir("fork");
  int ready[2], go[2];
  ASSERT_EQ(::pipe(ready), 0);
  ASSERT_EQ(::pipe(go), 0);
  pid_t sleeper = -1;
  {
    auto held = ckpt::lock_directory(dir.string());
    sleeper = ::fork();
    if (sleeper == 0) {  // lives on after the parent's release, until told to go
      char c = 'r';
      if (::write(ready[1], &c, 1) != 1) ::_exit(1);
      const ssize_t got = ::read(go[0], &c, 1);
      ::_exit(got == 1 ? 0 : 1);
    }
    char c;
    ASSERT_EQ(::read(ready[0], &c, 1), 1);  // the child runs: its fork handlers are done
  }
  EXPECT_EQ(claim_in_child(dir, ::getpid()), 0);  // free while the sleeper still runs
  ASSERT_EQ(::write(go[1], "x", 1), 1);
  int status = 0;
  ::waitpid(sleeper, &status, 0);
  for (int fd : {ready[0], ready[1], go[0], go[1]}) ::close(fd);
  fs::remove_all(dir);
}

// A holder that has not named itself (it has just locked, or is releasing) is waited for:
// a claim made while it holds the lock succeeds once it lets go within the second.
TEST(DirectoryLock, AClaimWaitsBrieflyForAHolderThatNamesNobody) {
  const fs::path dir = fresh_dir("unnamed");
  const int fd = ::open((dir / ckpt::kLockFileName).c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::flock(fd, LOCK_EX | LOCK_NB), 0);  // held, with an empty lock file
  int claiming[2];
  ASSERT_EQ(::pipe(claiming), 0);
  const pid_t child = ::fork();
  if (child == 0) {
    ::close(fd);  // its copy would hold the lock too
    ::close(claiming[0]);
    const char byte = 1;
    if (::write(claiming[1], &byte, 1) != 1) ::_exit(2);
    try {
      auto lock = ckpt::lock_directory(dir.string());
      ::_exit(0);
    } catch (...) {
      ::_exit(1);
    }
  }
  // Let go 100 ms after the child starts its claim: well inside the second it waits, even on
  // a loaded machine (a fixed sleep from the fork could outlast the child's wait).
  ::close(claiming[1]);  // a child that dies before writing ends the read
  char byte = 0;
  const bool claimed = ::read(claiming[0], &byte, 1) == 1;
  ::close(claiming[0]);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  ::close(fd);
  int status = 0;
  ::waitpid(child, &status, 0);
  EXPECT_TRUE(claimed);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  fs::remove_all(dir);
}
