// Token files as a TokenSource: one file, or several read as one stream in the order given.
// A sample is a window inside one file, never across two.
#include <glob.h>

#include <algorithm>
#include <climits>
#include <map>
#include <memory>
#include <set>
#include <vector>

#include "dtrain/core/error.hpp"
#include "dtrain/core/hash.hpp"
#include "dtrain/core/rng.hpp"
#include "dtrain/train/data.hpp"
#include "token_array.hpp"

namespace dtrain::train {
namespace {

using Files = std::vector<std::unique_ptr<TokenArray>>;

struct Segment {  // tokens [begin, begin + count) of one file
  const TokenArray* file;
  std::size_t begin;
  std::size_t count;
};

std::size_t windows_of(const Segment& s, std::size_t length) {
  return s.count >= length ? s.count - length + 1 : 0;
}

std::size_t windows_of(const std::vector<Segment>& segments, std::size_t length) {
  std::size_t n = 0;
  for (const Segment& s : segments) n += windows_of(s, length);
  return n;
}

// Running totals of the segments' windows of `length` tokens: window k lies in the first
// segment whose total exceeds k.
std::vector<std::size_t> window_ends(const std::vector<Segment>& segments, std::size_t length) {
  std::vector<std::size_t> ends;
  std::size_t n = 0;
  for (const Segment& s : segments) ends.push_back(n += windows_of(s, length));
  return ends;
}

std::size_t tokens_of(const std::vector<Segment>& segments) {
  std::size_t n = 0;
  for (const Segment& s : segments) n += s.count;
  return n;
}

Files open_all(const std::vector<std::string>& paths) {
  Files files;
  for (const std::string& p : paths) files.push_back(std::make_unique<TokenArray>(p));
  return files;
}

// "data file 'a'" or "3 data files 'a' .. 'c'": how messages and the log name a set of files.
std::string name_of(const Files& files) {
  if (files.size() == 1) return "data file '" + files.front()->path() + "'";
  return std::to_string(files.size()) + " data files '" + files.front()->path() + "' .. '" +
         files.back()->path() + "'";
}

class TokenFiles final : public TokenSource {
 public:
  TokenFiles(const std::vector<std::string>& train_paths, const std::vector<std::string>& val_paths,
             int seq_len, double val_fraction, std::uint64_t seed)
      : seed_(seed) {
    DTRAIN_CHECK(val_fraction >= 0 && val_fraction < 1, Errc::invalid_config,
                 "validation fraction must be in [0, 1), got " << val_fraction);
    DTRAIN_CHECK(!train_paths.empty(), Errc::invalid_argument, "no training data file given");
    reserve_descriptors(train_paths.size() + val_paths.size());
    train_files_ = open_all(train_paths);
    val_files_ = open_all(val_paths);
    check_one_kind();
    fingerprint_ = fingerprint_of_sets();
    if (val_files_.empty()) {
      split_by_fraction(val_fraction);
    } else {
      for (const auto& f : train_files_) train_.push_back({f.get(), 0, f->size()});
      for (const auto& f : val_files_) val_.push_back({f.get(), 0, f->size()});
    }
    check_no_sample_is_validated_and_trained();
    const std::size_t need = static_cast<std::size_t>(seq_len) + 1;
    ends_length_ = need;  // what training and evaluation sample
    train_ends_ = window_ends(train_, need);
    val_ends_ = window_ends(val_, need);
    if (windows_of(train_, need) == 0) {
      if (train_files_.size() == 1) {
        DTRAIN_FAIL(Errc::invalid_config, name_of(train_files_)
                                              << " has " << tokens_of(train_)
                                              << " training tokens, fewer than seq-len + 1 = " << need);
      }
      DTRAIN_FAIL(Errc::invalid_config, "none of the " << name_of(train_files_) << " holds seq-len + 1 = "
                                                       << need << " training tokens");
    }
    const Files& val_named = val_files_.empty() ? train_files_ : val_files_;
    if (!val_.empty() && windows_of(val_, need) == 0) {
      if (val_.size() == 1) {
        DTRAIN_FAIL(Errc::invalid_config, name_of(val_named) << ": the validation split (" << tokens_of(val_)
                                                             << " tokens) is shorter than seq-len + 1 = " << need);
      }
      DTRAIN_FAIL(Errc::invalid_config, name_of(val_named) << ": none of the " << val_.size()
                                                           << " files of the validation split (" << tokens_of(val_)
                                                           << " tokens in all) holds seq-len + 1 = " << need
                                                           << " of its tokens (a sample lies inside one file)");
    }
  }

  void sample(Split split, std::uint64_t index, int length, std::int32_t* out) const override {
    const std::vector<Segment>& segments = split == Split::val && !val_.empty() ? val_ : train_;
    const auto len = static_cast<std::size_t>(length);
    // Window ends of the segments: kept for seq-len + 1, made for another length (rarely).
    std::vector<std::size_t> other_length;
    if (len != ends_length_) other_length = window_ends(segments, len);
    const std::vector<std::size_t>& ends =
        len != ends_length_ ? other_length : &segments == &val_ ? val_ends_ : train_ends_;
    const std::size_t span = ends.empty() ? 0 : ends.back();
    DTRAIN_CHECK(span > 0, Errc::invalid_argument, "no window of " << length << " tokens in the data");
    const std::uint64_t stream = rng::stream_id(split == Split::train ? "file.train" : "file.val");
    const auto block = rng::philox(seed_, stream, index);
    std::size_t k = static_cast<std::size_t>(((static_cast<std::uint64_t>(block[1]) << 32) | block[0]) % span);
    // The first segment whose windows end after k holds window k (a binary search: a step
    // samples many windows, and a corpus may have thousands of files).
    const auto i = static_cast<std::size_t>(std::upper_bound(ends.begin(), ends.end(), k) - ends.begin());
    if (i > 0) k -= ends[i - 1];
    const Segment& s = segments[i];
    s.file->copy(s.begin + k, length, out);
    for (int t = 0; t < length; ++t) {
      DTRAIN_CHECK(out[t] < vocab_limit_, Errc::corrupt_data,
                   "data file '" << s.file->path() << "' holds token " << out[t] << " at token "
                                 << s.begin + k + static_cast<std::size_t>(t) << ", outside --vocab " << vocab_limit_
                                 << " (it held none at start-up: was it changed since, "
                                 << "or is this node's copy another?)");
    }
  }

  void limit_vocab(int vocab) override { vocab_limit_ = vocab; }
  int vocab_needed() const override { return vocab_needed(0, 1); }
  int vocab_needed(int part, int parts) const override {
    int v = 0;
    std::size_t i = 0;
    for (const Files* set : {&train_files_, &val_files_}) {
      for (const auto& f : *set) {
        if (i++ % static_cast<std::size_t>(parts) == static_cast<std::size_t>(part)) {
          v = std::max(v, f->vocab_needed());
        }
      }
    }
    return v;
  }

  std::uint64_t fingerprint() const override { return fingerprint_; }

  std::string describe() const override {
    std::string s = describe(train_files_);
    if (!val_files_.empty()) s += "; validation: " + describe(val_files_);
    if (val_.empty()) s += "; validation: samples of the training tokens (--val-fraction holds no tokens out)";
    return s;
  }

 private:
  static std::string describe(const Files& files) {
    std::size_t tokens = 0;
    for (const auto& f : files) tokens += f->size();
    const bool shard = files.front()->is_shard();
    const std::string kind = shard ? "uint16 shard" : "text bytes";
    std::string name = files.size() == 1 ? "'" + files.front()->path() + "'" : name_of(files);
    return name + " (" + std::to_string(tokens) + " tokens, " + kind +
           (shard && files.size() > 1 ? "s)" : ")");
  }

  // Shards and text files hold different kinds of token: a mix is almost surely a mistake.
  void check_one_kind() const {
    const TokenArray& first = *train_files_.front();
    for (const Files* set : {&train_files_, &val_files_}) {
      for (const auto& f : *set) {
        DTRAIN_CHECK(f->is_shard() == first.is_shard(), Errc::invalid_config,
                     "data files mix llm.c shards (.bin) and text: '" << first.path() << "' and '"
                                                                     << f->path() << "'");
      }
    }
  }

  // A file given twice, once as a training and once as a validation file (a glob over a
  // directory that holds both), or twice among the training files whose end is held out,
  // would be validated on tokens it trains on. (Twice among the training files with
  // validation files of their own weighs it double, which may be meant.)
  // After the split: a file given twice in --data is refused only where a part of it is
  // held out (its first copy trains on what the second validates).
  void check_no_sample_is_validated_and_trained() const {
    std::set<std::pair<std::uint64_t, std::uint64_t>> validated;
    for (const Segment& s : val_) validated.insert(s.file->identity());
    std::map<std::pair<std::uint64_t, std::uint64_t>, const TokenArray*> training;
    for (const auto& f : train_files_) {
      const auto [at, fresh] = training.emplace(f->identity(), f.get());
      DTRAIN_CHECK(fresh || validated.count(f->identity()) == 0, Errc::invalid_config,
                   "data file '" << f->path() << "' is given twice as training data (also as '" << at->second->path()
                                 << "'), and its end is held out for validation: the "
                                    "model would be validated on tokens it trains on");
    }
    for (const auto& f : val_files_) {
      const auto same = training.find(f->identity());
      DTRAIN_CHECK(same == training.end(), Errc::invalid_config,
                   "data file '" << f->path() << "' is both a validation file and a training file (as '"
                                 << same->second->path()
                                 << "'): the model would be validated on tokens it trains on");
    }
  }

  // The files' fingerprints in order; with validation files, a mark between the two sets,
  // so that moving a file from one set to the other changes it.
  std::uint64_t fingerprint_of_sets() const {
    std::uint64_t h = 0;
    for (const auto& f : train_files_) h = h * kFnvPrime ^ f->fingerprint();
    if (!val_files_.empty()) h = h * kFnvPrime ^ 0x76616c6964617465ULL;  // "validate"
    for (const auto& f : val_files_) h = h * kFnvPrime ^ f->fingerprint();
    return h;
  }

  // The last val_fraction of the stream's tokens is held out; a file may fall on both sides.
  void split_by_fraction(double val_fraction) {
    std::size_t total = 0;
    for (const auto& f : train_files_) total += f->size();
    const std::size_t cut = total - static_cast<std::size_t>(static_cast<double>(total) * val_fraction);
    std::size_t at = 0;  // first token of the current file in the stream
    for (const auto& f : train_files_) {
      const std::size_t in_train = std::min(f->size(), cut > at ? cut - at : 0);
      if (in_train > 0) train_.push_back({f.get(), 0, in_train});
      if (in_train < f->size()) val_.push_back({f.get(), in_train, f->size() - in_train});
      at += f->size();
    }
  }

  std::uint64_t seed_;
  std::uint64_t fingerprint_ = 0;
  int vocab_limit_ = INT_MAX;  // limit_vocab()
  Files train_files_, val_files_;
  std::vector<Segment> train_, val_;  // val_ empty: validation samples the training tokens
  std::size_t ends_length_ = 0;       // the sample length train_ends_ and val_ends_ are for
  std::vector<std::size_t> train_ends_, val_ends_;  // window_ends() of train_ and val_
};

}  // namespace

std::vector<std::string> expand_data_files(const std::string& spec) {
  std::vector<std::string> files;
  std::size_t begin = 0;
  while (begin <= spec.size()) {
    std::size_t end = spec.find(',', begin);
    if (end == std::string::npos) end = spec.size();
    const std::string part = spec.substr(begin, end - begin);
    begin = end + 1;
    if (part.empty()) continue;
    if (part.find_first_of("*?[") == std::string::npos) {  // a path: opening it says if it is missing
      files.push_back(part);
      continue;
    }
    glob_t matches{};
    const int rc = ::glob(part.c_str(), 0, nullptr, &matches);  // sorted by name
    for (std::size_t i = 0; rc == 0 && i < matches.gl_pathc; ++i) files.emplace_back(matches.gl_pathv[i]);
    ::globfree(&matches);
    DTRAIN_CHECK(rc != GLOB_NOMATCH, Errc::io, "data pattern '" << part << "' matches no file");
    DTRAIN_CHECK(rc == 0, Errc::io, "cannot read the directories of data pattern '" << part << "'");
  }
  DTRAIN_CHECK(!files.empty(), Errc::invalid_config, "'" << spec << "' names no data file");
  return files;
}

std::unique_ptr<TokenSource> open_token_files(const std::vector<std::string>& train_files,
                                              const std::vector<std::string>& val_files,
                                              int seq_len, double val_fraction,
                                              std::uint64_t seed) {
  return std::make_unique<TokenFiles>(train_files, val_files, seq_len, val_fraction, seed);
}

std::unique_ptr<TokenSource> open_token_file(const std::string& path, int seq_len,
                                             double val_fraction, std::uint64_t seed) {
  return open_token_files({path}, {}, seq_len, val_fraction, seed);
}

}  // namespace dtrain::train
