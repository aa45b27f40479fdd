// dtrain-data encode: text files to llm.c token shards with GPT-2's tokenizer, shared over the
// ranks of the job. The inputs' bytes, one stream, are cut into one share a rank where the
// tokens do not change (gpt2_can_cut); each rank encodes its share and writes its tokens at
// their place in the shards, which appear under their names only once every rank has written.
#include <fcntl.h>
#include <stdio.h>  // renameat2
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <regex>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "commands.hpp"
#include "dtrain/comm/agreed_failure.hpp"
#include "dtrain/core/env.hpp"
#include "dtrain/core/error.hpp"
#include "dtrain/core/hash.hpp"
#include "dtrain/train/data.hpp"
#include "dtrain/train/same_settings.hpp"
#include "dtrain/train/tokenizer.hpp"
#include "shard_format.hpp"
#include "token_store.hpp"

namespace dtrain_data {
namespace {

namespace fs = std::filesystem;
using dtrain::Errc;

// Read and encoded at a time (DTRAIN_DATA_BLOCK_BYTES: the tests make it small).
std::size_t block_bytes() {
  static const std::size_t bytes = static_cast<std::size_t>(dtrain::env::get_int("DTRAIN_DATA_BLOCK_BYTES", 8L << 20, 16, 1L << 30));
  return bytes;
}
// Tokens a rank keeps in memory before it spills the rest to a file beside the output
// (DTRAIN_DATA_MEMORY_BYTES, 2 bytes a token).
std::size_t memory_tokens() {
  return static_cast<std::size_t>(dtrain::env::get_int("DTRAIN_DATA_MEMORY_BYTES", 1L << 30, 2, 1L << 40)) / 2;
}
constexpr std::size_t kScanBytes = std::size_t{1} << 20;  // read at a time to find a share's start
// A cut's test reads at most 5 bytes before it and 5 after it; windows that overlap by more
// see every cut.
constexpr std::size_t kCutContext = 16;
constexpr std::int64_t kMaxShards = 1000000;  // numbered _000000 to _999999

struct Input {
  std::string path;
  std::int64_t size = 0;
  std::int64_t begin = 0;  // its first byte's place in the stream of all inputs
};

// The input files (opened one at a time when read: a corpus may have more files than a
// process may hold open).
struct Inputs {
  std::vector<Input> files;
  std::int64_t bytes = 0;
  explicit Inputs(const std::vector<std::string>& specs) {
    for (const std::string& spec : specs) {
      for (const std::string& path : dtrain::train::expand_data_files(spec)) {
        struct stat st {};
        DTRAIN_CHECK(::stat(path.c_str(), &st) == 0, Errc::io, "cannot open '" << path << "': " << std::strerror(errno));
        DTRAIN_CHECK(S_ISREG(st.st_mode), Errc::io, "'" << path << "' is not a readable regular file");
        files.push_back({path, st.st_size, bytes});
        bytes += st.st_size;
      }
    }
  }
  // Paths and sizes, in order, which the ranks compare.
  std::uint64_t fingerprint() const {
    std::uint64_t h = dtrain::kFnvOffset;
    for (const Input& in : files) {
      h = dtrain::fnv1a(in.path.data(), in.path.size() + 1, h);
      h = dtrain::fnv1a(&in.size, sizeof in.size, h);
    }
    return h;
  }
};

// An input file open for reading, closed when it goes.
class OpenInput {
 public:
  explicit OpenInput(const Input& in) : in_(in), fd_(::open(in.path.c_str(), O_RDONLY | O_CLOEXEC)) {
    DTRAIN_CHECK(fd_ >= 0, Errc::io, "cannot open '" << in.path << "': " << std::strerror(errno));
  }
  ~OpenInput() { ::close(fd_); }
  OpenInput(const OpenInput&) = delete;
  OpenInput& operator=(const OpenInput&) = delete;

  // Appends bytes [at, at + n) of the file to text.
  void read(std::int64_t at, std::size_t n, std::string& text) const {
    const std::size_t old = text.size();
    text.resize(old + n);
    for (std::size_t done = 0; done < n;) {
      const ssize_t got = ::pread(fd_, &text[old + done], n - done, static_cast<off_t>(at + done));
      if (got < 0 && errno == EINTR) continue;
      DTRAIN_CHECK(got > 0, Errc::io, "reading '" << in_.path << "' at byte " << at + done << ": "
                                                  << (got == 0 ? "the file is shorter than it was" : std::strerror(errno)));
      done += static_cast<std::size_t>(got);
    }
  }

 private:
  const Input& in_;
  int fd_;
};

// The first place at or after `from` in the stream where a share may begin: a file's start,
// or a cut inside a file. The stream's end where there is none. Every cut is seen (windows
// overlap by kCutContext), so a later `from` never gives an earlier place.
std::int64_t share_begin(const Inputs& inputs, std::int64_t from) {
  const std::size_t window_bytes = std::clamp<std::size_t>(block_bytes(), 4 * kCutContext, kScanBytes);
  for (const Input& in : inputs.files) {
    if (from >= in.begin + in.size) continue;
    if (from <= in.begin) return in.begin;
    const OpenInput file(in);
    std::string window;
    const std::int64_t first = from - in.begin;
    for (std::int64_t w = std::max<std::int64_t>(0, first - static_cast<std::int64_t>(kCutContext));;) {
      window.clear();
      file.read(w, static_cast<std::size_t>(std::min<std::int64_t>(static_cast<std::int64_t>(window_bytes), in.size - w)), window);
      const bool last = w + static_cast<std::int64_t>(window.size()) >= in.size;
      // The places whose context the window shows: not those near its start (the previous
      // window's) nor near its end (the next one's), unless the file starts or ends there.
      const std::int64_t lo = std::max<std::int64_t>(w == 0 ? 0 : static_cast<std::int64_t>(kCutContext), first - w);
      const std::size_t hi = last ? window.size() : window.size() - kCutContext;
      for (std::size_t p = static_cast<std::size_t>(lo); p < hi; ++p) {
        if (dtrain::train::gpt2_can_cut(window, p)) return in.begin + w + static_cast<std::int64_t>(p);
      }
      if (last) break;
      w += static_cast<std::int64_t>(hi - kCutContext);
    }
    from = in.begin + in.size;  // none in this file: the next file's start
  }
  return inputs.bytes;
}

// The last cut in text at or after `from`, 0 where there is none.
std::size_t last_cut(std::string_view text, std::size_t from) {
  for (std::size_t p = text.size(); p-- > std::max<std::size_t>(from, 2);) {
    if (dtrain::train::gpt2_can_cut(text, p)) return p;
  }
  return 0;
}

// Appends the tokens of the stream's bytes [begin, end) to tokens, with eot (unless -1)
// before each file's first.
void encode_share(const Inputs& inputs, std::int64_t begin, std::int64_t end, const dtrain::train::Tokenizer& tokenizer,
                  std::int32_t eot, TokenStore& tokens) {
  std::vector<std::int32_t> ids;
  std::string text;
  for (const Input& in : inputs.files) {
    const std::int64_t first = std::max(begin, in.begin) - in.begin, last = std::min(end, in.begin + in.size) - in.begin;
    if (first >= last) continue;
    if (first == 0 && eot >= 0) tokens.append(&eot, 1);
    const OpenInput file(in);
    text.clear();
    std::size_t searched = 0;  // text before it holds no cut (a file without any is held whole)
    for (std::int64_t at = first; at < last;) {
      const std::size_t n = static_cast<std::size_t>(std::min<std::int64_t>(static_cast<std::int64_t>(block_bytes()), last - at));
      file.read(at, n, text);
      at += static_cast<std::int64_t>(n);
      const std::size_t cut = at < last ? last_cut(text, searched) : text.size();
      searched = text.size() > kCutContext ? text.size() - kCutContext : 0;
      if (cut == 0) continue;  // no cut yet: read on
      ids.clear();
      tokenizer.encode(std::string_view(text).substr(0, cut), ids);
      tokens.append(ids.data(), ids.size());  // ids < 65536: checked up front
      text.erase(0, cut);
      searched = 0;
    }
  }
  tokens.finish();
}

// The shards' names: output itself, or with --shard-tokens output's stem and _000000, ... .
std::string shard_name(const std::string& output, bool sharded, std::int64_t k) {
  if (!sharded) return output;
  char index[16];
  std::snprintf(index, sizeof index, "_%06lld", static_cast<long long>(k));
  return output.substr(0, output.size() - 4) + index + ".bin";
}

fs::path output_directory(const std::string& output) {
  const fs::path dir = fs::path(output).parent_path();
  return dir.empty() ? fs::path(".") : dir;
}

// Refuses an output that is there already (all of a sharded output's names) or has no
// directory to go in: encode never overwrites.
void check_output_free(const EncodeOptions& options) {
  const fs::path out(options.output);
  const fs::path dir = output_directory(options.output);
  DTRAIN_CHECK(fs::is_directory(dir), Errc::io, "--output '" << options.output << "': no directory '" << dir.string() << "'");
  if (options.shard_tokens == 0) {
    DTRAIN_CHECK(!fs::exists(fs::symlink_status(out)), Errc::invalid_argument,  // a dangling link too
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

// A shard file open for writing; commit() flushes and closes it, reporting what the file
// system says.
class ShardFile {
 public:
  ShardFile(const std::string& path, int flags) : path_(path), fd_(::open(path.c_str(), flags | O_WRONLY | O_CLOEXEC, 0644)) {
    DTRAIN_CHECK(fd_ >= 0, Errc::io, "cannot open '" << path << "' to write: " << std::strerror(errno));
  }
  ~ShardFile() {
    if (fd_ >= 0) ::close(fd_);
  }
  ShardFile(const ShardFile&) = delete;
  ShardFile& operator=(const ShardFile&) = delete;

  void write_at(const void* data, std::size_t n, std::int64_t at) {
    const char* p = static_cast<const char*>(data);
    for (std::size_t done = 0; done < n;) {
      const ssize_t put = ::pwrite(fd_, p + done, n - done, static_cast<off_t>(at + done));
      if (put < 0 && errno == EINTR) continue;
      DTRAIN_CHECK(put > 0, Errc::io, "writing '" << path_ << "': " << std::strerror(errno));
      done += static_cast<std::size_t>(put);
    }
  }
  void resize(std::int64_t bytes) {
    DTRAIN_CHECK(::ftruncate(fd_, static_cast<off_t>(bytes)) == 0, Errc::io,
                 "cannot make '" << path_ << "' " << bytes << " bytes long: " << std::strerror(errno));
  }
  void commit() {
    DTRAIN_CHECK(::fsync(fd_) == 0, Errc::io, "flushing '" << path_ << "': " << std::strerror(errno));
    const int fd = fd_;
    fd_ = -1;
    DTRAIN_CHECK(::close(fd) == 0, Errc::io, "closing '" << path_ << "': " << std::strerror(errno));
  }

 private:
  std::string path_;
  int fd_;
};

// Creates shard file path holding a header for `count` tokens and room for them.
void create_shard(const std::string& path, std::int64_t count) {
  ShardFile file(path, O_CREAT | O_TRUNC);
  const std::int32_t header[256] = {kShardMagic, kShardVersion, static_cast<std::int32_t>(count)};
  file.write_at(header, sizeof header, 0);
  file.resize(static_cast<std::int64_t>(kShardHeaderBytes) + 2 * count);
  file.commit();
}

// Writes tokens [first, first + n) of the store into the shard file at path, from its token
// `at` on.
void write_tokens(const std::string& path, const TokenStore& tokens, std::int64_t first, std::int64_t n, std::int64_t at) {
  ShardFile file(path, 0);
  std::int64_t place = static_cast<std::int64_t>(kShardHeaderBytes) + 2 * at;
  tokens.read(first, n, [&](const std::uint16_t* piece, std::size_t count) {
    file.write_at(piece, 2 * count, place);
    place += static_cast<std::int64_t>(2 * count);
  });
  file.commit();
}

// Renames a written shard to its name, which must still be free: a file that appeared there
// while the run encoded (another run's) is not replaced.
void rename_new(const std::string& from, const std::string& to) {
  if (::renameat2(AT_FDCWD, from.c_str(), AT_FDCWD, to.c_str(), RENAME_NOREPLACE) == 0) return;
  const int error = errno;
  DTRAIN_CHECK(error != EEXIST, Errc::io, "'" << to << "' appeared while this run encoded; not replaced");
  DTRAIN_CHECK(error == EINVAL || error == ENOSYS, Errc::io,
               "cannot rename '" << from << "' to '" << to << "': " << std::strerror(error));
  // A file system without RENAME_NOREPLACE: the check and the rename are two steps.
  DTRAIN_CHECK(!fs::exists(fs::symlink_status(to)), Errc::io, "'" << to << "' appeared while this run encoded; not replaced");
  fs::rename(from, to);
}

// Makes the renames in a directory durable.
void sync_directory(const fs::path& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  DTRAIN_CHECK(fd >= 0, Errc::io, "cannot open the directory '" << dir.string() << "': " << std::strerror(errno));
  const bool synced = ::fsync(fd) == 0;
  const int error = errno;
  ::close(fd);
  DTRAIN_CHECK(synced, Errc::io, "flushing the directory '" << dir.string() << "': " << std::strerror(error));
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
  // The same options on every rank (a --no-eot on some ranks made shards with end-of-text
  // tokens before some files only); the inputs are compared below, as the ranks see them.
  std::ostringstream settings;
  settings << "tokenizer = " << options.tokenizer << "\noutput = " << options.output
           << "\nshard-tokens = " << options.shard_tokens << "\nno-eot = " << !options.eot << "\n";
  dtrain::train::agree_same_settings(settings.str(), world);
  agreed(world, [&] {
    block_bytes();  // a malformed setting fails before the tokenizer loads
    memory_tokens();
    tokenizer = std::make_unique<dtrain::train::Tokenizer>(options.tokenizer);
    DTRAIN_CHECK(tokenizer->encodes(), Errc::invalid_argument,
                 "--tokenizer " << tokenizer->describe() << " cannot encode: encoding needs GPT-2's vocab.json with a merges.txt that fits it");
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
  // Every rank must see the same inputs (a job over nodes may read its own copies): the same
  // paths in the same order, of the same sizes.
  std::int64_t seen[3] = {static_cast<std::int64_t>(inputs->files.size()), inputs->bytes,
                          static_cast<std::int64_t>(inputs->fingerprint())};
  std::int64_t lowest[3], highest[3];
  world.all_reduce(seen, lowest, 3, DType::i64, ReduceOp::min);
  world.all_reduce(seen, highest, 3, DType::i64, ReduceOp::max);
  DTRAIN_CHECK(std::equal(lowest, lowest + 3, highest), Errc::io,
               "the ranks see different inputs: " << lowest[0] << " to " << highest[0] << " files of " << lowest[1]
                                                  << " to " << highest[1] << " bytes, or other paths or sizes");

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
  const fs::path out_dir = output_directory(options.output);
  TokenStore tokens(out_dir.string(), memory_tokens());
  agreed(world, [&] { encode_share(*inputs, begin, end, *tokenizer, eot, tokens); });
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  world.all_reduce(&seconds, &seconds, 1, DType::f64, ReduceOp::max);

  // Where this rank's tokens go: the shards of --shard-tokens tokens each (the last holds
  // the rest), or one file.
  std::int64_t count = tokens.size();
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
  DTRAIN_CHECK(shards <= kMaxShards, Errc::invalid_argument,
               "--shard-tokens " << per_shard << " makes " << shards << " shards of the " << total
                                 << " tokens, more than the " << kMaxShards << " that six digits number");
  const auto partial = [&](std::int64_t k) { return shard_name(options.output, sharded, k) + ".partial"; };
  std::int64_t renamed = 0;  // shards under their names (on rank 0)
  try {
    agreed(world, [&] {
      if (world.rank() != 0) return;
      for (std::int64_t k = 0; k < shards; ++k) create_shard(partial(k), std::min(per_shard, total - k * per_shard));
    });
    agreed(world, [&] {
      for (std::int64_t k = offset / per_shard; k < shards && k * per_shard < offset + count; ++k) {
        const std::int64_t from = std::max(offset, k * per_shard), to = std::min(offset + count, (k + 1) * per_shard);
        write_tokens(partial(k), tokens, from - offset, to - from, from - k * per_shard);
      }
    });
    agreed(world, [&] {
      if (world.rank() != 0) return;
      for (; renamed < shards; ++renamed) rename_new(partial(renamed), shard_name(options.output, sharded, renamed));
      sync_directory(out_dir);
    });
  } catch (...) {
    if (world.rank() == 0) {  // none of the shards stays, under either name
      std::error_code ignored;
      for (std::int64_t k = 0; k < shards; ++k) fs::remove(k < renamed ? shard_name(options.output, sharded, k) : partial(k), ignored);
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
