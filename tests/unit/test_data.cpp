#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <set>
#include <thread>
#include <vector>

#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>

#include "dtrain/core/error.hpp"
#include "dtrain/train/data.hpp"

using namespace dtrain;
using namespace dtrain::train;

namespace {
std::string temp_path(const std::string& name) {
  return testing::TempDir() + "dtrain_test_" + name;
}
void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}
std::string shard_bytes(std::int32_t magic, std::int32_t version, const std::vector<std::uint16_t>& toks) {
  std::vector<std::int32_t> header(256, 0);
  header[0] = magic;
  header[1] = version;
  header[2] = static_cast<std::int32_t>(toks.size());
  std::string s(reinterpret_cast<const char*>(header.data()), header.size() * 4);
  s.append(reinterpret_cast<const char*>(toks.data()), toks.size() * 2);
  return s;
}
}  // namespace

TEST(Synthetic, DeterministicAndSplitsDiffer) {
  auto a = make_synthetic_corpus(5), b = make_synthetic_corpus(5);
  std::vector<std::int32_t> x(65), y(65), v(65);
  a->sample(Split::train, 123, 65, x.data());
  b->sample(Split::train, 123, 65, y.data());
  b->sample(Split::val, 123, 65, v.data());
  EXPECT_EQ(x, y);
  EXPECT_NE(x, v);
  for (int t : x) EXPECT_LT(t, a->vocab_needed());
}

TEST(Synthetic, EmpiricalEntropyMatchesTheStatedRate) {
  // Estimate H(X_t | X_{t-2}, X_{t-1}) from counts; it must approach the stated rate.
  auto src = make_synthetic_corpus(11);
  std::map<std::pair<int, int>, std::map<int, long>> counts;
  std::vector<std::int32_t> seq(256);
  for (int s = 0; s < 2000; ++s) {
    src->sample(Split::train, s, 256, seq.data());
    for (int t = 2; t < 256; ++t) counts[{seq[t - 2], seq[t - 1]}][seq[t]]++;
  }
  double h = 0, total = 0;
  for (auto& [ctx, next] : counts) {
    double n = 0;
    for (auto& kv : next) n += kv.second;
    for (auto& kv : next) h -= kv.second * std::log(kv.second / n);
    total += n;
    EXPECT_LE(next.size(), 4u);  // exactly four successors per context
  }
  EXPECT_NEAR(h / total, src->entropy_rate(), 0.02);
  EXPECT_NEAR(src->entropy_rate(), 1.2080, 1e-3);
}

TEST(BatchPlan, RanksAreDisjointAndCoverTheGlobalBatch) {
  for (int dp : {1, 2, 3, 4}) {
    for (int accum : {1, 3}) {
      std::multiset<std::uint64_t> seen;
      for (int r = 0; r < dp; ++r) {
        BatchPlan p{2, dp, r, accum};
        for (int m = 0; m < accum; ++m)
          for (int b = 0; b < 2; ++b) seen.insert(p.first_sample(7, m) + b);
      }
      BatchPlan p0{2, dp, 0, accum};
      ASSERT_EQ(seen.size(), p0.global_batch());
      std::uint64_t expect = 7 * p0.global_batch();
      for (std::uint64_t s : seen) EXPECT_EQ(s, expect++);  // each exactly once, no gaps
    }
  }
}

TEST(BatchLoader, TargetsAreShiftedTokens) {
  auto src = make_synthetic_corpus(1);
  BatchLoader loader(*src, BatchPlan{2, 1, 0, 1}, 16);
  std::vector<std::int32_t> tok(32), tgt(32), ref(17);
  loader.load(Split::train, 40, tok.data(), tgt.data());
  src->sample(Split::train, 41, 17, ref.data());
  for (int t = 0; t < 16; ++t) {
    EXPECT_EQ(tok[16 + t], ref[t]);
    EXPECT_EQ(tgt[16 + t], ref[t + 1]);
  }
}

TEST(TokenFile, PlainTextAndShard) {
  std::string text(5000, 'x');
  for (std::size_t i = 0; i < text.size(); ++i) text[i] = static_cast<char>('a' + i % 26);
  write_file(temp_path("a.txt"), text);
  auto f = open_token_file(temp_path("a.txt"), 64, 0.1, 1);
  EXPECT_EQ(f->vocab_needed(), 256);
  std::vector<std::int32_t> seq(65);
  f->sample(Split::train, 3, 65, seq.data());
  for (int t = 1; t < 65; ++t) EXPECT_EQ((seq[t] - 'a' + 26) % 26, (seq[t - 1] - 'a' + 1) % 26);

  std::vector<std::uint16_t> toks(3000);
  for (std::size_t i = 0; i < toks.size(); ++i) toks[i] = static_cast<std::uint16_t>(i % 1000);
  write_file(temp_path("s.bin"), shard_bytes(20240520, 1, toks));
  auto s = open_token_file(temp_path("s.bin"), 32, 0.1, 1);
  EXPECT_EQ(s->vocab_needed(), 1000);
  s->sample(Split::val, 0, 33, seq.data());
  for (int t = 1; t < 33; ++t) EXPECT_EQ(seq[t], (seq[t - 1] + 1) % 1000);
  EXPECT_GE(seq[0], 0);
}

// The content fingerprint the ranks compare: equal for copies, different after one token
// changes in the first or last run, or anywhere in a file of up to 4096 tokens.
TEST(TokenFile, FingerprintFollowsTheContent) {
  auto fingerprint = [](const std::string& name, const std::string& bytes) {
    write_file(temp_path(name), bytes);
    return open_token_file(temp_path(name), 16, 0.1, 1)->fingerprint();
  };
  std::string big(100000, 'a');
  for (std::size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>('a' + i * 7 % 26);
  const std::uint64_t base = fingerprint("fp_a.txt", big);
  EXPECT_EQ(fingerprint("fp_b.txt", big), base);
  for (const std::size_t at : {std::size_t{0}, big.size() - 1}) {
    std::string changed = big;
    changed[at] = '!';
    EXPECT_NE(fingerprint("fp_c.txt", changed), base) << "byte " << at;
  }
  const std::string small = big.substr(0, 3000);
  for (std::size_t at = 0; at < small.size(); at += 37) {
    std::string changed = small;
    changed[at] = '!';
    EXPECT_NE(fingerprint("fp_d.txt", changed), fingerprint("fp_e.txt", small)) << "byte " << at;
  }
  std::vector<std::uint16_t> toks(5000);
  for (std::size_t i = 0; i < toks.size(); ++i) toks[i] = static_cast<std::uint16_t>(i % 1000);
  const std::uint64_t shard = fingerprint("fp_s.bin", shard_bytes(20240520, 1, toks));
  toks.back() = 7;  // was 999
  EXPECT_NE(fingerprint("fp_t.bin", shard_bytes(20240520, 1, toks)), shard);
  EXPECT_EQ(make_synthetic_corpus(1)->fingerprint(), 0u);
}

TEST(TokenFile, BadInputIsAClearError) {
  auto expect_error = [](const std::string& path, const std::string& fragment) {
    try {
      open_token_file(path, 16, 0.1, 1);
      ADD_FAILURE() << "no error for " << path;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
    }
  };
  expect_error(temp_path("missing.txt"), "cannot open data file");
  write_file(temp_path("empty.txt"), "");
  expect_error(temp_path("empty.txt"), "is empty");
  write_file(temp_path("bad.bin"), shard_bytes(12345, 1, std::vector<std::uint16_t>(100, 1)));
  expect_error(temp_path("bad.bin"), "wrong magic 12345");
  {
    std::string truncated = shard_bytes(20240520, 1, std::vector<std::uint16_t>(100, 1));
    std::string longer = truncated + "xyz";  // 3 bytes the header does not count
    truncated.resize(truncated.size() - 2);
    write_file(temp_path("truncated.bin"), truncated);
    expect_error(temp_path("truncated.bin"), "is truncated: header says 100 tokens, file holds 99");
    write_file(temp_path("longer.bin"), longer);
    expect_error(temp_path("longer.bin"), "has 3 bytes after the 100 tokens its header counts");
  }
  write_file(temp_path("short.txt"), "abc");
  expect_error(temp_path("short.txt"), "fewer than seq-len + 1");
  expect_error(testing::TempDir(), "not a readable regular file");
}

namespace {
// A shard whose tokens are base + 0, 1, 2, ...: a sample's first token says which file and
// where in it the window starts.
void write_counting_shard(const std::string& path, int base, int count) {
  std::vector<std::uint16_t> toks(static_cast<std::size_t>(count));
  for (int i = 0; i < count; ++i) toks[static_cast<std::size_t>(i)] = static_cast<std::uint16_t>(base + i);
  write_file(path, shard_bytes(20240520, 1, toks));
}
}  // namespace

// One file's samples are those the single-file reader drew before several files were
// supported, so a run resumed across that change reads the same data.
TEST(TokenFile, SamplePositionsAreStable) {
  write_counting_shard(temp_path("stable.bin"), 0, 3000);
  auto s = open_token_file(temp_path("stable.bin"), 32, 0.1, 7);
  const std::vector<int> train = {1683, 1911, 266, 811, 1784, 281};
  const std::vector<int> val = {2896, 2848, 2935, 2827, 2780, 2932};
  std::vector<std::int32_t> seq(33);
  for (int i = 0; i < 6; ++i) {
    s->sample(Split::train, static_cast<std::uint64_t>(i), 33, seq.data());
    EXPECT_EQ(seq[0], train[static_cast<std::size_t>(i)]);
    s->sample(Split::val, static_cast<std::uint64_t>(i), 33, seq.data());
    EXPECT_EQ(seq[0], val[static_cast<std::size_t>(i)]);
  }
}

// sample() is const and holds no buffer of its own: threads may draw samples at once.
TEST(TokenFile, SamplesDrawnConcurrentlyAreThoseOfOneThread) {
  write_counting_shard(temp_path("threads.bin"), 0, 60000);
  write_file(temp_path("threads.txt"), std::string(50000, 'x') + std::string(10000, 'y'));
  for (const char* name : {"threads.bin", "threads.txt"}) {
    SCOPED_TRACE(name);
    auto s = open_token_file(temp_path(name), 64, 0.1, 3);
    constexpr int kThreads = 4, kSamples = 2000, kLength = 65;
    std::vector<std::int32_t> want(static_cast<std::size_t>(kThreads) * kSamples * kLength);
    std::vector<std::int32_t> got(want.size());
    for (std::size_t i = 0; i < want.size() / kLength; ++i) s->sample(Split::train, i, kLength, &want[i * kLength]);
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        for (int k = 0; k < kSamples; ++k) {
          const std::size_t i = static_cast<std::size_t>(k) * kThreads + static_cast<std::size_t>(t);
          s->sample(Split::train, i, kLength, &got[i * kLength]);
        }
      });
    }
    for (std::thread& th : threads) th.join();
    EXPECT_TRUE(got == want);
  }
}

// Samples are read from the file as the run goes: one that shrank since is an error naming
// it, not a crash (a mapping would raise SIGBUS).
TEST(TokenFile, AFileThatShrankDuringTheRunFailsTheReadNamingIt) {
  const std::string path = temp_path("shrinks.bin");
  write_counting_shard(path, 0, 3000);
  auto s = open_token_file(path, 32, 0.1, 1);
  std::filesystem::resize_file(path, 1024);  // the header only
  std::vector<std::int32_t> seq(33);
  try {
    s->sample(Split::train, 0, 33, seq.data());
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::io);
    EXPECT_NE(std::string(e.what()).find("reading data file '" + path + "' at byte "), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("shorter than the 7024 bytes it had when the run opened it"), std::string::npos)
        << e.what();
  }
}

// A token past the vocabulary the ranks agreed on (a file changed since start-up, or another
// node's copy that the start-up scan did not read) fails the sample naming the file, not the
// model's embedding lookup with no file named.
TEST(TokenFile, ATokenPastTheAgreedVocabularyFailsNamingTheFile) {
  const std::string path = temp_path("past_vocab.bin");
  write_counting_shard(path, 0, 3000);
  auto s = open_token_file(path, 32, 0.0, 1);
  std::vector<std::int32_t> seq(33);
  s->limit_vocab(3000);
  s->sample(Split::train, 0, 33, seq.data());  // every token is below 3000
  s->limit_vocab(1000);
  int refused = 0;
  for (std::uint64_t i = 0; i < 20; ++i) {
    try {
      s->sample(Split::train, i, 33, seq.data());
      for (std::int32_t t : seq) EXPECT_LT(t, 1000);
    } catch (const Error& e) {
      ++refused;
      EXPECT_EQ(e.code(), Errc::corrupt_data);
      EXPECT_NE(std::string(e.what()).find("data file '" + path + "' holds token "), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(", outside --vocab 1000"), std::string::npos) << e.what();
    }
  }
  EXPECT_GT(refused, 0);
}

// Opening a FIFO would wait for a writer: it is refused at once.
TEST(TokenFile, AFifoIsRefusedWithoutWaitingForAWriter) {
  const std::string path = temp_path("fifo.txt");
  std::filesystem::remove(path);
  ASSERT_EQ(::mkfifo(path.c_str(), 0600), 0);
  try {
    open_token_file(path, 16, 0.1, 1);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("is not a readable regular file"), std::string::npos) << e.what();
  }
  std::filesystem::remove(path);
}

// A run holds a descriptor per data file: a soft limit too low for them is raised, and more
// files than the hard limit allows are refused at start-up, naming both limits. In a child
// process each (a lowered hard limit cannot be raised again).
TEST(TokenFiles, TheLimitOnOpenFilesIsRaisedForTheFilesOrTheyAreRefused) {
  std::vector<std::string> paths;
  for (int i = 0; i < 50; ++i) {
    paths.push_back(temp_path("fd" + std::to_string(i) + ".txt"));
    write_file(paths.back(), std::string(100, 'a'));
  }
  // 0: as expected; 1: the wrong outcome; 2: the limit could not be set up.
  auto in_child = [&](rlim_t soft, rlim_t hard, bool fits) {
    const pid_t child = ::fork();
    if (child == 0) {
      struct rlimit lim {soft, hard};
      int code = 2;
      if (::setrlimit(RLIMIT_NOFILE, &lim) == 0) {
        try {
          auto s = open_token_files(paths, {}, 16, 0.1, 1);
          code = fits && ::getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur == 50 + 256 ? 0 : 1;
        } catch (const Error& e) {
          const std::string what = e.what();
          code = !fits && e.code() == Errc::invalid_config &&
                         what.find("50 data files need 306 open files") != std::string::npos &&
                         what.find("hard limit " + std::to_string(hard)) != std::string::npos
                     ? 0
                     : 1;
        }
      }
      ::_exit(code);
    }
    int status = 0;
    ::waitpid(child, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 3;
  };
  struct rlimit now {};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &now), 0);
  if (now.rlim_max == RLIM_INFINITY || now.rlim_max >= 306) EXPECT_EQ(in_child(100, now.rlim_max, true), 0);
  if (now.rlim_max == RLIM_INFINITY || now.rlim_max >= 200) EXPECT_EQ(in_child(200, 200, false), 0);
}

TEST(TokenFiles, SamplesStayInsideOneFileInProportionToItsWindows) {
  const std::vector<std::string> paths = {temp_path("m0.bin"), temp_path("m1.bin"), temp_path("m2.bin")};
  write_counting_shard(paths[0], 0, 200);
  write_counting_shard(paths[1], 10000, 20);  // shorter than a sample: never read
  write_counting_shard(paths[2], 20000, 500);
  auto s = open_token_files(paths, {}, 32, 0.0, 3);
  EXPECT_EQ(s->vocab_needed(), 20500);
  // Shares for ranks: files 0 and 2, then file 1; more shares than files leave some empty.
  EXPECT_EQ(s->vocab_needed(0, 2), 20500);
  EXPECT_EQ(s->vocab_needed(1, 2), 10020);
  EXPECT_EQ(s->vocab_needed(1, 4), 10020);
  EXPECT_EQ(s->vocab_needed(3, 4), 0);
  std::map<int, int> per_file;
  std::vector<std::int32_t> seq(33);
  const int draws = 4000;
  for (int i = 0; i < draws; ++i) {
    s->sample(Split::train, static_cast<std::uint64_t>(i), 33, seq.data());
    for (int t = 1; t < 33; ++t) ASSERT_EQ(seq[t], seq[t - 1] + 1) << "sample " << i << " spans two files";
    ++per_file[seq[0] / 10000];
  }
  EXPECT_EQ(per_file.count(1), 0u);
  // Windows: 168 in the first file, 468 in the third.
  EXPECT_NEAR(per_file[2] / double(draws), 468.0 / 636.0, 0.03);
}

TEST(TokenFiles, ValidationFractionIsTheStreamsEnd) {
  const std::vector<std::string> paths = {temp_path("v0.bin"), temp_path("v1.bin")};
  write_counting_shard(paths[0], 0, 200);
  write_counting_shard(paths[1], 10000, 500);
  auto s = open_token_files(paths, {}, 32, 0.5, 3);  // 700 tokens: the cut is at 350, in the second file
  std::vector<std::int32_t> seq(33);
  std::set<int> train_files_seen;
  for (int i = 0; i < 1000; ++i) {
    s->sample(Split::train, static_cast<std::uint64_t>(i), 33, seq.data());
    train_files_seen.insert(seq[0] / 10000);
    if (seq[0] >= 10000) EXPECT_LE(seq[32], 10000 + 149) << "training read a held-out token";
    s->sample(Split::val, static_cast<std::uint64_t>(i), 33, seq.data());
    EXPECT_GE(seq[0], 10000 + 150) << "validation read a training token";
  }
  EXPECT_EQ(train_files_seen, (std::set<int>{0, 1}));
}

TEST(TokenFiles, SeparateValidationFilesLeaveTrainingWhole) {
  write_counting_shard(temp_path("t.bin"), 0, 40);
  write_counting_shard(temp_path("val.bin"), 30000, 100);
  auto s = open_token_files({temp_path("t.bin")}, {temp_path("val.bin")}, 32, 0.1, 5);
  EXPECT_EQ(s->vocab_needed(), 30100);
  EXPECT_EQ(s->vocab_needed(0, 2), 40);     // the training file
  EXPECT_EQ(s->vocab_needed(1, 2), 30100);  // the validation file
  std::vector<std::int32_t> seq(33);
  int last_start = 0;
  for (int i = 0; i < 400; ++i) {
    s->sample(Split::train, static_cast<std::uint64_t>(i), 33, seq.data());
    last_start = std::max(last_start, seq[0]);
    s->sample(Split::val, static_cast<std::uint64_t>(i), 33, seq.data());
    EXPECT_GE(seq[0], 30000);
  }
  EXPECT_EQ(last_start, 40 - 33);  // every window of the training file, its end included
  EXPECT_NE(s->describe().find("validation: '"), std::string::npos) << s->describe();
}

TEST(TokenFiles, NamesExpandToSortedMatchesInOrder) {
  const std::string dir = temp_path("names_");
  write_file(dir + "a_2.bin", "");
  write_file(dir + "a_1.bin", "");
  write_file(dir + "a_10.bin", "");
  EXPECT_EQ(expand_data_files(dir + "a_*.bin," + dir + "x.txt"),
            (std::vector<std::string>{dir + "a_1.bin", dir + "a_10.bin", dir + "a_2.bin", dir + "x.txt"}));
  EXPECT_EQ(expand_data_files("b.txt,,a.txt"), (std::vector<std::string>{"b.txt", "a.txt"}));
  auto expect_error = [](const std::string& spec, const std::string& fragment) {
    try {
      expand_data_files(spec);
      ADD_FAILURE() << "no error for " << spec;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
    }
  };
  expect_error(dir + "zz_*.bin", "matches no file");
  expect_error(",", "names no data file");
}

TEST(TokenFiles, BadSetsAreAClearError) {
  write_counting_shard(temp_path("ok.bin"), 0, 100);
  write_counting_shard(temp_path("tiny1.bin"), 0, 10);
  write_counting_shard(temp_path("tiny2.bin"), 0, 20);
  write_file(temp_path("ok.txt"), std::string(100, 'a'));
  auto expect_error = [](const std::vector<std::string>& train, const std::vector<std::string>& val,
                         const std::string& fragment) {
    try {
      open_token_files(train, val, 32, 0.1, 1);
      ADD_FAILURE() << "no error for " << train.front();
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
    }
  };
  expect_error({temp_path("ok.bin"), temp_path("ok.txt")}, {}, "mix llm.c shards (.bin) and text");
  expect_error({temp_path("ok.bin")}, {temp_path("ok.txt")}, "mix llm.c shards (.bin) and text");
  expect_error({temp_path("tiny1.bin"), temp_path("tiny2.bin")}, {}, "none of the 2 data files");
  expect_error({temp_path("ok.bin")}, {temp_path("tiny1.bin")}, "the validation split (10 tokens)");
  expect_error({}, {}, "no training data file");
}

// A file given twice in --data trains twice; refused only where part of it is held out for
// validation (its other copy would train on those tokens).
TEST(TokenFiles, AFileGivenTwiceIsRefusedOnlyWhereItsEndIsHeldOut) {
  const std::string a = temp_path("twice_a.bin"), big = temp_path("twice_big.bin");
  write_counting_shard(a, 0, 100);
  write_counting_shard(big, 1000, 2000);
  try {
    open_token_files({a, a}, {}, 32, 0.1, 1);
    ADD_FAILURE() << "a file given twice whose end is held out was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("is given twice as training data"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("and its end is held out for validation"), std::string::npos) << e.what();
  }
  EXPECT_NO_THROW(open_token_files({a, a}, {}, 32, 0.0, 1));  // nothing held out
  // 10% of 2200 tokens, all of them in the last file.
  auto s = open_token_files({a, a, big}, {}, 32, 0.1, 1);
  std::vector<std::int32_t> seq(33);
  for (std::uint64_t i = 0; i < 50; ++i) {
    s->sample(Split::val, i, 33, seq.data());
    EXPECT_GE(seq[0], 1000);
  }
}
