// dtrain-data encode: text files to llm.c token shards with GPT-2's tokenizer, shared over the
// ranks of the job. The inputs' bytes, one stream, are cut into one share a rank where the
// tokens do not change (gpt2_can_cut); each rank encodes its share and writes its tokens at
// their place in the shards, which appear under their names only once every rank has written.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <regex>
#include <string>
#include <string_view>
#include <vector>

#include "commands.hpp"
#include "dtrain/comm/agreed_failure.hpp"
#include "dtrain/core/env.hpp"
#include "dtrain/core/error.hpp"
#include "dtrain/train/data.hpp"
#include "dtrain/train/tokenizer.hpp"
#include "shard_format.hpp"

namespace dtrain_data {
namespace {

namespace fs = std::filesystem;
using dtrain::Errc;

// Read and encoded at a time (DTRAIN_DATA_BLOCK_BYTES: the tests make it small).
std::size_t block_bytes() {
  static const std::size_t bytes = static_cast<std::size_t>(dtrain::env::get_int("DTRAIN_DATA_BLOCK_BYTES", 8L << 20, 16, 1L << 30));
  return bytes;
}
constexpr std::size_t kScanBytes = std::size_t{1} << 20;   // read at a time to find a share's start

struct Input {
  std::string path;
  int fd = -1;
  std::int64_t size = 0;
  std::int64_t begin = 0;  // its first byte's place in the stream of all inputs
};

// The input files, open for the command's run.
struct Inputs {
  std::vector<Input> files;
  std::int64_t bytes = 0;
  explicit Inputs(const std::vector<std::string>& specs) {
    for (const std::string& spec : specs) {
      for (const std::string& path : dtrain::train::expand_data_files(spec)) {
        Input in{path};
        in.fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
        DTRAIN_CHECK(in.fd >= 0, Errc::io, "cannot open '" << path << "': " << std::strerror(errno));
        files.push_back(in);
        struct stat st {};
        DTRAIN_CHECK(::fstat(in.fd, &st) == 0 && S_ISREG(st.st_mode), Errc::io, "'" << path << "' is not a readable regular file");
        files.back().size = st.st_size;
        files.back().begin = bytes;
        bytes += st.st_size;
      }
    }
  }
  ~Inputs() {
    for (const Input& in : files) ::close(in.fd);
  }
  Inputs(const Inputs&) = delete;
  Inputs& operator=(const Inputs&) = delete;
};

// Appends bytes [at, at + n) of the file to text.
void read_at(const Input& in, std::int64_t at, std::size_t n, std::string& text) {
  const std::size_t old = text.size();
  text.resize(old + n);
  for (std::size_t done = 0; done < n;) {
    const ssize_t got = ::pread(in.fd, &text[old + done], n - done, static_cast<off_t>(at + done));
    if (got < 0 && errno == EINTR) continue;
    DTRAIN_CHECK(got > 0, Errc::io, "reading '" << in.path << "' at byte " << at + done << ": "
                                                << (got == 0 ? "the file is shorter than it was" : std::strerror(errno)));
    done += static_cast<std::size_t>(got);
  }
}

// The first place at or after `from` in the stream where a share may begin: a file's start,
// or a cut inside a file. The stream's end where there is none.
std::int64_t share_begin(const Inputs& inputs, std::int64_t from) {
  for (const Input& in : inputs.files) {
    if (from >= in.begin + in.size) continue;
    if (from <= in.begin) return in.begin;
    std::string window;
    for (std::int64_t w = std::max<std::int64_t>(0, from - in.begin - 2); w < in.size;) {
      window.clear();
      read_at(in, w, static_cast<std::size_t>(std::min<std::int64_t>(kScanBytes, in.size - w)), window);
      for (std::size_t p = 2; p < window.size(); ++p) {
        if (w + static_cast<std::int64_t>(p) >= from - in.begin && dtrain::train::gpt2_can_cut(window, p)) {
          return in.begin + w + static_cast<std::int64_t>(p);
        }
      }
      if (w + static_cast<std::int64_t>(window.size()) >= in.size) break;
      w += static_cast<std::int64_t>(window.size()) - 2;  // a cut needs the two bytes before it
    }
    from = in.begin + in.size;  // none in this file: the next file's start
  }
  return inputs.bytes;
}

// The last cut in text, 0 where there is none.
std::size_t last_cut(std::string_view text) {
  for (std::size_t p = text.size(); p-- > 2;) {
    if (dtrain::train::gpt2_can_cut(text, p)) return p;
  }
  return 0;
}

// Tokens of the stream's bytes [begin, end), with eot (unless -1) before each file's first.
std::vector<std::uint16_t> encode_share(const Inputs& inputs, std::int64_t begin, std::int64_t end,
                                        const dtrain::train::Tokenizer& tokenizer, std::int32_t eot) {
  std::vector<std::uint16_t> tokens;
  std::vector<std::int32_t> ids;
  std::string text;
  for (const Input& in : inputs.files) {
    const std::int64_t first = std::max(begin, in.begin) - in.begin, last = std::min(end, in.begin + in.size) - in.begin;
    if (first >= last) continue;
    if (first == 0 && eot >= 0) tokens.push_back(static_cast<std::uint16_t>(eot));
    text.clear();
    for (std::int64_t at = first; at < last;) {
      const std::size_t n = static_cast<std::size_t>(std::min<std::int64_t>(static_cast<std::int64_t>(block_bytes()), last - at));
      read_at(in, at, n, text);
      at += static_cast<std::int64_t>(n);
      const std::size_t cut = at < last ? last_cut(text) : text.size();
      if (cut == 0) continue;  // no cut yet: read on
      ids.clear();
      tokenizer.encode(std::string_view(text).substr(0, cut), ids);
      tokens.insert(tokens.end(), ids.begin(), ids.end());  // ids < 65536: checked up front
      text.erase(0, cut);
    }
  }
  return tokens;
}

// The shards' names: output itself, or with --shard-tokens output's stem and _000000, ... .
std::string shard_name(const std::string& output, bool sharded, std::int64_t k) {
  if (!sharded) return output;
  char index[16];
  std::snprintf(index, sizeof index, "_%06lld", static_cast<long long>(k));
  return output.substr(0, output.size() - 4) + index + ".bin";
}

// Refuses an output that is there already (all of a sharded output's names) or has no
// directory to go in: encode never overwrites.
void check_output_free(const EncodeOptions& options) {
  const fs::path out(options.output);
  const fs::path dir = out.parent_path().empty() ? fs::path(".") : out.parent_path();
  DTRAIN_CHECK(fs::is_directory(dir), Errc::io, "--output '" << options.output << "': no directory '" << dir.string() << "'");
  if (options.shard_tokens == 0) {
    DTRAIN_CHECK(!fs::exists(out), Errc::invalid_argument,
                 "--output '" << options.output << "' exists; dtrain-data does not overwrite: remove it or name another");
    return;
  }
  const std::string stem = out.filename().string().substr(0, out.filename().string().size() - 4);
  const std::regex shard(std::regex_replace(stem, std::regex(R"([.^$|()\[\]{}*+?\\])"), R"(\$&)") + R"(_[0-9]{6}\.bin)");
  for (const fs::directory_entry& e : fs::directory_iterator(dir)) {
    DTRAIN_CHECK(!std::regex_match(e.path().filename().string(), shard), Errc::invalid_argument,
                 "--output '" << options.output << "': a shard of that name exists ('" << e.path().string()
                              << "'); dtrain-data does not overwrite: remove its shards or name another output");
  }
}

void write_all_at(int fd, const void* data, std::size_t n, std::int64_t at, const std::string& path) {
  const char* p = static_cast<const char*>(data);
  for (std::size_t done = 0; done < n;) {
    const ssize_t put = ::pwrite(fd, p + done, n - done, static_cast<off_t>(at + done));
    if (put < 0 && errno == EINTR) continue;
    DTRAIN_CHECK(put > 0, Errc::io, "writing '" << path << "': " << std::strerror(errno));
    done += static_cast<std::size_t>(put);
  }
}

// Writes tokens [from, from + n) of shard file path at their place, then flushes it.
void write_tokens(const std::string& path, const std::uint16_t* tokens, std::int64_t n, std::int64_t from) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  DTRAIN_CHECK(fd >= 0, Errc::io, "cannot open '" << path << "' to write: " << std::strerror(errno));
  try {
    write_all_at(fd, tokens, static_cast<std::size_t>(n) * 2, static_cast<std::int64_t>(kShardHeaderBytes) + 2 * from, path);
    DTRAIN_CHECK(::fsync(fd) == 0, Errc::io, "flushing '" << path << "': " << std::strerror(errno));
  } catch (...) {
    ::close(fd);
    throw;
  }
  ::close(fd);
}

// Creates shard file path holding a header for `count` tokens and room for them.
void create_shard(const std::string& path, std::int64_t count) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  DTRAIN_CHECK(fd >= 0, Errc::io, "cannot create '" << path << "': " << std::strerror(errno));
  std::int32_t header[256] = {kShardMagic, kShardVersion, static_cast<std::int32_t>(count)};
  try {
    write_all_at(fd, header, sizeof header, 0, path);
    DTRAIN_CHECK(::ftruncate(fd, static_cast<off_t>(kShardHeaderBytes + 2 * count)) == 0, Errc::io,
                 "cannot size '" << path << "' for its " << count << " tokens: " << std::strerror(errno));
  } catch (...) {
    ::close(fd);
    throw;
  }
  ::close(fd);
}

// Runs `step` on this rank and agrees over world: every rank returns, or every rank throws
// the first failure.
template <class Step>
void agreed(dtrain::Communicator& world, Step&& step) {
  dtrain::LocalFailure failure;
  try {
    step();
  } catch (const std::exception& e) {
    failure.record(e);
  }
  failure.agree(world, "dtrain-data encode");
}

}  // namespace

int encode(const EncodeOptions& options, dtrain::Communicator& world) {
  using dtrain::DType;
  using dtrain::ReduceOp;
  const bool sharded = options.shard_tokens > 0;
  std::unique_ptr<dtrain::train::Tokenizer> tokenizer;
  std::unique_ptr<Inputs> inputs;
  std::int32_t eot = -1;
  agreed(world, [&] {
    tokenizer = std::make_unique<dtrain::train::Tokenizer>(options.tokenizer);
    DTRAIN_CHECK(tokenizer->encodes(), Errc::invalid_argument,
                 "--tokenizer " << tokenizer->describe() << " cannot encode: it needs merges.txt beside vocab.json");
    DTRAIN_CHECK(tokenizer->size() <= kMaxShardVocab, Errc::invalid_argument,
                 "--tokenizer " << tokenizer->describe() << ": shards hold 16-bit tokens, at most " << kMaxShardVocab);
    if (options.eot) {
      eot = tokenizer->id("<|endoftext|>");
      DTRAIN_CHECK(eot >= 0, Errc::invalid_argument,
                   "--tokenizer " << tokenizer->describe() << " has no <|endoftext|> to put before each file: pass --no-eot");
    }
    inputs = std::make_unique<Inputs>(options.inputs);
    if (world.rank() == 0) check_output_free(options);
  });
  // Every rank must see the same inputs (a job over nodes reads its own copies).
  std::int64_t seen[2] = {static_cast<std::int64_t>(inputs->files.size()), inputs->bytes};
  std::int64_t lowest[2], highest[2];
  world.all_reduce(seen, lowest, 2, DType::i64, ReduceOp::min);
  world.all_reduce(seen, highest, 2, DType::i64, ReduceOp::max);
  DTRAIN_CHECK(lowest[0] == highest[0] && lowest[1] == highest[1], Errc::io,
               "the ranks see different inputs: " << lowest[0] << " to " << highest[0] << " files of "
                                                  << lowest[1] << " to " << highest[1] << " bytes");

  // This rank's share: from its place in the stream, moved on to where a share may begin.
  const auto started = std::chrono::steady_clock::now();
  const int ranks = world.size();
  std::int64_t begin = 0;
  std::vector<std::int64_t> begins(static_cast<std::size_t>(ranks));
  agreed(world, [&] {
    const double place = static_cast<double>(inputs->bytes) * world.rank() / ranks;
    begin = world.rank() == 0 ? 0 : share_begin(*inputs, static_cast<std::int64_t>(place));
  });
  world.all_gather(&begin, begins.data(), 1, DType::i64);
  const std::int64_t end = world.rank() + 1 < ranks ? begins[static_cast<std::size_t>(world.rank()) + 1] : inputs->bytes;
  std::vector<std::uint16_t> tokens;
  agreed(world, [&] { tokens = encode_share(*inputs, begin, end, *tokenizer, eot); });
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  world.all_reduce(&seconds, &seconds, 1, DType::f64, ReduceOp::max);

  // Where this rank's tokens go: the shards of --shard-tokens tokens each (the last holds
  // the rest), or one file.
  std::int64_t count = static_cast<std::int64_t>(tokens.size());
  std::vector<std::int64_t> counts(static_cast<std::size_t>(ranks));
  world.all_gather(&count, counts.data(), 1, DType::i64);
  std::int64_t offset = 0, total = 0;
  for (int r = 0; r < ranks; ++r) {
    if (r < world.rank()) offset += counts[static_cast<std::size_t>(r)];
    total += counts[static_cast<std::size_t>(r)];
  }
  DTRAIN_CHECK(total > 0, Errc::invalid_argument, "the inputs hold no text (" << inputs->files.size() << " empty files)");
  DTRAIN_CHECK(sharded || total <= kMaxShardTokens, Errc::invalid_argument,
               "the inputs' " << total << " tokens do not fit one file, which holds at most " << kMaxShardTokens
                              << ": pass --shard-tokens (llm.c's FineWeb shards hold 100000000)");
  const std::int64_t per_shard = sharded ? options.shard_tokens : total;
  const std::int64_t shards = (total + per_shard - 1) / per_shard;
  const auto partial = [&](std::int64_t k) { return shard_name(options.output, sharded, k) + ".partial"; };
  try {
    agreed(world, [&] {
      if (world.rank() != 0) return;
      for (std::int64_t k = 0; k < shards; ++k) create_shard(partial(k), std::min(per_shard, total - k * per_shard));
    });
    agreed(world, [&] {
      for (std::int64_t k = offset / per_shard; k < shards && k * per_shard < offset + count; ++k) {
        const std::int64_t from = std::max(offset, k * per_shard), to = std::min(offset + count, (k + 1) * per_shard);
        write_tokens(partial(k), tokens.data() + (from - offset), to - from, from - k * per_shard);
      }
    });
    agreed(world, [&] {
      if (world.rank() != 0) return;
      for (std::int64_t k = 0; k < shards; ++k) fs::rename(partial(k), shard_name(options.output, sharded, k));
    });
  } catch (...) {
    if (world.rank() == 0) {
      std::error_code ignored;
      for (std::int64_t k = 0; k < shards; ++k) fs::remove(partial(k), ignored);
    }
    throw;
  }
  if (world.rank() == 0) {
    std::printf("dtrain-data encode: %zu files, %lld bytes -> %lld tokens (%.2f bytes a token) in %lld shard%s: %s%s\n",
                inputs->files.size(), static_cast<long long>(inputs->bytes), static_cast<long long>(total),
                static_cast<double>(inputs->bytes) / static_cast<double>(total), static_cast<long long>(shards),
                shards == 1 ? "" : "s", shard_name(options.output, sharded, 0).c_str(),
                shards == 1 ? "" : (" to " + shard_name(options.output, sharded, shards - 1)).c_str());
    std::printf("encoded in %.3f s on %d rank%s: %.2f MB/s\n", seconds, ranks, ranks == 1 ? "" : "s",
                static_cast<double>(inputs->bytes) / 1e6 / std::max(seconds, 1e-9));
  }
  return 0;
}

}  // namespace dtrain_data
