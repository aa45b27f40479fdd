// The training loop across ranks: data parallelism reproduces single-rank training on the
// same global batch, reruns are bitwise identical, the step loop allocates nothing.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "dtrain/core/rng.hpp"
#include "dtrain/nn/gpt.hpp"
#include "dtrain/train/data.hpp"
#include "dtrain/train/trainer.hpp"
#include "test_support.hpp"
#include "train_fixtures.hpp"

using namespace dtrain;
using dtrain::test::world;

namespace {

train::TrainConfig tiny_config() { return test::tiny_train_config(); }

// Large enough to learn the built-in corpus's order-2 structure in a few hundred steps.
train::TrainConfig learning_config(long steps) {
  train::TrainConfig cfg = tiny_config();
  cfg.d_model = 64;
  cfg.heads = 4;
  cfg.seq_len = 32;
  cfg.steps = steps;
  cfg.warmup_steps = 10;
  cfg.lr = 1e-2;
  cfg.min_lr = 1e-3;
  return cfg;
}
using test::Curves;
using test::expect_curves_close;
using test::train_curves;
using test::train_losses;

}  // namespace

TEST(Trainer, DataParallelMatchesSingleRankOnTheSameGlobalBatch) {
  const int dp = world().size();
  train::TrainConfig cfg = tiny_config();
  cfg.global_batch = static_cast<long>(cfg.micro_batch) * dp * 2;  // two micro-steps per rank
  const Curves parallel = train_curves(cfg, world());

  // Reference: one rank alone, the whole global batch through gradient accumulation.
  const Curves single = test::single_rank_curves(cfg, world());
  expect_curves_close(parallel, single, 1e-5);
  EXPECT_LT(single.loss.back(), single.loss.front());  // it learns
}

// The validation set is --eval-batches global batches, whatever the layout: a DP run and one
// rank alone evaluate the same sequences (it used to be eval_batches micro-batches per DP
// rank, so the set grew with dp).
TEST(Trainer, ValidationLossIsTheSameAtEveryDataParallelSize) {
  const int dp = world().size();
  train::TrainConfig cfg = tiny_config();
  cfg.global_batch = static_cast<long>(cfg.micro_batch) * dp * 2;
  cfg.eval_batches = 3;
  cfg.steps = 4;
  train::Trainer parallel(cfg, world());
  Communicator self = world().split(world().rank(), 0, "self");
  train::Trainer single(cfg, self);
  const double initial = single.evaluate();
  EXPECT_NEAR(parallel.evaluate(), initial, 1e-6 * initial);
  for (long s = 0; s < cfg.steps; ++s) {
    parallel.train_step();
    single.train_step();
  }
  const double a = parallel.evaluate(), b = single.evaluate();
  EXPECT_NEAR(a, b, 1e-5 * b);
  cfg.eval_batches = 1;  // another set: another loss (the test sees the sets)
  train::Trainer other(cfg, self);
  for (long s = 0; s < cfg.steps; ++s) other.train_step();
  EXPECT_GT(std::fabs(other.evaluate() - b), 1e-4 * b);
}

// The same run on one rank alone (gradient accumulation over the whole global batch).
Curves single_rank_curves(const train::TrainConfig& cfg) { return test::single_rank_curves(cfg, world()); }

TEST(Trainer, SmallBucketsAndZeroOneMatchSingleRank) {
  const int dp = world().size();
  train::TrainConfig cfg = tiny_config();
  cfg.global_batch = static_cast<long>(cfg.micro_batch) * dp * 2;
  const Curves single = single_rank_curves(cfg);
  cfg.bucket_mb = 0.004;  // one bucket per block, each reduced while backward runs
  expect_curves_close(train_curves(cfg, world()), single, 1e-5);
  cfg.zero = 1;
  expect_curves_close(train_curves(cfg, world()), single, 1e-5);
  cfg.bucket_mb = 25;  // one bucket: each rank owns 1/dp of the whole arena
  expect_curves_close(train_curves(cfg, world()), single, 1e-5);
}

TEST(Trainer, DeterministicModeIsBitwiseIdenticalAcrossDataParallelDegrees) {
  const int dp = world().size();
  train::TrainConfig cfg = tiny_config();
  cfg.deterministic = true;
  cfg.global_batch = static_cast<long>(cfg.micro_batch) * dp * 2;
  const Curves parallel = train_curves(cfg, world());
  const Curves single = single_rank_curves(cfg);
  ASSERT_EQ(parallel.loss.size(), single.loss.size());
  for (std::size_t i = 0; i < single.loss.size(); ++i) {
    EXPECT_EQ(parallel.loss[i], single.loss[i]) << "step " << i + 1;
    EXPECT_EQ(parallel.grad_norm[i], single.grad_norm[i]) << "step " << i + 1;
  }
}

TEST(Trainer, TensorParallelWithDataParallelAndZeroMatchesSingleRank) {
  if (world().size() % 2 != 0) GTEST_SKIP() << "needs an even rank count for --tp 2";
  const int dp = world().size() / 2;
  train::TrainConfig cfg = tiny_config();
  cfg.heads = 4;
  cfg.vocab = 131;  // not a multiple of the TP size: padded shards
  cfg.global_batch = static_cast<long>(cfg.micro_batch) * dp * 2;
  const Curves single = single_rank_curves(cfg);
  cfg.tp = 2;
  expect_curves_close(train_curves(cfg, world()), single, 1e-5);
  if (dp > 1) {  // ZeRO shards over dp
    cfg.zero = 1;
    expect_curves_close(train_curves(cfg, world()), single, 1e-5);
    cfg.zero = 0;
  }
  cfg.sequence_parallel = true;
  expect_curves_close(train_curves(cfg, world()), single, 1e-5);
}

// Every rank one TP shard: one head each, a vocabulary of 131 in shards of 33 and 32 rows.
TEST(Trainer, TensorParallelOverFourRanksMatchesSingleRank) {
  if (world().size() != 4) GTEST_SKIP() << "needs 4 ranks for --tp 4";
  train::TrainConfig cfg = tiny_config();
  cfg.heads = 4;
  cfg.vocab = 131;
  cfg.global_batch = static_cast<long>(cfg.micro_batch) * 2;  // two micro-steps, dp 1
  const Curves single = single_rank_curves(cfg);
  cfg.tp = 4;
  expect_curves_close(train_curves(cfg, world()), single, 1e-5);
  cfg.sequence_parallel = true;
  expect_curves_close(train_curves(cfg, world()), single, 1e-5);
}

TEST(Trainer, RerunsAreBitwiseIdentical) {
  train::TrainConfig cfg = tiny_config();
  cfg.deterministic = true;
  cfg.steps = 6;
  const std::vector<double> a = train_losses(cfg, world());
  const std::vector<double> b = train_losses(cfg, world());
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i], b[i]) << "step " << i + 1;
}

TEST(Trainer, StepLoopAllocatesNothingAfterTheFirstStep) {
  train::TrainConfig cfg = tiny_config();
  cfg.steps = 4;
  cfg.eval_every = 2;
  for (int zero : {0, 1, 2, 3}) {
    cfg.zero = zero;
    train::Trainer t(cfg, world());
    const train::TrainSummary s = t.run();
    EXPECT_EQ(s.steps, 4);
    EXPECT_EQ(s.allocations_after_first_step, 0u) << "zero " << zero;
    EXPECT_GT(s.memory.params, 0u);
    EXPECT_GT(s.final_val_loss, 0.0);
  }
}

TEST(Trainer, DeterministicStepLoopAllocatesNothingAfterTheFirstStep) {
  train::TrainConfig cfg = tiny_config();
  cfg.steps = 3;
  cfg.deterministic = true;
  for (int zero : {0, 1, 2, 3}) {  // each stage has its own deterministic path
    cfg.zero = zero;
    train::Trainer t(cfg, world());
    const train::TrainSummary s = t.run();
    EXPECT_EQ(s.allocations_after_first_step, 0u) << "zero " << zero;
    EXPECT_GT(s.final_val_loss, 0.0);
  }
}

TEST(Trainer, LearnsTowardTheCorpusEntropy) {
  // A small model on the built-in corpus: from ln(vocab) at the start to well below the
  // order-1 plateau (about ln 6 = 1.79), toward the entropy rate (1.208). With 32-token
  // windows the first two positions cannot be predicted from context, which puts the best
  // achievable mean loss near 1.30; 600 steps reach about 1.34.
  train::TrainConfig cfg = learning_config(600);
  cfg.micro_batch = 16 / world().size() > 0 ? 16 / world().size() : 1;
  cfg.eval_batches = 8;
  train::Trainer t(cfg, world());
  const train::TrainSummary s = t.run();
  EXPECT_GT(t.loss_history().front(), 4.0);
  EXPECT_LT(s.final_val_loss, s.entropy_rate + 0.25) << "entropy rate " << s.entropy_rate;
}

TEST(Trainer, RecomputationGivesTheSameLossesBitForBit) {
  // --recompute runs each block's forward again in backward instead of keeping its
  // activations: the same arithmetic on the same inputs, so the same losses bit for bit, in
  // every layout (deterministic mode, so reruns repeat too); under bf16 the same as keeping
  // the activations in fp32.
  // The pipeline schedules each keep another number of micro-batches in flight, whose
  // recomputed activations must not mix.
  struct Layout {
    const char* name;
    int tp, pp, zero;
    bool sp;
    const char* precision;
    const char* schedule;
  };
  const Layout layouts[] = {{"dp", 1, 1, 0, false, "fp32", ""},
                            {"dp, zero 3", 1, 1, 3, false, "fp32", ""},
                            {"tp 2, sp", 2, 1, 0, true, "fp32", ""},
                            {"pp 2, 1f1b", 1, 2, 0, false, "fp32", "1f1b"},
                            {"pp 2, gpipe", 1, 2, 0, false, "fp32", "gpipe"},
                            {"pp 4, 1f1b", 1, 4, 0, false, "fp32", "1f1b"},
                            {"tp 2 x pp 2, sp, 1f1b", 2, 2, 0, true, "fp32", "1f1b"},
                            {"dp, bf16", 1, 1, 1, false, "bf16", ""}};
  for (const Layout& l : layouts) {
    if (world().size() % (l.tp * l.pp) != 0) continue;
    train::TrainConfig cfg = tiny_config();
    cfg.layers = 4;  // a block for each of 4 stages
    cfg.steps = 4;
    cfg.deterministic = true;
    cfg.tp = l.tp;
    cfg.pp = l.pp;
    cfg.zero = l.zero;
    cfg.sequence_parallel = l.sp;
    cfg.precision = l.precision;
    cfg.fp32_activations = true;  // what recomputation keeps: fp32 values
    const int dp = world().size() / (l.tp * l.pp);
    if (l.pp > 1) {
      cfg.schedule = l.schedule;
      cfg.global_batch = static_cast<long>(cfg.micro_batch) * dp * 2 * l.pp;  // 2 micro-batches a stage
    }
    const Curves kept = train_curves(cfg, world());
    cfg.fp32_activations = false;
    cfg.recompute = true;
    const Curves recomputed = train_curves(cfg, world());
    ASSERT_EQ(kept.loss.size(), recomputed.loss.size()) << l.name;
    for (std::size_t i = 0; i < kept.loss.size(); ++i) {  // the gradients' bits reach the norm
      EXPECT_EQ(recomputed.loss[i], kept.loss[i]) << l.name << ", step " << i + 1;
      EXPECT_EQ(recomputed.grad_norm[i], kept.grad_norm[i]) << l.name << ", step " << i + 1 << " (gradient norm)";
    }
  }
}

TEST(Trainer, RecomputationKeepsOnlyEachBlocksOutput) {
  // Per block only its output stays for backward (R x C floats); everything else a block
  // computes lives in scratch shared by all blocks.
  Communicator self = world().split(world().rank(), 0, "self");
  train::TrainConfig cfg = tiny_config();
  cfg.recompute = true;
  auto activation_bytes = [&](int layers, bool recompute) {
    train::TrainConfig c = cfg;
    c.layers = layers;
    c.recompute = recompute;
    train::Trainer t(c, self);
    return t.model().activation_bytes();
  };
  const std::size_t rows = static_cast<std::size_t>(cfg.micro_batch) * cfg.seq_len;
  const std::size_t per_block = (rows * cfg.d_model + 15) / 16 * 16 * sizeof(float);
  EXPECT_EQ(activation_bytes(4, true) - activation_bytes(2, true), 2 * per_block);
  EXPECT_GT(activation_bytes(4, false) - activation_bytes(2, false), 2 * 8 * per_block)
      << "without recomputation a block keeps far more";
}

namespace {

// tp 2 where the rank count is even, ZeRO 3 over the data-parallel ranks where there are
// several: generation then gathers logits over the TP group and parameters by unit.
void spread_for_generation(train::TrainConfig& cfg) {
  if (world().size() % 2 == 0) cfg.tp = 2;
  if (world().size() > cfg.tp) cfg.zero = 3;
}

// The tokens of every rank are this rank's.
void expect_same_on_every_rank(const std::vector<std::int32_t>& tokens) {
  const std::size_t n = tokens.size();
  std::vector<std::int32_t> all(n * static_cast<std::size_t>(world().size()));
  world().all_gather(tokens.data(), all.data(), n, DType::i32);
  for (int r = 1; r < world().size(); ++r) {
    EXPECT_TRUE(std::equal(tokens.begin(), tokens.end(), all.begin() + static_cast<std::ptrdiff_t>(r * n)))
        << "rank " << r;
  }
}

}  // namespace

TEST(Trainer, GenerationIsTheSameOnEveryRankAndRepeats) {
  train::TrainConfig cfg = tiny_config();
  cfg.steps = 3;
  spread_for_generation(cfg);
  train::Trainer t(cfg, world());
  t.run();
  const train::SamplingConfig sampling{1.0, 0};
  const std::vector<std::int32_t> tokens = t.generate({'a', 'b'}, 40, sampling);  // > seq-len: the window slides
  ASSERT_EQ(tokens.size(), 40u);
  std::vector<std::int32_t> streamed;
  EXPECT_EQ(t.generate({'a', 'b'}, 40, sampling, [&](std::int32_t x) { streamed.push_back(x); }),
            tokens);
  EXPECT_EQ(streamed, tokens) << "each token is handed on as it is chosen";
  expect_same_on_every_rank(tokens);
  for (const std::int32_t tok : tokens) EXPECT_TRUE(tok >= 0 && tok < cfg.vocab) << tok;
  EXPECT_THROW(t.generate({cfg.vocab}, 1, sampling), Error);
}

// Past seq-len the window slides: each token is the one drawn (with generate's random number
// for it) from the logits of the last seq-len tokens of the text so far, decoded from scratch
// here (generate restarts its cache only when the window moves, and decodes one token at a
// time in between).
TEST(Trainer, GenerationPastSeqLenReadsTheLastWindow) {
  train::TrainConfig cfg = tiny_config();
  cfg.steps = 3;
  train::Trainer t(cfg, world());
  t.run();
  const std::vector<std::int32_t> prompt = {'a', 'b', 'c'};
  const train::SamplingConfig sampling{1.0, 0};
  const int count = 2 * cfg.seq_len + 5;
  const std::vector<std::int32_t> tokens = t.generate(prompt, count, sampling);
  ASSERT_EQ(tokens.size(), static_cast<std::size_t>(count));
  const std::set<std::int32_t> distinct(tokens.begin(), tokens.end());
  ASSERT_GE(distinct.size(), 4u) << "a text of one repeated token would hide a shifted window";
  std::vector<std::int32_t> text = prompt;
  GptModel& m = t.model();
  std::vector<float> logits(static_cast<std::size_t>(cfg.vocab));
  for (int i = 0; i < count; ++i) {
    const std::size_t n = std::min<std::size_t>(text.size(), static_cast<std::size_t>(cfg.seq_len));
    m.decode_reset();
    const float* row = m.decode(text.data() + text.size() - n, static_cast<int>(n));  // device
    m.device().copy(logits.data(), row, logits.size() * sizeof(float), CopyKind::device_to_host);
    const double u = rng::uniform_open(cfg.seed, rng::stream_id("generate"), static_cast<std::uint64_t>(i));
    const std::int32_t drawn = train::choose_token(logits.data(), cfg.vocab, sampling, u);
    ASSERT_EQ(tokens[static_cast<std::size_t>(i)], drawn) << "token " << i << " of a text of " << text.size();
    text.push_back(drawn);
  }
}

// Under 16-bit parameter storage generation holds the whole parameters for the text (one
// widening, not one per token) and lets them go after it: the same tokens as with the fp32
// arena resident, and training goes on afterwards.
TEST(Trainer, GenerationUnder16BitParameterStorage) {
  train::TrainConfig cfg = tiny_config();
  cfg.steps = 3;
  cfg.precision = "bf16";
  const train::SamplingConfig sampling{1.0, 0};
  std::vector<std::vector<std::int32_t>> texts;
  for (const bool fp32_arena : {false, true}) {
    cfg.param_storage = fp32_arena ? "fp32" : "16bit";
    train::Trainer t(cfg, world());
    t.run();
    texts.push_back(t.generate({'a', 'b'}, 40, sampling));
    EXPECT_NO_THROW(t.train_step()) << "the parameters were let go (fp32 arena " << fp32_arena << ")";
  }
  EXPECT_EQ(texts[0], texts[1]);
  expect_same_on_every_rank(texts[0]);
}

// --param-storage auto keeps a model this small (far under an eighth of the free memory) in
// the fp32 arena, which trains bit for bit as the 16-bit words; fp32 training has nothing to
// store in 16 bits whatever the option says.
TEST(Trainer, ParamStorageAutoKeepsASmallModelInTheFp32Arena) {
  train::TrainConfig cfg = tiny_config();
  cfg.steps = 3;
  std::map<std::string, train::TrainSummary> runs;
  std::map<std::string, std::vector<double>> losses;
  for (const char* precision : {"bf16", "fp32"}) {
    for (const char* storage : {"auto", "16bit", "fp32"}) {
      cfg.precision = precision;
      cfg.param_storage = storage;
      train::Trainer t(cfg, world());
      const std::string key = std::string(precision) + " " + storage;
      runs[key] = t.run();
      losses[key] = t.loss_history();
    }
  }
  const std::uint64_t fp32_bytes = runs["bf16 fp32"].memory.params;
  EXPECT_EQ(runs["bf16 auto"].memory.params, fp32_bytes);
  // A GPU without virtual memory management cannot hand the arena back: no 16-bit storage.
  const bool stores_16bit = select_device(cfg.device).discard_releases_memory();
  EXPECT_EQ(runs["bf16 16bit"].memory.params * (stores_16bit ? 2 : 1), fp32_bytes)
      << (stores_16bit ? "not stored in 16 bits" : "stored in 16 bits without gain");
  EXPECT_EQ(losses["bf16 auto"], losses["bf16 16bit"]);
  EXPECT_EQ(losses["bf16 fp32"], losses["bf16 16bit"]);
  for (const char* storage : {"auto", "16bit"}) {
    EXPECT_EQ(runs[std::string("fp32 ") + storage].memory.params, fp32_bytes) << storage;
  }
}

// Generation after training follows the corpus: the order-2 source allows 4 of 32 symbols
// after each two-symbol context, and the triples of a long stretch of the corpus itself (an
// independent reference) say which. A model that knew only the last symbol (6 successors)
// would make at most about 4/6 of its triples legal; this one, trained for 300 steps, makes
// about 88% (175 of 198 at 1, 2 and 4 ranks, 170 at 3). Minutes on the CUDA emulator, which
// runs the test above instead.
TEST(Trainer, GeneratedTextFollowsTheCorpusOnEveryRank) {
  train::TrainConfig cfg = learning_config(300);
  spread_for_generation(cfg);
  cfg.micro_batch = 16 / (world().size() / cfg.tp);
  train::Trainer t(cfg, world());
  t.run();
  const train::SamplingConfig sampling{0.7, 4};
  const std::vector<std::int32_t> tokens = t.generate({}, 200, sampling);
  ASSERT_EQ(tokens.size(), 200u);
  EXPECT_EQ(t.generate({}, 200, sampling), tokens);

  expect_same_on_every_rank(tokens);

  std::set<std::array<std::int32_t, 3>> seen;
  const auto corpus = train::make_synthetic_corpus(cfg.seed);
  std::vector<std::int32_t> text(1000);
  for (std::uint64_t i = 0; i < 200; ++i) {
    corpus->sample(train::Split::train, i, 1000, text.data());
    for (std::size_t k = 2; k < text.size(); ++k) seen.insert({text[k - 2], text[k - 1], text[k]});
  }
  ASSERT_LE(seen.size(), 32u * 32u * 4u);  // the source's own bound: the reference is sane
  int legal = 0;
  for (std::size_t k = 2; k < tokens.size(); ++k) legal += seen.count({tokens[k - 2], tokens[k - 1], tokens[k]});
  EXPECT_GT(legal, 0.8 * (tokens.size() - 2)) << legal << " of " << tokens.size() - 2 << " triples occur in the corpus";
}

namespace {

// A text file of `bytes` bytes in a directory of its own for this rank count, rank 0 writing.
std::string text_file(const std::string& name, std::size_t bytes) {
  const std::string dir = test::fresh_dir(world(), "trainer_data", name, world().size());
  const std::string path = dir + "/corpus.txt";
  if (world().rank() == 0) std::ofstream(path) << std::string(bytes, 'a');
  world().barrier();
  return path;
}

// Trainer construction throws on every rank (none is left waiting), with `fragment` in the
// message of rank 0.
void expect_every_rank_fails(const train::TrainConfig& cfg, const std::string& fragment) {
  bool threw = false;
  try {
    train::Trainer t(cfg, world());
  } catch (const Error& e) {
    threw = true;
    if (world().rank() == 0) EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  }
  EXPECT_TRUE(threw);
}

}  // namespace

// Without a prompt generation starts from the first token of validation sample 0 as an
// evaluation draws it (seq-len + 1 tokens). The validation file is one such window, "x" then
// "y"s: its only sample starts with "x", while a one-token window could start anywhere.
TEST(Trainer, GenerationWithoutAPromptStartsFromValidationSampleZero) {
  train::TrainConfig cfg = tiny_config();
  cfg.vocab = 256;  // text: a token per byte
  const std::string dir = test::fresh_dir(world(), "trainer_data", "prompt", world().size());
  cfg.data = dir + "/train.txt";
  cfg.val_data = dir + "/val.txt";
  if (world().rank() == 0) {
    std::string text;
    for (int i = 0; i < 4000; ++i) text += static_cast<char>('a' + (i * 7) % 26);
    std::ofstream(cfg.data) << text;
    std::ofstream(cfg.val_data) << 'x' << std::string(static_cast<std::size_t>(cfg.seq_len), 'y');
  }
  world().barrier();
  train::Trainer t(cfg, world());
  const train::SamplingConfig greedy{0.0, 0};
  const std::vector<std::int32_t> from_x = t.generate({'x'}, 8, greedy);
  ASSERT_NE(from_x, t.generate({'y'}, 8, greedy)) << "the start token must show in the text";
  EXPECT_EQ(t.generate({}, 8, greedy), from_x);
}

// Data staged to node-local disks may differ between nodes: rank 0 standing in for a node
// whose copy is missing or different.
TEST(Trainer, DataThatRanksSeeDifferentlyFailsEveryRank) {
  if (world().size() == 1) GTEST_SKIP() << "needs several ranks";
  const std::string good = text_file("good", 4000);
  train::TrainConfig cfg = tiny_config();
  cfg.vocab = 256;  // text: a token per byte
  // Different names are different settings, refused before any file is opened.
  const std::string other = text_file("other", 3000);
  cfg.data = world().rank() == 0 ? other : good;
  expect_every_rank_fails(cfg, "the ranks were given different settings: --data is '" + good + "' on rank 1, '" +
                                   other + "' on rank 0");

  // One name that each node resolves to its own file: each rank reads "corpus.txt" in a
  // directory of its own.
  const std::string dir = test::fresh_dir(world(), "trainer_data", "content", world().size());
  const std::filesystem::path mine = std::filesystem::absolute(dir + "/rank" + std::to_string(world().rank()));
  std::filesystem::create_directories(mine);
  const std::filesystem::path cwd = std::filesystem::current_path();
  std::filesystem::current_path(mine);
  cfg.data = "corpus.txt";
  // Missing on rank 0's node.
  if (world().rank() != 0) std::ofstream("corpus.txt") << std::string(4000, 'a');
  expect_every_rank_fails(cfg, "cannot open data file");
  // The same name and size, another content (one node's copy is stale or damaged).
  std::ofstream("corpus.txt") << std::string(4000, world().rank() == 0 ? 'b' : 'a');
  expect_every_rank_fails(cfg, "the ranks see different data");
  std::filesystem::current_path(cwd);

  cfg.data = good;  // the same file everywhere trains
  train::Trainer t(cfg, world());
  EXPECT_GT(t.train_step(), 0.0);
}

// A node-local --save-dir (each node its own /tmp) stands in as a directory per rank: a
// checkpoint is one file all ranks write, so this fails at start-up, on every rank.
TEST(Trainer, SaveDirThatRanksSeeDifferentlyFailsEveryRank) {
  if (world().size() == 1) GTEST_SKIP() << "needs several ranks";
  train::TrainConfig cfg = tiny_config();
  const std::string dir = test::fresh_dir(world(), "trainer_save", "local", world().size());
  // One --save-dir that each rank resolves in a directory of its own.
  const std::filesystem::path mine = std::filesystem::absolute(dir + "/rank" + std::to_string(world().rank()));
  std::filesystem::create_directories(mine);
  const std::filesystem::path cwd = std::filesystem::current_path();
  std::filesystem::current_path(mine);
  cfg.save_dir = "ckpt";
  expect_every_rank_fails(cfg, "is not on a file system that every rank sees: rank 1 on host ");
  std::filesystem::current_path(cwd);
  cfg.save_dir = dir + "/shared";
  train::Trainer t(cfg, world());
  EXPECT_FALSE(std::filesystem::exists(cfg.save_dir + "/.dtrain-shared-test"));  // the probe is gone
}
