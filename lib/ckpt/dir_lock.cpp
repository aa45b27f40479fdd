#include "ckpt/dir_lock.hpp"

#include <fcntl.h>
#include <pthread.h>
#include <sys/file.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <map>
#include <mutex>
#include <thread>

#include "core/host_name.hpp"
#include "dtrain/core/error.hpp"
#include "dtrain/core/log.hpp"

namespace fs = std::filesystem;

namespace dtrain::ckpt {
namespace {

// The descriptors of this process's locks (stored as fd + 1; 0 = free). A child made by
// fork() shares their open files, and with them the locks: it closes its copies at once
// (pthread_atfork), so a long-lived child never keeps its parent's directories claimed.
// Lock-free, as a child of a threaded parent may only make async-signal-safe calls.
constexpr int kSlots = 64;
std::atomic<int> g_lock_fds[kSlots];

void close_inherited_locks() {
  for (std::atomic<int>& slot : g_lock_fds) {
    const int v = slot.exchange(0);
    if (v != 0) ::close(v - 1);
  }
}

void remember_fd(int fd) {
  static std::once_flag registered;
  std::call_once(registered, [] { ::pthread_atfork(nullptr, nullptr, close_inherited_locks); });
  for (std::atomic<int>& slot : g_lock_fds) {
    int empty = 0;
    if (slot.compare_exchange_strong(empty, fd + 1)) return;
  }
  // More than kSlots directories held at once: a child would keep this one claimed.
}

void forget_fd(int fd) {
  for (std::atomic<int>& slot : g_lock_fds) {
    int held = fd + 1;
    if (slot.compare_exchange_strong(held, 0)) return;
  }
}

}  // namespace

class DirectoryLock {
 public:
  explicit DirectoryLock(int fd) : fd_(fd), owner_(::getpid()) {
    if (fd_ >= 0) remember_fd(fd_);
  }
  ~DirectoryLock() {
    // A forked child's copy was closed at the fork (its descriptor may be reused since).
    if (fd_ < 0 || ::getpid() != owner_) return;
    forget_fd(fd_);
    // Released cleanly: the holder's line goes, so the next refused run cannot quote it.
    if (held_) (void)::ftruncate(fd_, 0);
    ::close(fd_);  // releases the flock
  }
  DirectoryLock(const DirectoryLock&) = delete;
  DirectoryLock& operator=(const DirectoryLock&) = delete;
  void set_held() { held_ = true; }

 private:
  int fd_;  // -1: the file system has no locks
  pid_t owner_;
  bool held_ = false;
};

namespace {

std::string holder_text() {
  const std::string host = host_name("?");
  char since[32] = {};
  const std::time_t now = std::time(nullptr);
  std::tm utc{};
  ::gmtime_r(&now, &utc);
  std::strftime(since, sizeof since, "%Y-%m-%d %H:%M:%S UTC", &utc);
  return "process " + std::to_string(::getpid()) + " on host " + host + ", since " + since;
}

// The holder's line, or "" while it has none: it writes the line just after it locks, and
// truncates it as it releases.
std::string holder_line(int fd) {
  char text[512] = {};
  const ssize_t n = ::pread(fd, text, sizeof text - 1, 0);
  std::string s(text, n > 0 ? static_cast<std::size_t>(n) : 0);
  if (s.empty() || s.back() != '\n') return "";
  s.pop_back();
  return s;
}

int try_flock(int fd) {
  int rc;
  do rc = ::flock(fd, LOCK_EX | LOCK_NB);
  while (rc != 0 && errno == EINTR);
  return rc != 0 ? errno : 0;
}

// A refused claim waits up to a second while the lock file names nobody: the holder may
// have locked and not yet written its name, or be releasing it (a child it has just forked
// still shares the lock until it closes its copy). Returns 0 once the lock is ours, or the
// refusal's errno with the holder's line (or a placeholder) in `holder`.
int claim_or_name_holder(int fd, std::string& holder) {
  for (int attempt = 0; attempt < 50; ++attempt) {
    holder = holder_line(fd);
    if (!holder.empty()) return EWOULDBLOCK;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    const int err = try_flock(fd);
    if (err != EWOULDBLOCK) return err;
  }
  holder = "a process that has not written its name";
  return EWOULDBLOCK;
}

bool no_locks_here(int err) { return err == ENOLCK || err == EOPNOTSUPP || err == ENOSYS || err == EINVAL; }

}  // namespace

std::shared_ptr<DirectoryLock> lock_directory(const std::string& dir) {
  std::error_code ec;
  std::string key = fs::weakly_canonical(fs::absolute(dir), ec).string();
  if (ec) key = dir;
  // This process's claims. A child made by fork() inherits the map but is another
  // process: it claims anew (and is refused while its parent holds the lock).
  struct Held {
    pid_t pid = 0;
    std::weak_ptr<DirectoryLock> lock;
  };
  static std::mutex mutex;
  static std::map<std::string, Held> held;
  std::lock_guard<std::mutex> guard(mutex);
  if (held[key].pid == ::getpid()) {
    if (std::shared_ptr<DirectoryLock> lock = held[key].lock.lock()) return lock;
  }

  const std::string path = (fs::path(dir) / kLockFileName).string();
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  const int open_error = errno;
  DTRAIN_CHECK(fd >= 0, Errc::io, "cannot open the lock file '" << path << "': " << std::strerror(open_error));
  auto lock = std::make_shared<DirectoryLock>(fd);  // closes fd on every path below
  std::string holder;
  int err = try_flock(fd);
  if (err == EWOULDBLOCK) err = claim_or_name_holder(fd, holder);
  if (err != 0) {
    if (err == EWOULDBLOCK) {
      throw Error(Errc::io, "checkpoint directory '" + dir + "' is in use by another run (" + holder +
                                "; lock file '" + path + "'): give each run its own directory");
    }
    DTRAIN_CHECK(no_locks_here(err), Errc::io, "cannot lock '" << path << "': " << std::strerror(err));
    DTRAIN_LOG(warn, "checkpoint directory '" << dir << "' cannot be locked (" << std::strerror(err)
                     << "): a second run saving there at the same time would not be detected");
    lock = std::make_shared<DirectoryLock>(-1);
  } else {
    lock->set_held();
    const std::string text = holder_text() + "\n";
    // Informative only (what another run's error names): a failure here changes nothing.
    if (::ftruncate(fd, 0) == 0) {
      const ssize_t written = ::pwrite(fd, text.data(), text.size(), 0);
      (void)written;
    }
  }
  held[key] = Held{::getpid(), lock};
  return lock;
}

}  // namespace dtrain::ckpt
