// HDF5 checkpoints with pipeline parallelism: every stage writes only its own tensors, the
// last stage's copy of a tied wte is not written again, and any layout (1 rank, DP, TP, PP,
// TP x PP, PP with ZeRO-1) resumes a file written by any other and continues the
// uninterrupted single-rank run. Pairs needing 4 ranks run only at np4.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "ckpt/tensor_directory.hpp"
#include "dtrain/ckpt/checkpoint.hpp"
#include "dtrain/ckpt/file.hpp"
#include "dtrain/comm/process_grid.hpp"
#include "dtrain/core/error.hpp"
#include "dtrain/optim/optimizer.hpp"
#include "dtrain/train/trainer.hpp"
#include "test_support.hpp"
#include "train_fixtures.hpp"

using namespace dtrain;
using dtrain::test::world;
namespace fs = std::filesystem;

namespace {

// 3 layers: the two stages of PP=2 hold different numbers of blocks. vocab 130 is padded to
// 192 rows in storage, which must stay out of the file. 4 micro-batches of 2 sequences per
// step in every layout, so all of them train on the same global batch.
train::TrainConfig tiny_config() {
  train::TrainConfig c = test::tiny_train_config();
  c.layers = 3;
  c.vocab = 130;
  c.steps = 6;
  c.warmup_steps = 2;
  c.global_batch = static_cast<long>(c.micro_batch) * 4;
  c.resume = "none";
  return c;
}

struct Layout {
  const char* name;
  int ranks;
  int tp = 1;
  int pp = 1;
  int zero = 0;  // the rest of the ranks are data parallel
};

const Layout kOne{"1 rank", 1};
const Layout kDp2{"dp 2", 2};
const Layout kTp2{"tp 2", 2, 2};
const Layout kPp2{"pp 2", 2, 1, 2};
const Layout kTp2Pp2{"tp 2 x pp 2", 4, 2, 2};
const Layout kPp2Dp2Zero1{"pp 2 x dp 2, zero 1", 4, 1, 2, 1};

train::TrainConfig at_layout(train::TrainConfig cfg, const Layout& l) {
  cfg.tp = l.tp;
  cfg.pp = l.pp;
  cfg.zero = l.zero;
  return cfg;
}

std::string test_dir(const std::string& name) {
  return test::fresh_dir(world(), "ckpt_pipeline", name, world().size());
}

// Runs fn(trainer) on the first l.ranks world ranks, then waits for every rank.
template <class F>
void on_layout(const train::TrainConfig& cfg, const Layout& l, F&& fn) {
  {
    Communicator group = world().split(world().rank() < l.ranks ? 0 : -1, 0, "layout");
    if (group.valid()) {
      train::Trainer t(at_layout(cfg, l), group);
      fn(t);
    }
  }
  world().barrier();
}

// Trains (resuming as cfg.resume says) until step `until`, then saves when `save`. Returns
// the losses of the steps taken on world rank 0 (in every layout; the last stage's loss
// reaches every stage).
std::vector<double> train_on(const train::TrainConfig& cfg, const Layout& l, long until, bool save) {
  std::vector<double> losses;
  on_layout(cfg, l, [&](train::Trainer& t) {
    while (t.step() < until) losses.push_back(t.train_step());
    if (save) t.save_checkpoint();
  });
  return losses;
}

std::uint32_t bits_of(float f) {
  std::uint32_t b;
  std::memcpy(&b, &f, sizeof b);
  return b;
}

// This rank's slice of `name` and both its moments as bit patterns, the moments assembled
// over the dp group (under ZeRO each element from its owner, the others adding zeros).
std::vector<std::int32_t> slice_state(train::Trainer& t, const std::string& name) {
  const ParameterStore& params = t.model().parameters();
  optim::AdamW& opt = t.optimizer();
  const ParamInfo& p = params.at(name);
  const std::size_t n = p.local_numel();
  const bool lead = t.grid().dp_rank() == 0;
  std::vector<std::int32_t> out(3 * n, 0);
  if (lead)
    for (std::size_t i = 0; i < n; ++i) out[i] = static_cast<std::int32_t>(bits_of(params.param(p)[i]));
  if (lead || t.optimizer_sharded()) {
    const auto& segs = opt.segments();
    for (std::size_t j = 0; j < segs.size(); ++j) {
      for (std::size_t e = std::max(segs[j].offset, p.offset);
           e < std::min(segs[j].offset + segs[j].numel, p.offset + n); ++e) {
        const std::size_t s = opt.state_offset(j) + (e - segs[j].offset);
        out[n + (e - p.offset)] = static_cast<std::int32_t>(bits_of(opt.exp_avg()[s]));
        out[2 * n + (e - p.offset)] = static_cast<std::int32_t>(bits_of(opt.exp_avg_sq()[s]));
      }
    }
  }
  t.grid().dp().all_reduce(out.data(), out.data(), out.size(), DType::i32, ReduceOp::sum);
  return out;
}

// Every dataset of a and b has the same path, shape, dtype, checksum and bits, and the
// groups the same attributes (run_config aside: it names the layout). Rank 0 only.
void expect_same_file(const std::string& a_path, const std::string& b_path) {
  const ckpt::CheckpointFile a(a_path), b(b_path);
  ASSERT_EQ(a.datasets().size(), b.datasets().size()) << a_path << " vs " << b_path;
  for (std::size_t i = 0; i < a.datasets().size(); ++i) {
    const ckpt::DatasetInfo &x = a.datasets()[i], &y = b.datasets()[i];
    ASSERT_EQ(x.path, y.path);
    EXPECT_EQ(x.shape, y.shape) << x.path;
    EXPECT_EQ(x.dtype, y.dtype) << x.path;
    EXPECT_EQ(x.checksum, y.checksum) << x.path;
    EXPECT_TRUE(a.read(x.path) == b.read(y.path)) << x.path << " differs";
  }
  for (const char* group : {"/model", "/optimizer"}) EXPECT_EQ(a.attributes(group), b.attributes(group)) << group;
  ckpt::AttributeList ra = a.attributes("/"), rb = b.attributes("/");
  auto drop_run_config = [](ckpt::AttributeList& l) {
    for (auto it = l.begin(); it != l.end(); ++it) {
      if (it->first == "run_config") {
        l.erase(it);
        return;
      }
    }
  };
  drop_run_config(ra);
  drop_run_config(rb);
  EXPECT_EQ(ra, rb);
}

}  // namespace

TEST(CheckpointPipeline, DirectoryListsEveryTensorOnceWithItsFirstStage) {
  const std::vector<std::string> stages = {"wte 130 32\nwpe 16 32\nh.0.ln_1.weight 32\n",
                                           "wte 130 32\nh.1.ln_1.weight 32\nln_f.weight 32\n"};
  const std::vector<ckpt::TensorEntry> d = ckpt::merge_stages(stages);
  ASSERT_EQ(d.size(), 5u);
  const char* names[] = {"wte", "wpe", "h.0.ln_1.weight", "h.1.ln_1.weight", "ln_f.weight"};
  const int first[] = {0, 0, 0, 1, 1};
  for (std::size_t i = 0; i < d.size(); ++i) {
    EXPECT_EQ(d[i].name, names[i]);
    EXPECT_EQ(d[i].first_stage, first[i]) << names[i];
  }
  EXPECT_EQ(d[0].shape, (std::vector<std::int64_t>{130, 32}));
  try {
    ckpt::merge_stages({"wte 130 32\n", "wte 128 32\n"});
    ADD_FAILURE() << "a tensor with two shapes was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::internal);
    EXPECT_NE(std::string(e.what()).find("tensor wte has different shapes"), std::string::npos) << e.what();
  }
}

// Save at one layout after 3 steps, resume at another: the 6 losses equal the
// uninterrupted single-rank run's within 1e-5 (relative).
TEST(CheckpointPipeline, LayoutPairsResumeLikeTheUninterruptedRun) {
  ASSERT_GE(world().size(), 2);
  const train::TrainConfig cfg = tiny_config();
  const std::vector<double> straight = train_on(cfg, kOne, cfg.steps, false);
  const std::pair<Layout, Layout> pairs[] = {
      {kOne, kPp2}, {kPp2, kOne}, {kPp2, kDp2}, {kTp2Pp2, kOne}, {kOne, kTp2Pp2}, {kPp2Dp2Zero1, kTp2},
  };
  int case_no = 0;
  for (const auto& [writer, reader] : pairs) {
    if (writer.ranks > world().size() || reader.ranks > world().size()) continue;
    train::TrainConfig c = cfg;
    c.save_dir = test_dir("pair" + std::to_string(case_no++));
    std::vector<double> losses = train_on(c, writer, 3, true);
    c.resume = "auto";
    const std::vector<double> rest = train_on(c, reader, c.steps, false);
    losses.insert(losses.end(), rest.begin(), rest.end());
    if (world().rank() != 0) continue;
    ASSERT_EQ(losses.size(), straight.size()) << writer.name << " -> " << reader.name;
    for (std::size_t i = 0; i < straight.size(); ++i) {
      EXPECT_NEAR(losses[i], straight[i], 1e-5 * std::fabs(straight[i]))
          << "saved at " << writer.name << ", resumed at " << reader.name << ", step " << i + 1;
    }
  }
}

// A file written at a pipeline layout, loaded at another layout and saved again unchanged,
// is the same file, dataset for dataset and bit for bit (and the reverse): every tensor and
// moment was written once, completely, and read back whole. The PP-written file has exactly
// the datasets a single rank writes. Both copies of a tied wte load the stored tensor.
TEST(CheckpointPipeline, ReloadedAndSavedAgainIsTheSameFile) {
  ASSERT_GE(world().size(), 2);
  std::vector<std::pair<Layout, Layout>> pairs = {{kPp2, kOne}, {kOne, kPp2}};
  if (world().size() >= 4) {
    pairs.push_back({kTp2Pp2, kPp2Dp2Zero1});
    pairs.push_back({kPp2Dp2Zero1, kTp2Pp2});
  }
  // bf16: the files hold the fp32 masters, which each rank writes and reads for its own
  // segments (the arena holds them rounded; 16-bit storage, words).
  struct Variant {
    bool tied;
    const char* precision;
  };
  for (const Variant& v : {Variant{true, "fp32"}, Variant{false, "fp32"}, Variant{true, "bf16"}}) {
    const bool tied = v.tied;  // not a structured binding: lambdas capture those from C++20
    const auto& precision = v.precision;
    int case_no = 0;
    for (const auto& [writer, reader] : pairs) {
      const std::string variant = std::string(tied ? "tied" : "untied") + " " + precision;
      SCOPED_TRACE(variant + ": written at " + writer.name + ", reloaded at " + reader.name);
      // fp32's tags name the files checkpoint_pipeline.h5dump reads ("tied0")
      const std::string tag = std::string(tied ? "tied" : "untied") +
                              (std::string(precision) == "fp32" ? "" : std::string("_") + precision) +
                              std::to_string(case_no++);
      train::TrainConfig c = tiny_config();
      c.tie_embeddings = tied;
      c.precision = precision;
      c.save_dir = test_dir("written_" + tag);
      train_on(c, writer, 2, true);
      const std::string first = c.save_dir + "/" + ckpt::checkpoint_name(2);
      c.resume = first;
      c.save_dir = test_dir("rewritten_" + tag);
      on_layout(c, reader, [&](train::Trainer& t) {
        EXPECT_EQ(t.step(), 2);
        EXPECT_EQ(t.optimizer().steps_taken(), 2);
        t.save_checkpoint();
        // The last stage's copy of a tied wte equals the first stage's, moments included.
        ProcessGrid& g = t.grid();
        if (!tied || g.pp_size() == 1 || !g.in_embedding_group()) return;
        const parallel::HeldParameters whole = t.whole_parameters();  // 16-bit storage: the arena
        std::vector<std::int32_t> mine = slice_state(t, "wte"), first_stage = mine;
        g.embedding().broadcast(first_stage.data(), first_stage.data(), first_stage.size(), DType::i32, 0);
        std::size_t diff = 0;
        for (std::size_t i = 0; i < mine.size(); ++i) diff += mine[i] != first_stage[i];
        EXPECT_EQ(diff, 0u) << "pipeline stage " << g.pp_rank() << "'s wte";
      });
      if (world().rank() == 0) expect_same_file(first, c.save_dir + "/" + ckpt::checkpoint_name(2));
      world().barrier();
    }
  }
}

// SIGTERM while Trainer::run() trains at PP=2: the run stops at a step boundary with a
// checkpoint, and a single rank resumed from it continues the uninterrupted run.
TEST(CheckpointPipeline, SignalCheckpointResumesAtAnotherLayout) {
  ASSERT_GE(world().size(), 2);
  train::TrainConfig c = tiny_config();
  c.steps = 1000000;  // far more than run() gets through before the signal
  c.save_dir = test_dir("signal");
  long stopped_at = 0;
  on_layout(c, kPp2, [&](train::Trainer& t) {
    t.train_step();  // however late run() gets going, the signal stops it at step 1 or later
    std::thread sender;
    if (world().rank() == 0) {  // as a scheduler signals one task
      sender = std::thread([] {
        std::this_thread::sleep_for(std::chrono::milliseconds(300));
        kill(getpid(), SIGTERM);
      });
    }
    const train::TrainSummary sum = t.run();
    if (sender.joinable()) sender.join();
    EXPECT_TRUE(sum.stopped_by_signal);
    EXPECT_EQ(sum.last_checkpoint, c.save_dir + "/" + ckpt::checkpoint_name(t.step()));
    stopped_at = t.step();
  });
  world().broadcast(&stopped_at, &stopped_at, 1, DType::i64, 0);
  ASSERT_GT(stopped_at, 0);
  c.resume = "auto";
  const std::vector<double> resumed = train_on(c, kOne, stopped_at + 2, false);
  c.save_dir.clear();
  c.resume = "none";
  const std::vector<double> straight = train_on(c, kOne, stopped_at + 2, false);
  if (world().rank() != 0) return;
  ASSERT_EQ(resumed.size(), 2u);
  ASSERT_EQ(straight.size(), static_cast<std::size_t>(stopped_at + 2));
  for (std::size_t i = 0; i < 2; ++i) {
    const double want = straight[static_cast<std::size_t>(stopped_at) + i];
    EXPECT_NEAR(resumed[i], want, 1e-5 * std::fabs(want)) << "step " << stopped_at + 1 + i;
  }
}
