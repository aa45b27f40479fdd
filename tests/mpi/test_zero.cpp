// ZeRO stages 2 and 3 across data-parallel ranks: the loss curve of every stage equals the
// single-rank run of the same global batch, gradient accumulation equals one big batch, and
// the memory each rank reports follows the ZeRO formulas and is what it actually holds
// (resident pages of the parameter and gradient arenas, read with mincore). With
// --deterministic, every stage and degree gives the single rank's bits.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "dtrain/nn/gpt.hpp"
#include "dtrain/parallel/gradient_sync.hpp"
#include "dtrain/parallel/param_gather.hpp"
#include "dtrain/train/trainer.hpp"
#include "emulator_probe.hpp"
#include "test_support.hpp"
#include "train_fixtures.hpp"

using namespace dtrain;
using dtrain::test::Curves;
using dtrain::test::train_curves;
using dtrain::test::train_losses;
using dtrain::test::world;

namespace {

Curves single_rank_curves(const train::TrainConfig& cfg) { return test::single_rank_curves(cfg, world()); }

void expect_close(const Curves& a, const Curves& b, double rel, const char* what) {
  test::expect_curves_close(a, b, rel, what);
}

// Bit for bit: every step's loss and gradient norm.
void expect_same_bits(const Curves& a, const Curves& b, const std::string& what) {
  ASSERT_EQ(a.loss.size(), b.loss.size()) << what;
  for (std::size_t i = 0; i < b.loss.size(); ++i) {
    EXPECT_EQ(a.loss[i], b.loss[i]) << what << ", step " << i + 1;
    EXPECT_EQ(a.grad_norm[i], b.grad_norm[i]) << what << ", step " << i + 1 << " (gradient norm)";
  }
}

// Bytes of [p, p + bytes) (p page-aligned) backed by physical pages right now.
std::size_t resident_bytes(const void* p, std::size_t bytes) {
  const std::size_t page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  const std::size_t pages = (bytes + page - 1) / page;
  std::vector<unsigned char> in_core(pages);
  EXPECT_EQ(mincore(const_cast<void*>(p), bytes, in_core.data()), 0);
  std::size_t n = 0;
  for (unsigned char c : in_core) n += c & 1;
  return n * page;
}

// Peak resident memory of this process (VmHWM, KiB); reset_peak_rss() first sets the peak
// to the current resident size.
long peak_rss_kib() {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);)
    if (line.rfind("VmHWM:", 0) == 0) return std::stol(line.substr(6));
  return -1;
}
void reset_peak_rss() { std::ofstream("/proc/self/clear_refs") << "5"; }

}  // namespace

// ZeRO 1's gradient sync built without a device, as its header allows outside the shard mode:
// each rank's piece holds the average, and the fp32 gather shares the pieces (it used to
// dereference the missing device).
TEST(Zero, StageOneGradientSyncNeedsNoDevice) {
  Communicator& dp = world();
  const std::size_t n = 3001;  // two ranges in two buckets, pieces of uneven sizes
  std::vector<float> grads(n), params(n, -1.0f);
  for (std::size_t i = 0; i < n; ++i) grads[i] = static_cast<float>(dp.rank() + 1) * static_cast<float>(i % 7);
  parallel::GradientSync sync(dp, grads.data(), {{0, 1000}, {1000, n}}, 1000 * sizeof(float),
                              parallel::GradReduction::reduce_scatter);
  ASSERT_EQ(sync.buckets().size(), 2u);
  sync.begin(true);
  sync.ready(1000, n);
  sync.ready(0, 1000);
  sync.finish();
  const float mean_factor = static_cast<float>(dp.size() + 1) / 2.0f;  // mean of 1..size
  for (const parallel::Range& r : sync.owned())
    for (std::size_t i = r.first; i < r.second; ++i) {
      ASSERT_FLOAT_EQ(grads[i], mean_factor * static_cast<float>(i % 7)) << i;
      params[i] = static_cast<float>(i);
    }
  sync.all_gather(params.data());
  for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(params[i], static_cast<float>(i)) << i;
  EXPECT_THROW(sync.all_gather(params.data(), DType::bf16), Error);  // 16 bits needs the device
  // A finish() without its begin() reduced nothing (the last one's state decided), silently.
  try {
    sync.finish();
    ADD_FAILURE() << "finish() without begin() was taken";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::invalid_argument) << e.what();
  }
}

TEST(Zero, StagesTwoAndThreeMatchSingleRankWithAccumulation) {
  const int dp = world().size();
  train::TrainConfig cfg = test::tiny_train_config();
  cfg.global_batch = static_cast<long>(cfg.micro_batch) * dp * 2;  // two micro-steps per rank
  const Curves single = single_rank_curves(cfg);
  EXPECT_LT(single.loss.back(), single.loss.front());
  cfg.zero = 2;
  expect_close(train_curves(cfg, world()), single, 1e-5, "zero 2");
  cfg.bucket_mb = 0.004;  // one bucket per block (a block's gradients are never split)
  expect_close(train_curves(cfg, world()), single, 1e-5, "zero 2, small buckets");
  {  // buckets of about two blocks: each holds several of the ranges backward readies
    train::TrainConfig deep = cfg;
    deep.layers = 5;
    deep.bucket_mb = 0.1;
    expect_close(train_curves(deep, world()), single_rank_curves(deep), 1e-5,
                 "zero 2, buckets of two blocks");
  }
  cfg.zero = 3;  // one bucket per unit whatever --bucket-mb says
  expect_close(train_curves(cfg, world()), single, 1e-5, "zero 3");
  cfg.tie_embeddings = false;  // the LM head is a unit of its own
  const Curves untied = single_rank_curves(cfg);
  expect_close(train_curves(cfg, world()), untied, 1e-5, "zero 3, untied head");
}

TEST(Zero, StagesTwoAndThreeComposeWithTensorParallelism) {
  if (world().size() % 2 != 0 || world().size() < 4) GTEST_SKIP() << "needs --tp 2 with dp > 1";
  const int dp = world().size() / 2;
  train::TrainConfig cfg = test::tiny_train_config();
  cfg.heads = 4;
  cfg.global_batch = static_cast<long>(cfg.micro_batch) * dp * 2;
  const Curves single = single_rank_curves(cfg);
  cfg.tp = 2;
  for (int zero : {2, 3}) {
    cfg.zero = zero;
    cfg.sequence_parallel = false;
    expect_close(train_curves(cfg, world()), single, 1e-5, zero == 2 ? "tp 2, zero 2" : "tp 2, zero 3");
    cfg.sequence_parallel = true;
    expect_close(train_curves(cfg, world()), single, 1e-5, zero == 2 ? "tp 2 sp, zero 2" : "tp 2 sp, zero 3");
  }
}

// A unit prefetched by a pass that never acquires it would keep the other ranks' pieces from
// before an update: drop_unheld() (before every optimiser step) drops it, and refuses to run
// while a unit is held.
TEST(Zero, APrefetchedUnitIsDroppedBeforeTheParametersChange) {
  const std::size_t P = static_cast<std::size_t>(world().size()), per = 1024, unit = per * P;
  const std::size_t r = static_cast<std::size_t>(world().rank());
  DeviceBuffer arena(cpu_device(), 2 * unit * sizeof(float));
  float* a = arena.as<float>();
  for (std::size_t u = 0; u < 2; ++u)
    for (std::size_t i = u * unit + r * per; i < u * unit + (r + 1) * per; ++i) a[i] = 1.0f + i;
  parallel::ParamGather gather(world(), cpu_device(), a, {{0, unit}, {unit, 2 * unit}},
                               {std::vector<std::size_t>(P, per), std::vector<std::size_t>(P, per)});
  gather.acquire(0, 1);  // unit 1 prefetched, then never acquired
  gather.release(0);
  gather.poll();
  if (P > 1) {
    EXPECT_THROW(
        {
          gather.acquire(0, -1);
          gather.drop_unheld();
        },
        Error);
    gather.release(0);
  }
  gather.drop_unheld();
  for (std::size_t i = unit; i < 2 * unit; ++i) {  // unit 1: this rank's piece only
    const bool mine = i >= unit + r * per && i < unit + (r + 1) * per;
    ASSERT_EQ(a[i], mine ? 1.0f + i : 0.0f) << "element " << i;
  }
  gather.acquire(1, -1);  // gathered again: every piece as its rank holds it
  for (std::size_t i = unit; i < 2 * unit; ++i) ASSERT_EQ(a[i], 1.0f + i) << "element " << i;
  gather.release(1);
}

TEST(Zero, AccumulatedMicroBatchesEqualOneBigBatch) {
  // Global batch 32: micro-batch 4 x 4 micro-steps x dp 2 against one rank's single batch of 32.
  if (world().size() != 2) GTEST_SKIP() << "the issue's case is dp 2";
  train::TrainConfig cfg = test::tiny_train_config();
  cfg.steps = 20;
  cfg.global_batch = 32;
  cfg.micro_batch = 32;
  const Curves one_batch = single_rank_curves(cfg);
  cfg.micro_batch = 4;
  for (int zero : {0, 1, 2, 3}) {
    cfg.zero = zero;
    const Curves accumulated = train_curves(cfg, world());
    expect_close(accumulated, one_batch, 1e-5, zero == 0 ? "zero 0" : zero == 1 ? "zero 1"
                                                  : zero == 2 ? "zero 2" : "zero 3");
  }
}

TEST(Zero, MemoryFollowsTheFormulasAndIsWhatIsHeld) {
  // ZeRO paper with fp32 AdamW (K = 8 bytes of moments per parameter), Psi parameters over
  // Nd ranks: stage 1 holds 4+4 bytes + 8/Nd, stage 2 4 + (4+8)/Nd, stage 3 (4+4+8)/Nd.
  // Pieces are whole pages (4 KiB), so a unit's piece may be a page longer than 1/Nd: a
  // model with units of hundreds of pages keeps that inside the 5% tolerance.
  const int nd = world().size();
  train::TrainConfig cfg = test::tiny_train_config();
  cfg.d_model = 128;
  cfg.heads = 4;
  cfg.steps = 2;
  double psi = 0;  // parameters, by the model's own count (optimiser state of stage 0 / 8)
  {
    train::Trainer ref(cfg, world());
    psi = static_cast<double>(ref.run().memory.optimizer) / 8.0;
  }
  const test::EmulatorProbe chunk_bytes = test::emulator_probe("dtrain_cuda_emu_chunk_bytes");
  const test::EmulatorProbe chunk_peak = test::emulator_probe("dtrain_cuda_emu_chunk_bytes_peak");
  // Where discard cannot hand memory back (a GPU without virtual memory management), the
  // whole arenas stay resident at every stage.
  const bool released = select_device(cfg.device).discard_releases_memory();
  for (int stage : {1, 2, 3}) {
    cfg.zero = stage;
    if (chunk_peak) chunk_peak();  // the peak from here
    train::Trainer t(cfg, world());
    const double params = stage >= 3 && released ? 4 * psi / nd : 4 * psi;
    const double grads = stage >= 2 && released ? 4 * psi / nd : 4 * psi;
    const ParameterStore& p = t.model().parameters();
    const std::size_t units = t.model().grad_ready_ranges().size();
    const std::size_t slack = units * static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
    // A built trainer holds no more than that either. On the emulated GPU the physical
    // chunks say so too (set-up keeps no spare ones), and building never held more.
    EXPECT_LT(static_cast<double>(resident_bytes(p.params(), p.bytes())), 1.05 * params + slack)
        << "stage " << stage << ", built";
    EXPECT_LT(static_cast<double>(resident_bytes(p.grads(), p.bytes())), 1.05 * grads + slack)
        << "stage " << stage << ", built";
    if (chunk_bytes && chunk_peak) {
      const double bound = 1.05 * (params + grads) + 2.0 * static_cast<double>(slack);
      EXPECT_LT(static_cast<double>(chunk_bytes()), bound) << "stage " << stage << ", built";
      EXPECT_LT(static_cast<double>(chunk_peak()), bound) << "stage " << stage << ", building";
    }
    const train::TrainSummary s = t.run();
    const double optimizer = 8 * psi / nd;
    EXPECT_NEAR(static_cast<double>(s.memory.params), params, 0.05 * params) << "stage " << stage;
    EXPECT_NEAR(static_cast<double>(s.memory.grads), grads, 0.05 * grads) << "stage " << stage;
    EXPECT_NEAR(static_cast<double>(s.memory.optimizer), optimizer, 0.05 * optimizer)
        << "stage " << stage;
    const double total = params + grads + optimizer + static_cast<double>(s.memory.activations);
    EXPECT_NEAR(static_cast<double>(s.memory.total()), total, 0.05 * total) << "stage " << stage;
    double owned = static_cast<double>(s.memory.optimizer) / 8.0, owned_total = 0;
    world().all_reduce(&owned, &owned_total, 1, DType::f64, ReduceOp::sum);
    EXPECT_DOUBLE_EQ(owned_total, psi) << "stage " << stage;  // the shards partition the model

    // The accounting is what the arenas hold between steps: resident pages cover the
    // reported bytes and exceed them by less than one page per unit (a piece's tail page).
    const std::size_t held_params = resident_bytes(p.params(), p.bytes());
    const std::size_t held_grads = resident_bytes(p.grads(), p.bytes());
    EXPECT_GE(held_params + 0, s.memory.params) << "stage " << stage;
    EXPECT_LT(held_params, s.memory.params + slack) << "stage " << stage;
    EXPECT_GE(held_grads, s.memory.grads) << "stage " << stage;
    EXPECT_LT(held_grads, s.memory.grads + slack) << "stage " << stage;
  }
}

TEST(Zero, SixteenBitStorageBuildsWithoutTheWholeArenaInMemory) {
  // 16-bit parameter storage (bf16 at ZeRO 1 and 2) initialises, takes the masters of and
  // packs one unit at a time: building never maps more of the emulated GPU's parameter
  // arena than two units (one being packed, one whose discard is still queued), on top of
  // the gradients the stage holds.
  train::TrainConfig cfg = test::tiny_train_config();
  cfg.layers = 4;
  cfg.d_model = 128;
  cfg.heads = 4;
  { train::Trainer load_the_plugin(cfg, world()); }
  const test::EmulatorProbe chunk_peak = test::emulator_probe("dtrain_cuda_emu_chunk_bytes_peak");
  if (!chunk_peak) GTEST_SKIP() << "counts the emulated GPU's physical chunks";
  if (!select_device(cfg.device).discard_releases_memory())
    GTEST_SKIP() << "no 16-bit storage where the arenas are plain blocks";
  cfg.precision = "bf16";
  for (int stage : {1, 2}) {
    cfg.zero = stage;
    chunk_peak();  // the peak from here
    train::Trainer t(cfg, world());
    const std::size_t building = chunk_peak();
    const ParameterStore& p = t.model().parameters();
    std::size_t largest_unit = 0;
    for (const auto& [first, last] : t.model().grad_ready_ranges())
      largest_unit = std::max(largest_unit, sizeof(float) * (last - first));
    ASSERT_LT(2 * largest_unit, p.bytes() / 2) << "the model is too small to tell";
    const std::size_t grads = stage == 2 ? p.bytes() / world().size() : p.bytes();
    const std::size_t slack =
        t.model().grad_ready_ranges().size() * static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
    EXPECT_LT(building, grads + 2 * largest_unit + 2 * slack) << "stage " << stage;
  }
}

TEST(Zero, CheckpointsTakeNoDeviceMemory) {
  // Each rank writes and reads only what it holds (ZeRO 3 its parameter pieces; 16-bit
  // storage and mixed precision the fp32 masters), so a save or a load maps no chunk of the
  // emulated GPU's arenas, not even for a moment: the whole parameter arena never exists.
  // Set-up keeps nothing it held either.
  struct Case {
    const char* precision;
    int zero;
  };
  for (const Case c : {Case{"bf16", 1}, Case{"fp32", 3}, Case{"bf16", 3}}) {
    const std::string what = std::string(c.precision) + ", zero " + std::to_string(c.zero);
    train::TrainConfig cfg = test::tiny_train_config();
    cfg.d_model = 128;
    cfg.heads = 4;
    cfg.precision = c.precision;
    cfg.zero = c.zero;
    cfg.save_dir = test::fresh_dir(world(), "zero", "no_device_memory", world().size());
    train::Trainer t(cfg, world());
    // Looked up once the trainer has loaded the plugin.
    const test::EmulatorProbe chunk_bytes = test::emulator_probe("dtrain_cuda_emu_chunk_bytes");
    const test::EmulatorProbe chunk_peak = test::emulator_probe("dtrain_cuda_emu_chunk_bytes_peak");
    const test::EmulatorProbe created = test::emulator_probe("dtrain_cuda_emu_chunks_created");
    if (!chunk_bytes || !chunk_peak || !created) GTEST_SKIP() << "counts the emulated GPU's physical chunks";
    if (!select_device(cfg.device).discard_releases_memory())
      GTEST_SKIP() << "no chunks where the arenas are plain blocks";
    const ParameterStore& p = t.model().parameters();
    const std::size_t slack =
        t.model().grad_ready_ranges().size() * static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
    // ZeRO 1 with 16-bit storage holds its gradient arena whole and nothing of the
    // parameter arena; ZeRO 3 a piece of each.
    EXPECT_LT(chunk_bytes(), p.bytes() + slack) << what << ", built";
    t.train_step();
    const std::size_t held = chunk_bytes(), made = created();
    chunk_peak();  // the peak from here
    const std::string path = t.save_checkpoint();
    EXPECT_EQ(chunk_peak(), held) << what << ", while saving";
    t.load_checkpoint(path);
    EXPECT_EQ(chunk_peak(), held) << what << ", while loading";
    EXPECT_EQ(chunk_bytes(), held) << what;
    EXPECT_EQ(created(), made) << what << ": chunks were created";
    world().barrier();
  }
}

TEST(Zero, DeterministicModeIsBitwiseIdenticalAcrossDegreesAndStages) {
  // --deterministic: every ZeRO stage at this rank count gives the very bits of one rank
  // at stage 0 with the same global batch (two micro-batches per rank, so accumulation is
  // in the sum too). Clipping acts at every step, so the norm's bits reach the loss.
  const int dp = world().size();
  train::TrainConfig cfg = test::tiny_train_config();
  cfg.deterministic = true;
  cfg.clip_grad = 0.05;
  cfg.global_batch = static_cast<long>(cfg.micro_batch) * dp * 2;
  for (bool tied : {true, false}) {
    cfg.tie_embeddings = tied;
    cfg.zero = 0;
    const Curves single = single_rank_curves(cfg);
    for (int zero : {0, 1, 2, 3}) {
      cfg.zero = zero;
      expect_same_bits(train_curves(cfg, world()), single,
                       "zero " + std::to_string(zero) + (tied ? "" : ", untied"));
    }
  }
}

TEST(Zero, DeterministicModeWithTensorParallelism) {
  // TP 2 (with and without sequence parallelism) against one rank within 1e-5 (the TP
  // reductions sum in another order), and TP 2 x DP (ranks / 2) at each ZeRO stage against
  // TP 2 x DP 1, bit for bit: the norm counts a TP-replicated parameter once whatever the
  // data-parallel split.
  if (world().size() % 2 != 0) GTEST_SKIP() << "needs 2 x dp ranks";
  const int dp = world().size() / 2;
  train::TrainConfig cfg = test::tiny_train_config();
  cfg.heads = 4;
  cfg.deterministic = true;
  cfg.clip_grad = 0.05;
  cfg.global_batch = static_cast<long>(cfg.micro_batch) * dp * 2;
  const Curves one_rank = single_rank_curves(cfg);
  cfg.tp = 2;
  Communicator pair = world().split(world().rank() / 2, 0, "tp pair");
  for (bool sp : {false, true}) {
    cfg.sequence_parallel = sp;
    cfg.zero = 0;
    const Curves one_replica = train_curves(cfg, pair);
    expect_close(one_replica, one_rank, 1e-5, sp ? "tp 2 sp" : "tp 2");
    if (dp == 1) continue;
    for (int zero : {0, 1, 2, 3}) {
      cfg.zero = zero;
      expect_same_bits(train_curves(cfg, world()), one_replica,
                       std::string(sp ? "sp" : "no sp") + ", zero " + std::to_string(zero));
    }
  }
}

TEST(Zero, DeterministicStagesTwoAndThreeHoldOnlyTheirGradientPieces) {
  // Between steps the gradient arena keeps this rank's pieces only (the per-micro-batch
  // exchange buffers are reported on top), and ZeRO 3 also the parameter pieces.
  const int nd = world().size();
  train::TrainConfig cfg = test::tiny_train_config();
  cfg.d_model = 128;
  cfg.heads = 4;
  cfg.steps = 2;
  cfg.deterministic = true;
  if (!select_device(cfg.device).discard_releases_memory())
    GTEST_SKIP() << "this device keeps whole arenas (a GPU without virtual memory management)";
  for (int stage : {2, 3}) {
    cfg.zero = stage;
    train::Trainer t(cfg, world());
    const train::TrainSummary s = t.run();
    const ParameterStore& p = t.model().parameters();
    const std::size_t units = t.model().grad_ready_ranges().size();
    const std::size_t slack = units * static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
    EXPECT_LT(resident_bytes(p.grads(), p.bytes()), p.bytes() / nd + slack) << "stage " << stage;
    EXPECT_GT(s.memory.grads, p.bytes() / nd) << "stage " << stage;  // plus the exchange buffers
    if (stage == 3) {
      EXPECT_LT(resident_bytes(p.params(), p.bytes()), p.bytes() / nd + slack);
      EXPECT_LT(s.memory.params, p.bytes() / nd + slack);
    }
  }
}

TEST(Zero, CheckpointsMoveBetweenStagesAndLayouts) {
  // Whole tensors are written from the gathered units and read back into the pieces: save
  // at ZeRO 3 (or 2) on all ranks, resume at another stage or on one rank, and the run
  // continues as the uninterrupted ZeRO 0 run does.
  train::TrainConfig cfg = test::tiny_train_config();
  cfg.steps = 8;
  cfg.resume = "none";
  cfg.global_batch = static_cast<long>(cfg.micro_batch) * world().size();  // also on one rank
  const std::vector<double> straight = train_losses(cfg, world());
  const std::string dir = test::fresh_dir(world(), "zero", "ckpt", world().size());
  struct Pair {
    int save_zero, load_zero;
    bool load_alone;
  };
  for (const Pair& pair : {Pair{3, 0, true}, Pair{3, 2, false}, Pair{2, 3, false}, Pair{0, 3, false}}) {
    train::TrainConfig c = cfg;
    c.save_dir = dir;
    c.zero = pair.save_zero;
    std::string path;
    {
      train::Trainer t(c, world());
      for (int i = 0; i < 4; ++i) t.train_step();
      path = t.save_checkpoint();
    }
    c.zero = pair.load_zero;
    c.save_dir.clear();
    c.resume = path;
    Communicator self = world().split(world().rank(), 0, "self");
    train::Trainer resumed(c, pair.load_alone ? self : world());
    ASSERT_EQ(resumed.step(), 4);
    for (int i = 4; i < 8; ++i) {
      const double loss = resumed.train_step();
      EXPECT_NEAR(loss, straight[static_cast<std::size_t>(i)], 1e-5 * std::fabs(straight[i]))
          << "zero " << pair.save_zero << " -> " << pair.load_zero
          << (pair.load_alone ? " (one rank)" : "") << ", step " << i + 1;
    }
    world().barrier();
  }
}

TEST(Zero, DeterministicCheckpointsResumeBitForBitAtAnotherStageAndDegree) {
  // --deterministic: save at ZeRO 3 on all ranks, resume at ZeRO 0 on one rank (and at
  // ZeRO 2 on all): the continued losses are the uninterrupted run's bits.
  train::TrainConfig cfg = test::tiny_train_config();
  cfg.steps = 8;
  cfg.resume = "none";
  cfg.deterministic = true;
  cfg.global_batch = static_cast<long>(cfg.micro_batch) * world().size();
  const std::vector<double> straight = train_losses(cfg, world());
  const std::string dir = test::fresh_dir(world(), "zero", "det_ckpt", world().size());
  std::string path;
  {
    train::TrainConfig c = cfg;
    c.save_dir = dir;
    c.zero = 3;
    train::Trainer t(c, world());
    for (int i = 0; i < 4; ++i) t.train_step();
    path = t.save_checkpoint();
  }
  for (bool alone : {true, false}) {
    train::TrainConfig c = cfg;
    c.zero = alone ? 0 : 2;
    c.resume = path;
    Communicator self = world().split(world().rank(), 0, "self");
    train::Trainer resumed(c, alone ? self : world());
    ASSERT_EQ(resumed.step(), 4);
    for (int i = 4; i < 8; ++i)
      EXPECT_EQ(resumed.train_step(), straight[static_cast<std::size_t>(i)])
          << (alone ? "zero 0, one rank" : "zero 2") << ", step " << i + 1;
    world().barrier();
  }
}

TEST(Zero, StageThreeWritesOnlyItsPiecesAtStartUp) {
  // A ZeRO-3 rank initialises only the parameter pieces it keeps (and leaves the gradient
  // and optimiser arenas untouched until used): building the trainer raises the peak resident
  // memory by at least 70% of (1 - 1/Nd) x the parameter bytes less than ZeRO 0's build,
  // which writes the whole parameter arena. Initialising everything and dropping it after
  // would peak as high as ZeRO 0.
  const int nd = world().size();
  train::TrainConfig cfg = test::tiny_train_config();
  cfg.layers = 4;
  cfg.d_model = 512;
  cfg.heads = 8;
  cfg.vocab = 256;
  cfg.micro_batch = 1;
  long growth[4] = {0, 0, 0, 0};
  std::size_t arena_bytes = 0;
  for (int stage : {0, 3}) {
    cfg.zero = stage;
    world().barrier();
    reset_peak_rss();
    const long before = peak_rss_kib();
    ASSERT_GT(before, 0) << "no VmHWM in /proc/self/status";
    train::Trainer t(cfg, world());
    growth[stage] = peak_rss_kib() - before;
    arena_bytes = t.model().parameters().bytes();
  }
  const double saved_kib = static_cast<double>(growth[0] - growth[3]);
  const double expected_kib = (1.0 - 1.0 / nd) * static_cast<double>(arena_bytes) / 1024.0;
  EXPECT_GT(saved_kib, 0.7 * expected_kib)
      << "peak growth: zero 0 " << growth[0] << " KiB, zero 3 " << growth[3] << " KiB";
  if (world().rank() == 0) {
    std::printf("peak resident growth while building: zero 0 %ld KiB, zero 3 %ld KiB "
                "(parameter arena %zu KiB, dp %d)\n", growth[0], growth[3], arena_bytes / 1024, nd);
  }
}
