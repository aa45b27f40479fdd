#include "token_store.hpp"

#include <fcntl.h>
#include <stdlib.h>  // mkostemp
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "dtrain/core/error.hpp"

namespace dtrain_data {
namespace {

using dtrain::Errc;

// A file in dir that no name refers to: O_TMPFILE, or on a file system without it a named
// file unlinked at once.
int anonymous_file(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
  if (fd >= 0) return fd;
  std::string name = dir + "/.dtrain-data-spill-XXXXXX";
  fd = ::mkostemp(&name[0], O_CLOEXEC);
  DTRAIN_CHECK(fd >= 0, Errc::io, "cannot make a spill file in '" << dir << "': " << std::strerror(errno));
  ::unlink(name.c_str());
  return fd;
}

}  // namespace

// The file is written and read in pieces of a quarter of the memory bound, at most 1 MiB.
TokenStore::TokenStore(std::string spill_dir, std::size_t memory_tokens)
    : spill_dir_(std::move(spill_dir)),
      memory_tokens_(memory_tokens),
      staging_tokens_(std::clamp<std::size_t>(memory_tokens / 4, 1, std::size_t{1} << 19)) {}

TokenStore::~TokenStore() {
  if (spill_fd_ >= 0) ::close(spill_fd_);
}

void TokenStore::append(const std::int32_t* ids, std::size_t n) {
  count_ += static_cast<std::int64_t>(n);
  const std::size_t kept = std::min(n, memory_tokens_ - memory_.size());
  if (memory_.size() + kept > memory_.capacity())  // doubling, but never past the bound
    memory_.reserve(std::min(memory_tokens_, std::max(memory_.size() + kept, 2 * memory_.capacity())));
  memory_.insert(memory_.end(), ids, ids + kept);
  for (std::size_t i = kept; i < n; ++i) {
    staging_.push_back(static_cast<std::uint16_t>(ids[i]));
    if (staging_.size() == staging_tokens_) {
      spill(staging_.data(), staging_.size());
      staging_.clear();
    }
  }
}

void TokenStore::finish() {
  if (!staging_.empty()) spill(staging_.data(), staging_.size());
  staging_.clear();
}

void TokenStore::spill(const std::uint16_t* tokens, std::size_t n) {
  if (spill_fd_ < 0) spill_fd_ = anonymous_file(spill_dir_);
  const char* bytes = reinterpret_cast<const char*>(tokens);
  const std::size_t total = 2 * n;
  for (std::size_t done = 0; done < total;) {
    const ssize_t put = ::pwrite(spill_fd_, bytes + done, total - done, static_cast<off_t>(2 * spilled_ + static_cast<std::int64_t>(done)));
    if (put < 0 && errno == EINTR) continue;
    DTRAIN_CHECK(put > 0, Errc::io, "writing the spill file in '" << spill_dir_ << "': " << std::strerror(errno));
    done += static_cast<std::size_t>(put);
  }
  spilled_ += static_cast<std::int64_t>(n);
}

void TokenStore::read(std::int64_t from, std::int64_t n,
                      const std::function<void(const std::uint16_t*, std::size_t)>& take) const {
  const std::int64_t in_memory = static_cast<std::int64_t>(memory_.size());
  if (from < in_memory) {
    const std::int64_t k = std::min(n, in_memory - from);
    take(memory_.data() + from, static_cast<std::size_t>(k));
    from += k;
    n -= k;
  }
  for (std::int64_t at = from - in_memory; n > 0;) {  // at: the first token's place in the file
    staging_.resize(static_cast<std::size_t>(std::min<std::int64_t>(n, static_cast<std::int64_t>(staging_tokens_))));
    char* bytes = reinterpret_cast<char*>(staging_.data());
    const std::size_t total = 2 * staging_.size();
    for (std::size_t done = 0; done < total;) {
      const ssize_t got = ::pread(spill_fd_, bytes + done, total - done, static_cast<off_t>(2 * at + static_cast<std::int64_t>(done)));
      if (got < 0 && errno == EINTR) continue;
      DTRAIN_CHECK(got > 0, Errc::io, "reading the spill file in '" << spill_dir_ << "': "
                                          << (got == 0 ? "it is shorter than what was written" : std::strerror(errno)));
      done += static_cast<std::size_t>(got);
    }
    take(staging_.data(), staging_.size());
    at += static_cast<std::int64_t>(staging_.size());
    n -= static_cast<std::int64_t>(staging_.size());
  }
  staging_.clear();
}

}  // namespace dtrain_data
