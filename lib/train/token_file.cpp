// Memory-mapped token files: llm.c / nanoGPT uint16 shards or plain text as bytes.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "dtrain/core/error.hpp"
#include "dtrain/core/rng.hpp"
#include "dtrain/train/data.hpp"

namespace dtrain::train {
namespace {

constexpr std::int32_t kShardMagic = 20240520;
constexpr std::int32_t kShardVersion = 1;
constexpr std::size_t kShardHeaderBytes = 256 * sizeof(std::int32_t);

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

class MappedFile {
 public:
  explicit MappedFile(const std::string& path) {
    fd_ = ::open(path.c_str(), O_RDONLY);
    DTRAIN_CHECK(fd_ >= 0, Errc::io, "cannot open data file '" << path << "': " << std::strerror(errno));
    struct stat st {};
    if (::fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode)) {
      ::close(fd_);
      DTRAIN_FAIL(Errc::io, "data file '" << path << "' is not a readable regular file");
    }
    size_ = static_cast<std::size_t>(st.st_size);
    if (size_ == 0) {
      ::close(fd_);
      DTRAIN_FAIL(Errc::io, "data file '" << path << "' is empty");
    }
    data_ = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd_, 0);
    if (data_ == MAP_FAILED) {
      ::close(fd_);
      DTRAIN_FAIL(Errc::io, "cannot map data file '" << path << "': " << std::strerror(errno));
    }
  }
  ~MappedFile() {
    ::munmap(data_, size_);
    ::close(fd_);
  }
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  const unsigned char* bytes() const { return static_cast<const unsigned char*>(data_); }
  std::size_t size() const { return size_; }

 private:
  int fd_ = -1;
  void* data_ = nullptr;
  std::size_t size_ = 0;
};

class TokenFile final : public TokenSource {
 public:
  TokenFile(const std::string& path, int seq_len, double val_fraction, std::uint64_t seed)
      : path_(path), file_(path), seed_(seed) {
    DTRAIN_CHECK(val_fraction >= 0 && val_fraction < 1, Errc::invalid_config,
                 "validation fraction must be in [0, 1), got " << val_fraction);
    if (ends_with(path, ".bin")) {
      open_shard();
    } else {
      tokens8_ = file_.bytes();
      count_ = file_.size();
      vocab_ = 256;
    }
    const std::size_t need = static_cast<std::size_t>(seq_len) + 1;
    const std::size_t val = static_cast<std::size_t>(static_cast<double>(count_) * val_fraction);
    train_count_ = count_ - val;
    DTRAIN_CHECK(train_count_ >= need, Errc::invalid_config,
                 "data file '" << path << "' has " << train_count_
                               << " training tokens, fewer than seq-len + 1 = " << need);
    DTRAIN_CHECK(val == 0 || val >= need, Errc::invalid_config,
                 "data file '" << path << "': the validation split (" << val
                               << " tokens) is shorter than seq-len + 1 = " << need);
  }

  void sample(Split split, std::uint64_t index, int length, std::int32_t* out) const override {
    std::size_t begin = 0, count = train_count_;
    if (split == Split::val && count_ > train_count_) {
      begin = train_count_;
      count = count_ - train_count_;
    }
    const std::size_t span = count - static_cast<std::size_t>(length) + 1;
    const std::uint64_t stream = rng::stream_id(split == Split::train ? "file.train" : "file.val");
    const auto block = rng::philox(seed_, stream, index);
    const std::uint64_t r = (static_cast<std::uint64_t>(block[1]) << 32) | block[0];
    const std::size_t start = begin + static_cast<std::size_t>(r % span);
    if (tokens16_) {
      for (int t = 0; t < length; ++t) out[t] = tokens16_[start + t];
    } else {
      for (int t = 0; t < length; ++t) out[t] = tokens8_[start + t];
    }
  }

  int vocab_needed() const override { return vocab_; }
  std::string describe() const override {
    return "'" + path_ + "' (" + std::to_string(count_) + " tokens, " +
           (tokens16_ ? "uint16 shard" : "text bytes") + ")";
  }

 private:
  void open_shard() {
    DTRAIN_CHECK(file_.size() >= kShardHeaderBytes, Errc::corrupt_data,
                 "token shard '" << path_ << "' is shorter than its 1024-byte header");
    std::int32_t header[256];
    std::memcpy(header, file_.bytes(), kShardHeaderBytes);
    DTRAIN_CHECK(header[0] == kShardMagic, Errc::corrupt_data,
                 "token shard '" << path_ << "' has wrong magic " << header[0] << " (expected "
                                 << kShardMagic << ")");
    DTRAIN_CHECK(header[1] == kShardVersion, Errc::corrupt_data,
                 "token shard '" << path_ << "' has unsupported version " << header[1]);
    DTRAIN_CHECK(header[2] > 0, Errc::corrupt_data, "token shard '" << path_ << "' holds no tokens");
    count_ = static_cast<std::size_t>(header[2]);
    DTRAIN_CHECK(file_.size() >= kShardHeaderBytes + count_ * 2, Errc::corrupt_data,
                 "token shard '" << path_ << "' is truncated: header says " << count_
                                 << " tokens, file holds " << (file_.size() - kShardHeaderBytes) / 2);
    tokens16_ = reinterpret_cast<const std::uint16_t*>(file_.bytes() + kShardHeaderBytes);
    vocab_ = 1 + *std::max_element(tokens16_, tokens16_ + count_);
  }

  std::string path_;
  MappedFile file_;
  std::uint64_t seed_;
  const unsigned char* tokens8_ = nullptr;
  const std::uint16_t* tokens16_ = nullptr;
  std::size_t count_ = 0;
  std::size_t train_count_ = 0;
  int vocab_ = 0;
};

}  // namespace

std::unique_ptr<TokenSource> open_token_file(const std::string& path, int seq_len,
                                             double val_fraction, std::uint64_t seed) {
  return std::make_unique<TokenFile>(path, seq_len, val_fraction, seed);
}

}  // namespace dtrain::train
