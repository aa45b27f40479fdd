#include "core/pread_all.hpp"

#include <unistd.h>

#include <cerrno>

namespace dtrain {

ssize_t pread_all(int fd, void* out, std::size_t bytes, std::uint64_t offset) noexcept {
  auto* to = static_cast<unsigned char*>(out);
  std::size_t done = 0;
  while (done < bytes) {
    const ssize_t got = ::pread(fd, to + done, bytes - done, static_cast<off_t>(offset + done));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) return -1;
    if (got == 0) break;  // the end of the file
    done += static_cast<std::size_t>(got);
  }
  return static_cast<ssize_t>(done);
}

}  // namespace dtrain
