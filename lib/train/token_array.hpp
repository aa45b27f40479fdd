#pragma once
// One token file: an llm.c shard (a name ending in .bin) or plain text read as one byte per
// token. Opening checks the file and, for a shard, its header; errors throw Error with a
// message naming the file. Tokens are read with pread from the descriptor held open, so a
// file that shrinks during the run fails a read with a message rather than a SIGBUS (as a
// mapping would), and one renamed over it is not seen.
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

namespace dtrain::train {

// A run holds one descriptor per data file: raises this process's soft limit on open files
// so that `files` of them leave room for the rest (MPI, HDF5, ...), up to the hard limit;
// Errc::invalid_config naming both limits where even that is too few.
void reserve_descriptors(std::size_t files);

class TokenArray {
 public:
  explicit TokenArray(const std::string& path);
  ~TokenArray();
  TokenArray(const TokenArray&) = delete;
  TokenArray& operator=(const TokenArray&) = delete;

  const std::string& path() const { return path_; }
  std::size_t size() const { return count_; }
  bool is_shard() const { return token_bytes_ == 2; }
  // Largest token id + 1: a shard's, found by reading every token at the first call; 256
  // for text.
  int vocab_needed() const;
  // Writes tokens [start, start + length) to out.
  void copy(std::size_t start, int length, std::int32_t* out) const;
  // A hash of 64 runs of 64 tokens spread evenly over the file, the first and the last run
  // included (every token of a file of up to 4096): two copies whose sizes agree but whose
  // contents differ almost always differ here, for reading 64 pages.
  std::uint64_t fingerprint() const;
  // The file itself (device, inode): one file under two names has one identity.
  std::pair<std::uint64_t, std::uint64_t> identity() const { return identity_; }

 private:
  void open_shard();
  void read_bytes(std::size_t offset, std::size_t bytes, void* out) const;
  void read_tokens(std::size_t start, std::size_t n, void* out) const;

  std::string path_;
  int fd_ = -1;
  std::size_t file_bytes_ = 0;   // at opening
  std::size_t data_offset_ = 0;  // a shard's header
  std::size_t token_bytes_ = 1;  // 2 in a shard
  std::size_t count_ = 0;
  std::pair<std::uint64_t, std::uint64_t> identity_;
  mutable int vocab_ = 0;  // 0: not known yet
};

}  // namespace dtrain::train
