#pragma once
// One run per checkpoint directory. Two runs saving into one directory at once would share
// its temporary names (one could publish a file the other was overwriting), move `latest`
// under each other and prune each other's files. A run claims the directory with an
// exclusive flock(2) on DIR/.dtrain-lock, held until it ends; the kernel drops the lock when
// the process dies, so a crashed run never leaves a stale claim.
#include <memory>
#include <string>

namespace dtrain::ckpt {

inline constexpr const char* kLockFileName = ".dtrain-lock";

class DirectoryLock;

// Claims dir for this process (one rank's call): every claim of one directory within a
// process shares one lock (paths compared after resolving links), released when the last
// is dropped. The lock file records the holder's host, process and start time, which the
// error names when another process holds it: Error(Errc::io). A child made by fork()
// closes its copies of the locks (they would otherwise stay held while it lives); a claim
// refused while the lock file names nobody retries for up to a second. On a file
// system without flock support (ENOLCK, EOPNOTSUPP, ENOSYS, EINVAL) the claim holds
// nothing, and each such claim logs a warning.
std::shared_ptr<DirectoryLock> lock_directory(const std::string& dir);

}  // namespace dtrain::ckpt
