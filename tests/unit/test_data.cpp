#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <set>
#include <vector>

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
  write_file(temp_path("short.txt"), "abc");
  expect_error(temp_path("short.txt"), "fewer than seq-len + 1");
  expect_error(testing::TempDir(), "not a readable regular file");
}
