#pragma once
// One memory-mapped token file: an llm.c / nanoGPT uint16 shard (a name ending in .bin) or
// plain text read as one byte per token. Opening checks the file and, for a shard, its header;
// errors throw Error with a message naming the file.
#include <cstddef>
#include <cstdint>
#include <string>

namespace dtrain::train {

class TokenArray {
 public:
  explicit TokenArray(const std::string& path);
  ~TokenArray();
  TokenArray(const TokenArray&) = delete;
  TokenArray& operator=(const TokenArray&) = delete;

  const std::string& path() const { return path_; }
  std::size_t size() const { return count_; }
  bool is_shard() const { return tokens16_ != nullptr; }
  // Largest token id + 1: a shard's, found by reading every token at the first call; 256
  // for text.
  int vocab_needed() const;
  // Writes tokens [start, start + length) to out.
  void copy(std::size_t start, int length, std::int32_t* out) const;
  // A hash of 64 runs of 64 tokens spread evenly over the file, the first and the last run
  // included (every token of a file of up to 4096): two copies whose sizes agree but whose
  // contents differ almost always differ here, for reading 64 pages.
  std::uint64_t fingerprint() const;

 private:
  void open_shard();

  std::string path_;
  void* map_ = nullptr;
  std::size_t map_bytes_ = 0;
  const unsigned char* tokens8_ = nullptr;
  const std::uint16_t* tokens16_ = nullptr;
  std::size_t count_ = 0;
  mutable int vocab_ = 0;  // 0: not known yet
};

}  // namespace dtrain::train
