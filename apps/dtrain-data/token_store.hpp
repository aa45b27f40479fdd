#pragma once
// One rank's tokens, in order, in bounded memory: the first ones in memory, the rest in a
// spill file, so a share of any size can wait for its place in the shards (which is known
// only once every rank has counted its tokens).
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace dtrain_data {

class TokenStore {
 public:
  // Keeps up to memory_tokens tokens in memory; the rest go to a file made in spill_dir,
  // which is unlinked at once (nothing is left behind, even by a killed job).
  TokenStore(std::string spill_dir, std::size_t memory_tokens);
  ~TokenStore();
  TokenStore(const TokenStore&) = delete;
  TokenStore& operator=(const TokenStore&) = delete;

  void append(const std::int32_t* ids, std::size_t n);  // ids < 65536: the caller's check
  void finish();  // flushes what waits to be spilled; before the reads
  std::int64_t size() const { return count_; }

  // Hands tokens [from, from + n) to `take` in order, in pieces (pointer, count).
  void read(std::int64_t from, std::int64_t n, const std::function<void(const std::uint16_t*, std::size_t)>& take) const;

 private:
  void spill(const std::uint16_t* tokens, std::size_t n);

  std::string spill_dir_;
  std::size_t memory_tokens_;
  std::size_t staging_tokens_;
  std::vector<std::uint16_t> memory_;
  mutable std::vector<std::uint16_t> staging_;  // tokens on their way to or from the file
  std::int64_t count_ = 0;
  std::int64_t spilled_ = 0;  // tokens in the file
  int spill_fd_ = -1;
};

}  // namespace dtrain_data
