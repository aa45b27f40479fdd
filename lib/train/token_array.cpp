#include "token_array.hpp"

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include "core/pread_all.hpp"
#include "dtrain/core/error.hpp"
#include "dtrain/core/hash.hpp"

namespace dtrain::train {
namespace {

constexpr std::int32_t kShardMagic = 20240520;
constexpr std::int32_t kShardVersion = 1;
constexpr std::size_t kShardHeaderBytes = 256 * sizeof(std::int32_t);

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Opens a regular file for reading. O_NONBLOCK while opening: a FIFO must not wait for a
// writer; it is cleared once the file is known to be regular (reads then block as usual).
int open_regular_file(const std::string& path, std::size_t* bytes, std::pair<std::uint64_t, std::uint64_t>* identity) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    const int e = errno;
    DTRAIN_FAIL(Errc::io, "cannot open data file '" << path << "': " << std::strerror(e));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    DTRAIN_FAIL(Errc::io, "data file '" << path << "' is not a readable regular file");
  }
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags == -1 || ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) == -1) {
    const int e = errno;
    ::close(fd);
    DTRAIN_FAIL(Errc::io, "data file '" << path << "': " << std::strerror(e));
  }
  *bytes = static_cast<std::size_t>(st.st_size);
  *identity = {static_cast<std::uint64_t>(st.st_dev), static_cast<std::uint64_t>(st.st_ino)};
  if (*bytes == 0) {
    ::close(fd);
    DTRAIN_FAIL(Errc::io, "data file '" << path << "' is empty");
  }
  return fd;
}

}  // namespace

void reserve_descriptors(std::size_t files) {
  constexpr rlim_t kSpare = 256;  // MPI, HDF5, the metrics file, a GPU's driver
  struct rlimit lim {};
  if (::getrlimit(RLIMIT_NOFILE, &lim) != 0 || lim.rlim_cur == RLIM_INFINITY) return;
  const rlim_t need = static_cast<rlim_t>(files) + kSpare;
  if (need <= lim.rlim_cur) return;
  if (lim.rlim_max == RLIM_INFINITY || need <= lim.rlim_max) {
    lim.rlim_cur = need;
    if (::setrlimit(RLIMIT_NOFILE, &lim) == 0) return;
  }
  DTRAIN_FAIL(Errc::invalid_config,
              files << " data files need " << need << " open files (one a file, " << kSpare
                    << " to spare), more than this process may open (soft limit " << lim.rlim_cur
                    << ", hard limit " << lim.rlim_max
                    << "): raise `ulimit -n`, or use fewer, larger files");
}

TokenArray::TokenArray(const std::string& path) : path_(path) {
  fd_ = open_regular_file(path, &file_bytes_, &identity_);
  try {
    if (ends_with(path, ".bin")) {
      open_shard();
    } else {
      count_ = file_bytes_;
      vocab_ = 256;
    }
  } catch (...) {
    ::close(fd_);
    throw;
  }
}

TokenArray::~TokenArray() { ::close(fd_); }

void TokenArray::read_bytes(std::size_t offset, std::size_t bytes, void* out) const {
  const ssize_t got = pread_all(fd_, out, bytes, offset);
  const int e = errno;
  DTRAIN_CHECK(got == static_cast<ssize_t>(bytes), Errc::io,
               "reading data file '" << path_ << "' at byte " << offset + (got < 0 ? 0 : got) << ": "
                   << (got >= 0 ? "the file is shorter than the " + std::to_string(file_bytes_) +
                                      " bytes it had when the run opened it (was it changed "
                                      "during the run?)"
                                : std::string(std::strerror(e))));
}

void TokenArray::read_tokens(std::size_t start, std::size_t n, void* out) const {
  read_bytes(data_offset_ + start * token_bytes_, n * token_bytes_, out);
}

void TokenArray::open_shard() {
  DTRAIN_CHECK(file_bytes_ >= kShardHeaderBytes, Errc::corrupt_data,
               "token shard '" << path_ << "' is shorter than its 1024-byte header");
  std::int32_t header[256];
  read_bytes(0, kShardHeaderBytes, header);
  DTRAIN_CHECK(header[0] == kShardMagic, Errc::corrupt_data,
               "token shard '" << path_ << "' has wrong magic " << header[0] << " (expected "
                               << kShardMagic << "; headerless uint16 files, as nanoGPT's "
                                  "prepare.py writes, need llm.c's header)");
  DTRAIN_CHECK(header[1] == kShardVersion, Errc::corrupt_data,
               "token shard '" << path_ << "' has unsupported version " << header[1]);
  DTRAIN_CHECK(header[2] > 0, Errc::corrupt_data, "token shard '" << path_ << "' holds no tokens");
  count_ = static_cast<std::size_t>(header[2]);
  DTRAIN_CHECK(file_bytes_ >= kShardHeaderBytes + count_ * 2, Errc::corrupt_data,
               "token shard '" << path_ << "' is truncated: header says " << count_
                               << " tokens, file holds " << (file_bytes_ - kShardHeaderBytes) / 2);
  // As llm.c's loader: bytes beyond the counted tokens mean a damaged header or a file
  // written by something else, whose tokens would silently go unused.
  DTRAIN_CHECK(file_bytes_ == kShardHeaderBytes + count_ * 2, Errc::corrupt_data,
               "token shard '" << path_ << "' has " << file_bytes_ - kShardHeaderBytes - count_ * 2
                               << " bytes after the " << count_
                               << " tokens its header counts: a damaged header or not a token shard");
  data_offset_ = kShardHeaderBytes;
  token_bytes_ = 2;
}

int TokenArray::vocab_needed() const {
  if (vocab_ != 0) return vocab_;
  constexpr std::size_t kChunk = std::size_t{1} << 19;  // tokens a read (1 MiB)
  std::vector<std::uint16_t> chunk(std::min(kChunk, count_));
  std::uint16_t largest = 0;
  for (std::size_t at = 0; at < count_; at += chunk.size()) {
    const std::size_t n = std::min(chunk.size(), count_ - at);
    read_tokens(at, n, chunk.data());
    largest = std::max(largest, *std::max_element(chunk.begin(), chunk.begin() + static_cast<std::ptrdiff_t>(n)));
  }
  vocab_ = 1 + largest;
  return vocab_;
}

// The file's bytes land at the front of out and are widened in place from the last token
// down: token t's bytes lie at or before out[t], so none is overwritten before it is read.
// No buffer of its own, so concurrent calls are safe.
void TokenArray::copy(std::size_t start, int length, std::int32_t* out) const {
  const auto n = static_cast<std::size_t>(length);
  read_tokens(start, n, out);
  const auto* bytes = reinterpret_cast<const unsigned char*>(out);
  for (std::size_t t = n; t-- > 0;) {
    if (token_bytes_ == 2) {
      std::uint16_t t16;
      std::memcpy(&t16, bytes + 2 * t, 2);
      out[t] = t16;
    } else {
      out[t] = bytes[t];
    }
  }
}

std::uint64_t TokenArray::fingerprint() const {
  constexpr std::size_t kRuns = 64, kRunTokens = 64;
  std::uint64_t h = kFnvOffset;  // FNV-1a a token (not a byte) at a time; checkpoints keep it
  const std::size_t run = std::min(kRunTokens, count_);
  std::int32_t tokens[kRunTokens];
  for (std::size_t r = 0; r < kRuns; ++r) {
    copy((count_ - run) * r / (kRuns - 1), static_cast<int>(run), tokens);
    for (std::size_t t = 0; t < run; ++t) {
      h ^= static_cast<std::uint64_t>(tokens[t]);
      h *= kFnvPrime;
    }
  }
  return h;
}

}  // namespace dtrain::train
