#pragma once
// dtrain-data's commands (docs/data.md). Each throws dtrain::Error for what it refuses.
#include <string>
#include <vector>

#include "dtrain/comm/communicator.hpp"

namespace dtrain_data {

struct EncodeOptions {
  std::string tokenizer, output;
  std::vector<std::string> inputs;   // paths and glob patterns, as dtrain-gpt's --data
  long long shard_tokens = 0;        // 0: one file
  bool eot = true;                   // <|endoftext|> before each input file
};

// Collective over world: every rank encodes a share of the inputs' bytes and writes its
// tokens into the shards. Returns the exit status.
int encode(const EncodeOptions& options, dtrain::Communicator& world);

// One process: prints a shard's tokens (as the tokenizer's bytes, or as ids without one).
int decode(const std::string& shard, const std::string& tokenizer, long long first, long long count);

}  // namespace dtrain_data
