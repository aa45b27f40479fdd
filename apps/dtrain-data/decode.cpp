// dtrain-data decode: a shard's tokens printed as text (the tokenizer's bytes) or as ids.
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "commands.hpp"
#include "dtrain/core/error.hpp"
#include "dtrain/train/tokenizer.hpp"
#include "shard_format.hpp"

namespace dtrain_data {

using dtrain::Errc;

int decode(const std::string& shard, const std::string& tokenizer_path, long long first, long long count) {
  std::unique_ptr<dtrain::train::Tokenizer> tokenizer;
  if (!tokenizer_path.empty()) tokenizer = std::make_unique<dtrain::train::Tokenizer>(tokenizer_path);
  std::error_code ec;
  const std::filesystem::file_status status = std::filesystem::status(shard, ec);
  DTRAIN_CHECK(!ec, Errc::io, "cannot open '" << shard << "': " << ec.message());
  DTRAIN_CHECK(!std::filesystem::is_directory(status), Errc::invalid_argument,
               "'" << shard << "' is a directory, not a token shard");
  // (A FIFO would be read until its writer closes it: waited on for ever.)
  DTRAIN_CHECK(std::filesystem::is_regular_file(status), Errc::invalid_argument,
               "'" << shard << "' is not a regular file (a FIFO, device or socket), not a token shard");
  errno = 0;
  std::ifstream in(shard, std::ios::binary | std::ios::ate);
  DTRAIN_CHECK(in, Errc::io, "cannot open '" << shard << "'" << (errno ? std::string(": ") + std::strerror(errno) : ""));
  const long long bytes = static_cast<long long>(in.tellg());
  std::int32_t header[256] = {};
  in.seekg(0);
  in.read(reinterpret_cast<char*>(header), sizeof header);
  // What is wrong, named: too short for the header, another file, another version.
  DTRAIN_CHECK(in, Errc::corrupt_data,
               "'" << shard << "' is not a token shard: " << bytes << " bytes, fewer than a shard's "
                   << kShardHeaderBytes << "-byte header");
  DTRAIN_CHECK(header[0] == kShardMagic, Errc::corrupt_data,
               "'" << shard << "' is not a token shard: it starts with " << header[0] << ", not the magic number "
                   << kShardMagic);
  DTRAIN_CHECK(header[1] == kShardVersion, Errc::corrupt_data,
               "'" << shard << "' is a token shard of version " << header[1] << ", which this dtrain-data does not read ("
                   << kShardVersion << ")");
  const long long tokens = header[2];
  DTRAIN_CHECK(tokens >= 0, Errc::corrupt_data,
               "'" << shard << "' is damaged: its header counts " << tokens << " tokens");
  DTRAIN_CHECK(bytes == static_cast<long long>(kShardHeaderBytes) + 2 * tokens, Errc::corrupt_data,
               "'" << shard << "' has " << bytes << " bytes where its header's " << tokens << " tokens need "
                   << kShardHeaderBytes + 2 * static_cast<std::size_t>(tokens));
  DTRAIN_CHECK(first >= 0 && first <= tokens, Errc::invalid_argument,
               "--first " << first << " is past the shard's " << tokens << " tokens");
  const long long n = count < 0 ? tokens - first : std::min(count, tokens - first);
  std::vector<std::uint16_t> ids(static_cast<std::size_t>(n));
  in.seekg(static_cast<std::streamoff>(kShardHeaderBytes + 2 * first));
  in.read(reinterpret_cast<char*>(ids.data()), static_cast<std::streamsize>(2 * n));
  DTRAIN_CHECK(in, Errc::io, "reading '" << shard << "' failed");
  std::string out;
  for (const std::uint16_t id : ids) {
    if (!tokenizer) {
      out += (out.empty() ? "" : " ") + std::to_string(id);
      continue;
    }
    const std::string& text = tokenizer->bytes(id);
    out += text.empty() ? "<|" + std::to_string(id) + "|>" : text;
  }
  if (!tokenizer) out += '\n';
  // A full disk loses the text: said, status 1.
  errno = 0;
  const bool written = std::fwrite(out.data(), 1, out.size(), stdout) == out.size() && std::fflush(stdout) == 0;
  DTRAIN_CHECK(written, Errc::io, "writing standard output failed" << (errno ? std::string(": ") + std::strerror(errno) : ""));
  return 0;
}

}  // namespace dtrain_data
