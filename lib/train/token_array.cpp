#include "token_array.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "dtrain/core/error.hpp"

namespace dtrain::train {
namespace {

constexpr std::int32_t kShardMagic = 20240520;
constexpr std::int32_t kShardVersion = 1;
constexpr std::size_t kShardHeaderBytes = 256 * sizeof(std::int32_t);

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Maps the whole file read-only. The descriptor is closed at once (the mapping outlives it),
// so a run over many shards holds no descriptor per shard.
void* map_file(const std::string& path, std::size_t* bytes) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  DTRAIN_CHECK(fd >= 0, Errc::io, "cannot open data file '" << path << "': " << std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    DTRAIN_FAIL(Errc::io, "data file '" << path << "' is not a readable regular file");
  }
  *bytes = static_cast<std::size_t>(st.st_size);
  if (*bytes == 0) {
    ::close(fd);
    DTRAIN_FAIL(Errc::io, "data file '" << path << "' is empty");
  }
  void* map = ::mmap(nullptr, *bytes, PROT_READ, MAP_PRIVATE, fd, 0);
  const int map_errno = errno;
  ::close(fd);
  DTRAIN_CHECK(map != MAP_FAILED, Errc::io,
               "cannot map data file '" << path << "': " << std::strerror(map_errno));
  return map;
}

}  // namespace

TokenArray::TokenArray(const std::string& path) : path_(path) {
  map_ = map_file(path, &map_bytes_);
  try {
    if (ends_with(path, ".bin")) {
      open_shard();
    } else {
      tokens8_ = static_cast<const unsigned char*>(map_);
      count_ = map_bytes_;
      vocab_ = 256;
    }
  } catch (...) {
    ::munmap(map_, map_bytes_);
    throw;
  }
}

TokenArray::~TokenArray() { ::munmap(map_, map_bytes_); }

void TokenArray::open_shard() {
  DTRAIN_CHECK(map_bytes_ >= kShardHeaderBytes, Errc::corrupt_data,
               "token shard '" << path_ << "' is shorter than its 1024-byte header");
  std::int32_t header[256];
  std::memcpy(header, map_, kShardHeaderBytes);
  DTRAIN_CHECK(header[0] == kShardMagic, Errc::corrupt_data,
               "token shard '" << path_ << "' has wrong magic " << header[0] << " (expected "
                               << kShardMagic << ")");
  DTRAIN_CHECK(header[1] == kShardVersion, Errc::corrupt_data,
               "token shard '" << path_ << "' has unsupported version " << header[1]);
  DTRAIN_CHECK(header[2] > 0, Errc::corrupt_data, "token shard '" << path_ << "' holds no tokens");
  count_ = static_cast<std::size_t>(header[2]);
  DTRAIN_CHECK(map_bytes_ >= kShardHeaderBytes + count_ * 2, Errc::corrupt_data,
               "token shard '" << path_ << "' is truncated: header says " << count_
                               << " tokens, file holds " << (map_bytes_ - kShardHeaderBytes) / 2);
  // As llm.c's loader: bytes beyond the counted tokens mean a damaged header or a file
  // written by something else, whose tokens would silently go unused.
  DTRAIN_CHECK(map_bytes_ == kShardHeaderBytes + count_ * 2, Errc::corrupt_data,
               "token shard '" << path_ << "' has " << map_bytes_ - kShardHeaderBytes - count_ * 2
                               << " bytes after the " << count_
                               << " tokens its header counts: a damaged header or not a token shard");
  tokens16_ = reinterpret_cast<const std::uint16_t*>(static_cast<const char*>(map_) + kShardHeaderBytes);
}

int TokenArray::vocab_needed() const {
  if (vocab_ == 0) vocab_ = 1 + *std::max_element(tokens16_, tokens16_ + count_);
  return vocab_;
}

void TokenArray::copy(std::size_t start, int length, std::int32_t* out) const {
  if (tokens16_) {
    for (int t = 0; t < length; ++t) out[t] = tokens16_[start + t];
  } else {
    for (int t = 0; t < length; ++t) out[t] = tokens8_[start + t];
  }
}

std::uint64_t TokenArray::fingerprint() const {
  constexpr std::size_t kRuns = 64, kRunTokens = 64;
  std::uint64_t h = 14695981039346656037ULL;  // FNV-1a over the tokens' values
  const std::size_t run = std::min(kRunTokens, count_);
  for (std::size_t r = 0; r < kRuns; ++r) {
    const std::size_t start = (count_ - run) * r / (kRuns - 1);
    for (std::size_t t = start; t < start + run; ++t) {
      h ^= tokens16_ ? tokens16_[t] : tokens8_[t];
      h *= 1099511628211ULL;
    }
  }
  return h;
}

}  // namespace dtrain::train
