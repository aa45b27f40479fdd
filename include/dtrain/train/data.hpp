#pragma once
// Token sources and the rank-sharded batch loader.
//
// A TokenSource maps a global sample index to a sequence of tokens. Everything is a pure
// function of (seed, split, index), so the data order is deterministic, independent of how
// many ranks read it, and resumable from a sample counter alone.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "dtrain/export.hpp"

namespace dtrain::train {

enum class Split { train = 0, val = 1 };

class DTRAIN_API TokenSource {
 public:
  virtual ~TokenSource() = default;
  // Writes `length` tokens of sample `index` of `split` to out.
  virtual void sample(Split split, std::uint64_t index, int length, std::int32_t* out) const = 0;
  // Largest token id + 1 that the source can produce: the model's vocab must be >= this.
  virtual int vocab_needed() const = 0;
  // The same over share `part` of `parts` of the source (0 where a share holds nothing), so
  // that ranks can each read a share and take the maximum: reading a large set of token
  // files once on every rank costs start-up time. The default: all in share 0. (A source
  // that overrides only vocab_needed() hides this one: `using TokenSource::vocab_needed;`.)
  virtual int vocab_needed(int part, int /*parts*/) const { return part == 0 ? vocab_needed() : 0; }
  // The vocabulary the ranks agreed on (every token file was read once then, each by one
  // rank): a source of files checks each sample against it, so that a token another copy of
  // a file holds (a node's own, changed or damaged) fails naming the file (Errc::corrupt_data).
  virtual void limit_vocab(int /*vocab*/) {}
  virtual std::string describe() const = 0;
  // A hash of samples of the content, which ranks compare at start-up besides describe()
  // (0: nothing to compare beyond the description, as for the built-in corpus, a function of
  // the seed).
  virtual std::uint64_t fingerprint() const { return 0; }
  // Entropy rate in nats/token where known (the synthetic corpus), else a negative number.
  virtual double entropy_rate() const { return -1.0; }
};

// The built-in corpus: an order-2 Markov source over a 32-symbol alphabet in which every
// two-symbol context has exactly four successors with probabilities {0.5, 0.25, 0.15, 0.10}
// (drawn from six candidates fixed by the last symbol). The successor sets depend on the
// seed; the entropy rate is H(p) = 1.2080 nats/token whatever the seed, so the log can show
// how close the loss is to the best achievable.
DTRAIN_API std::unique_ptr<TokenSource> make_synthetic_corpus(std::uint64_t seed);

// A token file: the llm.c shard format (name ending in .bin: 256 int32 header with magic
// 20240520, version 1, token count; then uint16 tokens) or else plain text read as bytes.
// Read with pread from a descriptor held open (one a file). The last `val_fraction` of the
// tokens is held out for validation.
// Errors (missing, empty, unreadable, bad magic, too short for seq_len) throw Error with a
// message naming the file.
DTRAIN_API std::unique_ptr<TokenSource> open_token_file(const std::string& path, int seq_len,
                                                        double val_fraction, std::uint64_t seed);

// Several token files read as one stream in the order given (all shards or all text); a
// sample is a window inside one file, so files shorter than seq_len + 1 add none. With
// val_files empty the last val_fraction of the stream's tokens is held out for validation
// (for one file, exactly open_token_file); otherwise training reads every token of
// train_files and validation those of val_files. The vocabulary needed is the largest over
// both sets, found by reading every shard once (vocab_needed(part, parts): the files
// i % parts == part of the train files followed by the validation files).
DTRAIN_API std::unique_ptr<TokenSource> open_token_files(const std::vector<std::string>& train_files,
                                                         const std::vector<std::string>& val_files,
                                                         int seq_len, double val_fraction,
                                                         std::uint64_t seed);

// The files a data option names: paths and glob patterns (*, ? and [...]) separated by
// commas, in that order; a pattern's matches sorted by name. A pattern that matches nothing
// is an error; a plain path is passed on as it is (opening it reports a missing file).
DTRAIN_API std::vector<std::string> expand_data_files(const std::string& spec);

// Which samples a rank reads: step s, micro-step m, data-parallel rank d (of D), micro batch b
// reads global samples  s*G + m*(b*D) + d*b + [0, b)  with G = global batch. Ranks are
// disjoint and together cover every sample of the global batch.
struct DTRAIN_API BatchPlan {
  int micro_batch = 1;
  int dp_size = 1;
  int dp_rank = 0;
  int accum_steps = 1;  // micro-steps per optimiser step
  std::uint64_t global_batch() const;
  std::uint64_t first_sample(std::uint64_t step, int micro) const;
};

// Fills token/target buffers (each [micro_batch, seq_len]) for one micro-step.
class DTRAIN_API BatchLoader {
 public:
  BatchLoader(const TokenSource& source, BatchPlan plan, int seq_len);
  // Training batch for (step, micro); targets are the tokens shifted by one.
  void load(Split split, std::uint64_t first_sample, std::int32_t* tokens, std::int32_t* targets);
  const BatchPlan& plan() const { return plan_; }

 private:
  const TokenSource& source_;
  BatchPlan plan_;
  int seq_len_;
  std::unique_ptr<std::int32_t[]> scratch_;  // one sample of seq_len+1 tokens, allocated once
};

}  // namespace dtrain::train
