#pragma once
// llm.c's token shard, which dtrain-gpt --data reads (docs/dtrain-gpt.md): 256 int32 of
// header (magic, version, token count), then the tokens as uint16, little-endian.
#include <cstddef>
#include <cstdint>

namespace dtrain_data {

constexpr std::int32_t kShardMagic = 20240520;
constexpr std::int32_t kShardVersion = 1;
constexpr std::size_t kShardHeaderBytes = 256 * sizeof(std::int32_t);
constexpr long long kMaxShardTokens = INT32_MAX;  // the header's count is an int32
constexpr int kMaxShardVocab = 65536;              // tokens are uint16

}  // namespace dtrain_data
