// HDF5 checkpoints across layouts: a file written at dp=2 (ZeRO 0 or 1) loads at any dp and
// ZeRO stage with parameters and moments bitwise equal to the writer's logical tensors;
// resuming is exact; corrupt, mismatched and half-written files are handled as documented.
#include <gtest/gtest.h>
#include <hdf5.h>
#include <sys/stat.h>

#include <atomic>
#include <cmath>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include "dtrain/ckpt/checkpoint.hpp"
#include "dtrain/ckpt/file.hpp"
#include "dtrain/comm/process_grid.hpp"
#include "dtrain/core/error.hpp"
#include "dtrain/nn/gpt.hpp"
#include "dtrain/optim/optimizer.hpp"
#include "dtrain/train/signals.hpp"
#include "dtrain/train/trainer.hpp"
#include "test_support.hpp"
#include "train_fixtures.hpp"

using namespace dtrain;
using dtrain::test::world;
namespace fs = std::filesystem;

namespace {

train::TrainConfig tiny_config() {
  train::TrainConfig c = test::tiny_train_config();
  c.vocab = 130;  // padded to 192 rows in storage: the padding must stay out of the file
  c.steps = 6;
  c.warmup_steps = 2;
  c.resume = "none";
  return c;
}

std::string test_dir(const std::string& name) {
  return test::fresh_dir(world(), "ckpt", name, world().size());
}

// The checkpoint of one step of cfg (with save_dir set to a fresh directory `name`), for the
// tests that damage or edit a file.
std::string one_step_checkpoint(train::TrainConfig& cfg, const std::string& name) {
  cfg.save_dir = test_dir(name);
  train::Trainer t(cfg, world());
  t.train_step();
  return t.save_checkpoint();
}

// Rank 0 rewrites the int64 attribute `name` of `object` in the file at path, as another tool
// may; every rank waits for it.
void rewrite_attribute(const std::string& path, const char* object, const char* name, std::int64_t value) {
  if (world().rank() == 0) {
    hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    hid_t o = H5Oopen(f, object, H5P_DEFAULT);
    hid_t a = H5Aopen(o, name, H5P_DEFAULT);
    EXPECT_GE(H5Awrite(a, H5T_NATIVE_INT64, &value), 0);
    H5Aclose(a);
    H5Oclose(o);
    H5Fclose(f);
  }
  world().barrier();
}

std::uint32_t bits_of(float f) {
  std::uint32_t b;
  std::memcpy(&b, &f, sizeof b);
  return b;
}

// Every parameter, exp_avg and exp_avg_sq as logical tensors (bit patterns), assembled over
// the trainer's dp group: each element comes from the one rank that holds it (dp rank 0 for
// replicated state), the others add zeros.
std::vector<std::int32_t> logical_state(train::Trainer& t) {
  const ParameterStore& params = t.model().parameters();
  optim::AdamW& opt = t.optimizer();
  ProcessGrid& grid = t.grid();
  const bool lead = grid.dp_rank() == 0;
  std::size_t total = 0;
  for (const ParamInfo& p : params) total += 3 * p.logical_numel();
  std::vector<std::int32_t> out(total, 0);
  std::size_t base = 0;
  for (const ParamInfo& p : params) {
    const std::size_t n = p.local_numel();
    if (lead)
      for (std::size_t i = 0; i < n; ++i) out[base + i] = static_cast<std::int32_t>(bits_of(params.param(p)[i]));
    if (lead || t.optimizer_sharded()) {
      const auto& segs = opt.segments();
      for (std::size_t j = 0; j < segs.size(); ++j) {
        for (std::size_t e = std::max(segs[j].offset, p.offset);
             e < std::min(segs[j].offset + segs[j].numel, p.offset + n); ++e) {
          const std::size_t s = opt.state_offset(j) + (e - segs[j].offset);
          out[base + n + (e - p.offset)] = static_cast<std::int32_t>(bits_of(opt.exp_avg()[s]));
          out[base + 2 * n + (e - p.offset)] = static_cast<std::int32_t>(bits_of(opt.exp_avg_sq()[s]));
        }
      }
    }
    base += 3 * n;
  }
  grid.dp().all_reduce(out.data(), out.data(), out.size(), DType::i32, ReduceOp::sum);
  return out;
}

// Flips the bits of `mask` in the byte at offset `at` of the file, as bit rot would.
void flip_bits(const std::string& path, std::uint64_t at, char mask) {
  std::fstream io(path, std::ios::in | std::ios::out | std::ios::binary);
  io.seekg(static_cast<std::streamoff>(at));
  char c = 0;
  io.read(&c, 1);
  c ^= mask;
  io.seekp(static_cast<std::streamoff>(at));
  io.write(&c, 1);
  ASSERT_TRUE(io.good()) << "cannot flip byte " << at << " of " << path;
}

// Runs fn and returns the Error it throws (a default Error(ok) when it throws none).
template <class F>
Error error_of(F&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e;
  }
  return Error(Errc::ok, "no error");
}

}  // namespace

TEST(Checkpoint, AnyDataParallelLayoutLoadsAFileWrittenAtDpTwo) {
  ASSERT_GE(world().size(), 2);
  for (int writer_zero : {0, 1}) {
    const std::string dir = test_dir("layouts_z" + std::to_string(writer_zero));
    train::TrainConfig cfg = tiny_config();
    cfg.save_dir = dir;
    std::vector<std::int32_t> reference;
    std::string path;
    {
      Communicator writers = world().split(world().rank() < 2 ? 0 : -1, 0, "writers");
      if (writers.valid()) {
        train::TrainConfig w = cfg;
        w.zero = writer_zero;
        train::Trainer t(w, writers);
        for (int s = 0; s < 3; ++s) t.train_step();
        path = t.save_checkpoint();
        reference = logical_state(t);
      }
    }
    std::uint64_t n = reference.size();
    world().broadcast(&n, &n, 1, DType::i64, 0);
    reference.resize(n);
    world().broadcast(reference.data(), reference.data(), n, DType::i32, 0);
    path = dir + "/" + ckpt::checkpoint_name(3);

    for (int readers = 1; readers <= world().size(); ++readers) {
      Communicator group = world().split(world().rank() < readers ? 0 : -1, 0, "readers");
      if (!group.valid()) continue;
      for (int reader_zero : {0, 1}) {
        train::TrainConfig r = cfg;
        r.zero = reader_zero;
        r.resume = path;
        train::Trainer t(r, group);
        EXPECT_EQ(t.step(), 3);
        EXPECT_EQ(t.optimizer().steps_taken(), 3);
        const std::vector<std::int32_t> got = logical_state(t);
        ASSERT_EQ(got.size(), reference.size());
        std::size_t diff = 0;
        for (std::size_t i = 0; i < got.size(); ++i) diff += got[i] != reference[i];
        EXPECT_EQ(diff, 0u) << "written at dp 2 zero " << writer_zero << ", read at dp " << readers
                            << " zero " << reader_zero;
      }
    }
    world().barrier();
  }
}

// N steps straight == k steps, checkpoint, resume, N-k steps.
TEST(Checkpoint, ResumingContinuesExactly) {
  for (bool deterministic : {true, false}) {
    const std::string dir = test_dir(deterministic ? "resume_det" : "resume_zero1");
    train::TrainConfig cfg = tiny_config();
    cfg.deterministic = deterministic;
    cfg.zero = deterministic ? 0 : 1;
    cfg.global_batch = static_cast<long>(cfg.micro_batch) * world().size() * 2;
    std::vector<double> straight;
    {
      train::Trainer t(cfg, world());
      for (long s = 0; s < cfg.steps; ++s) t.train_step();
      straight = t.loss_history();
    }
    cfg.save_dir = dir;
    std::vector<double> resumed;
    {
      train::Trainer t(cfg, world());
      for (int s = 0; s < 3; ++s) resumed.push_back(t.train_step());
      t.save_checkpoint();
    }
    cfg.resume = "auto";
    train::Trainer t(cfg, world());
    ASSERT_EQ(t.step(), 3);
    while (t.step() < cfg.steps) resumed.push_back(t.train_step());
    ASSERT_EQ(resumed.size(), straight.size());
    for (std::size_t i = 0; i < straight.size(); ++i) {
      if (deterministic) EXPECT_EQ(resumed[i], straight[i]) << "step " << i + 1;
      else EXPECT_NEAR(resumed[i], straight[i], 1e-6 * std::fabs(straight[i])) << "step " << i + 1;
    }
  }
}

namespace {

struct Layout {
  const char* name;
  int ranks;
  int tp;  // the rest of the ranks are data parallel
};

// Trains on the first l.ranks world ranks (resuming as cfg.resume says) until step `until`,
// then saves when `save`. Returns the losses of the steps taken; empty on ranks left out.
std::vector<double> train_on(train::TrainConfig cfg, const Layout& l, long until, bool save) {
  cfg.tp = l.tp;
  std::vector<double> losses;
  {
    Communicator group = world().split(world().rank() < l.ranks ? 0 : -1, 0, "layout");
    if (group.valid()) {
      train::Trainer t(cfg, group);
      while (t.step() < until) losses.push_back(t.train_step());
      if (save) t.save_checkpoint();
    }
  }
  world().barrier();
  return losses;
}

}  // namespace

// Save under tensor parallelism, resume without it (and the reverse): the losses continue
// as the uninterrupted single-rank run's. The global batch is the same in every layout.
TEST(Checkpoint, TensorParallelLayoutsResumeEachOther) {
  ASSERT_GE(world().size(), 2);
  train::TrainConfig cfg = tiny_config();
  cfg.global_batch = static_cast<long>(cfg.micro_batch) * 2;
  const Layout tp2{"tp 2", 2, 2}, dp2{"dp 2", 2, 1}, one{"1 rank", 1, 1};
  const std::vector<double> straight = train_on(cfg, one, cfg.steps, false);
  const std::pair<Layout, Layout> pairs[] = {{tp2, dp2}, {tp2, one}, {dp2, tp2}, {one, tp2}};
  int case_no = 0;
  for (const auto& [writer, reader] : pairs) {
    train::TrainConfig c = cfg;
    c.save_dir = test_dir("tp_pair" + std::to_string(case_no++));
    std::vector<double> losses = train_on(c, writer, 3, true);
    c.resume = "auto";
    const std::vector<double> rest = train_on(c, reader, c.steps, false);
    losses.insert(losses.end(), rest.begin(), rest.end());
    if (world().rank() != 0) continue;  // in every layout: it holds the losses
    ASSERT_EQ(losses.size(), straight.size()) << writer.name << " -> " << reader.name;
    for (std::size_t i = 0; i < straight.size(); ++i) {
      EXPECT_NEAR(losses[i], straight[i], 1e-5)
          << "saved at " << writer.name << ", resumed at " << reader.name << ", step " << i + 1;
    }
  }
}

TEST(Checkpoint, CorruptDatasetIsRefusedByNameAndThePreviousOneStillLoads) {
  const std::string dir = test_dir("corrupt");
  train::TrainConfig cfg = tiny_config();
  cfg.save_dir = dir;
  cfg.keep = 2;
  {
    train::Trainer t(cfg, world());
    for (int k = 0; k < 3; ++k) {  // steps 1, 2, 3: keep 2 leaves 2 and 3
      t.train_step();
      t.save_checkpoint();
    }
  }
  const std::string bad = dir + "/" + ckpt::checkpoint_name(3);
  const std::string good = dir + "/" + ckpt::checkpoint_name(2);
  EXPECT_FALSE(fs::exists(dir + "/" + ckpt::checkpoint_name(1)));
  if (world().rank() == 0) {
    // Flip one bit inside /model/wte's data on disk, as bit rot would.
    hid_t f = H5Fopen(bad.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
    hid_t d = H5Dopen2(f, "/model/wte", H5P_DEFAULT);
    const haddr_t at = H5Dget_offset(d);
    H5Dclose(d);
    H5Fclose(f);
    ASSERT_NE(at, HADDR_UNDEF);
    flip_bits(bad, at + 100, 0x10);
  }
  world().barrier();
  cfg.resume = "auto";  // latest names the corrupt file
  const Error e = error_of([&] { train::Trainer t(cfg, world()); });
  EXPECT_EQ(e.code(), Errc::corrupt_data) << e.what();
  EXPECT_NE(std::string(e.what()).find("dataset /model/wte fails its checksum"), std::string::npos) << e.what();
  cfg.resume = good;
  train::Trainer t(cfg, world());
  EXPECT_EQ(t.step(), 2);
}

// A bit flipped in the file's metadata (the root group's header follows the 48-byte
// superblock) fails HDF5's own checksum there: refused as damage, never read as a file that
// lacks an attribute, group or dataset.
TEST(Checkpoint, DamagedMetadataIsReportedAsDamageNotAsAbsence) {
  train::TrainConfig cfg = tiny_config();
  const std::string good = one_step_checkpoint(cfg, "damaged_metadata");
  const std::string dir = cfg.save_dir;
  cfg.save_dir.clear();
  const std::string copy = dir + "/flipped.h5";
  int damaged = 0;
  for (int at = 48; at <= 140; at += 4) {
    if (world().rank() == 0) {
      fs::copy_file(good, copy, fs::copy_options::overwrite_existing);
      flip_bits(copy, static_cast<std::uint64_t>(at), 0x01);
    }
    world().barrier();
    cfg.resume = copy;
    const Error e = error_of([&] { train::Trainer t(cfg, world()); });
    if (e.code() == Errc::ok) continue;  // a bit HDF5 does not read here
    const std::string msg = e.what();
    EXPECT_TRUE(e.code() == Errc::corrupt_data || e.code() == Errc::io) << msg;
    EXPECT_EQ(msg.find(" has no "), std::string::npos) << "byte " << at << ": " << msg;
    damaged += msg.find("(a damaged file?)") != std::string::npos;
  }
  EXPECT_GT(damaged, 0);
}

TEST(Checkpoint, AutoResumeIgnoresTemporaryFiles) {
  const std::string dir = test_dir("tmp");
  train::TrainConfig cfg = tiny_config();
  cfg.save_dir = dir;
  cfg.resume = "auto";
  {
    // Only a half-written temporary: nothing to resume from, start fresh.
    if (world().rank() == 0) std::ofstream(dir + "/step_00000009.h5.tmp") << "partial";
    world().barrier();
    train::Trainer t(cfg, world());
    EXPECT_EQ(t.step(), 0);
    t.train_step();
    t.train_step();
    t.save_checkpoint();  // also clears the stale temporary
  }
  EXPECT_FALSE(fs::exists(dir + "/step_00000009.h5.tmp"));
  if (world().rank() == 0) std::ofstream(dir + "/step_00000004.h5.tmp") << "partial";
  world().barrier();
  {
    train::Trainer t(cfg, world());
    EXPECT_EQ(t.step(), 2);
  }
  // Killed between the rename and the `latest` update: the complete file is still found.
  world().barrier();
  if (world().rank() == 0) fs::remove(dir + "/latest");
  world().barrier();
  train::Trainer t(cfg, world());
  EXPECT_EQ(t.step(), 2);
}

TEST(Checkpoint, ALatestThatCannotMoveFailsTheSaveNamingTheCompleteFile) {
  const std::string dir = test_dir("latest");
  train::TrainConfig cfg = tiny_config();
  cfg.save_dir = dir;
  train::Trainer t(cfg, world());
  t.train_step();
  t.save_checkpoint();
  // latest.tmp cannot be written when a directory has its name.
  if (world().rank() == 0) fs::create_directory(dir + "/latest.tmp");
  world().barrier();
  t.train_step();
  const Error e = error_of([&] { t.save_checkpoint(); });
  EXPECT_EQ(e.code(), Errc::io) << e.what();
  const std::string msg = e.what();
  EXPECT_NE(msg.find(ckpt::checkpoint_name(2) + " is complete"), std::string::npos) << msg;
  EXPECT_NE(msg.find("Is a directory"), std::string::npos) << msg;
  EXPECT_NE(msg.find("takes '" + ckpt::checkpoint_name(1) + "'"), std::string::npos) << msg;
  world().barrier();
  cfg.resume = dir + "/" + ckpt::checkpoint_name(2);
  train::Trainer resumed(cfg, world());
  EXPECT_EQ(resumed.step(), 2);
}

// `latest` as a file: its inode and modification time, which writing it anew changes.
std::pair<ino_t, long long> latest_identity(const std::string& dir) {
  struct stat st {};
  if (::stat((dir + "/latest").c_str(), &st) != 0) return {0, 0};
  return {st.st_ino, st.st_mtim.tv_sec * 1000000000LL + st.st_mtim.tv_nsec};
}

std::string latest_text(const std::string& dir) {
  std::ifstream in(dir + "/latest");
  std::string name;
  std::getline(in, name);
  return name;
}

TEST(Checkpoint, AStopRequestedBeforeRunStopsBeforeTheFirstStepAndIsConsumed) {
  const std::string dir = test_dir("early_stop");
  train::TrainConfig cfg = tiny_config();
  cfg.save_dir = dir;
  {
    train::Trainer t(cfg, world());
    t.train_step();
    t.train_step();
    t.save_checkpoint();
  }
  cfg.resume = "auto";
  train::Trainer t(cfg, world());
  const auto saved = latest_identity(dir);
  // A signal during the set-up, seen by one rank: every rank stops before training.
  if (world().rank() == world().size() - 1) train::request_stop(SIGUSR1);
  const train::TrainSummary stopped = t.run();
  EXPECT_TRUE(stopped.stopped_by_signal);
  EXPECT_FALSE(stopped.finished);
  EXPECT_EQ(stopped.steps, 2);
  EXPECT_EQ(t.step(), 2);
  EXPECT_EQ(train::stop_requested(), 0);
  // Nothing new to save, yet `latest` is written anew, naming the same checkpoint: a job
  // script whose srun reports the ranks' signal tells by it that they stopped with one.
  if (world().rank() == 0) {
    EXPECT_NE(latest_identity(dir), saved);
    EXPECT_EQ(latest_text(dir), "step_00000002.h5");
  }
  // Consumed: the next run trains to the end.
  const train::TrainSummary done = t.run();
  EXPECT_FALSE(done.stopped_by_signal);
  EXPECT_TRUE(done.finished);
  EXPECT_EQ(done.steps, cfg.steps);
  // A run with nothing left to train still reports a stop (dtrain-gpt then exits as
  // preempted instead of generating), and consumes it.
  const auto at_the_end = latest_identity(dir);
  if (world().rank() == 0) train::request_stop(SIGTERM);
  const train::TrainSummary nothing = t.run();
  EXPECT_TRUE(nothing.stopped_by_signal);
  EXPECT_TRUE(nothing.finished);  // dtrain-gpt exits 0 then, unless it has text to generate
  EXPECT_EQ(nothing.steps, cfg.steps);
  EXPECT_EQ(train::stop_requested(), 0);
  if (world().rank() == 0) EXPECT_NE(latest_identity(dir), at_the_end);
  EXPECT_FALSE(t.run().stopped_by_signal);
}

// Asks for a stop on the last rank, as a signal would, once this rank's traffic on the world
// communicator has grown by `more` bytes: run()'s stop checks are 4-byte all-reduces there, so
// the request comes after the first check of the pass it runs (whose 512 micro-batches leave
// the thread ample time to notice). A request that came too late is cleared.
class StopAfterWorldTraffic {
 public:
  explicit StopAfterWorldTraffic(std::uint64_t more)
      : thread_([this, until = world().bytes_sent() + more] {
          if (world().rank() != world().size() - 1) return;
          while (!done_ && world().bytes_sent() < until) std::this_thread::yield();
          if (!done_) train::request_stop(SIGUSR1);
        }) {}
  ~StopAfterWorldTraffic() {
    done_ = true;
    thread_.join();
    train::clear_stop_request();
  }

 private:
  std::atomic<bool> done_{false};
  std::thread thread_;
};

// A step of many micro-batches stops part-way: nothing of it is applied, the checkpoint is
// the step before, and the next step trains as if the stop never happened.
TEST(Checkpoint, AStopDuringALongStepStopsBetweenItsMicroBatchesAndDropsThem) {
  struct Layout {
    int zero;
    bool deterministic;
  };
  for (const Layout layout : {Layout{0, false}, Layout{2, true}, Layout{3, false}}) {
    SCOPED_TRACE("zero " + std::to_string(layout.zero) +
                 (layout.deterministic ? " deterministic" : ""));
    train::TrainConfig cfg = tiny_config();
    cfg.save_dir = test_dir("mid_step_z" + std::to_string(layout.zero));
    cfg.zero = layout.zero;
    cfg.deterministic = layout.deterministic;
    cfg.global_batch = cfg.micro_batch * 512 * world().size();  // 512 micro-batches a rank
    train::Trainer straight(cfg, world());
    train::Trainer t(cfg, world());
    for (int i = 0; i < 2; ++i) {
      straight.train_step();
      t.train_step();
    }
    const std::vector<std::int32_t> before = logical_state(t);
    ASSERT_TRUE(before == logical_state(straight));
    train::TrainSummary sum;
    {
      StopAfterWorldTraffic stop(4);  // after run()'s check before step 3
      sum = t.run();
    }
    EXPECT_TRUE(sum.stopped_by_signal);
    EXPECT_EQ(sum.steps, 2);
    EXPECT_EQ(t.step(), 2);
    EXPECT_EQ(t.loss_history().size(), 2u);
    EXPECT_TRUE(std::isnan(sum.final_loss)) << sum.final_loss;
    EXPECT_NE(sum.last_checkpoint.find("step_00000002.h5"), std::string::npos) << sum.last_checkpoint;
    EXPECT_EQ(train::stop_requested(), 0);
    EXPECT_TRUE(logical_state(t) == before) << "a stopped step changed the parameters or moments";
    // The dropped micro-batches leave nothing behind: step 3 equals an uninterrupted one.
    const double loss = t.train_step();
    EXPECT_EQ(loss, straight.train_step());
    EXPECT_TRUE(logical_state(t) == logical_state(straight));
  }
}

// --eval-only over one batch of many micro-batches stops part-way with the loss of those done.
TEST(Checkpoint, AStopDuringAnEvaluationBatchStopsBetweenItsMicroBatches) {
  train::TrainConfig cfg = tiny_config();
  cfg.eval_only = true;
  cfg.eval_batches = 1;
  cfg.global_batch = cfg.micro_batch * 512 * world().size();
  train::Trainer t(cfg, world());
  train::TrainSummary sum;
  {
    StopAfterWorldTraffic stop(4);  // after the vote before the first micro-batch
    sum = t.run();
  }
  EXPECT_TRUE(sum.stopped_by_signal);
  EXPECT_TRUE(std::isfinite(sum.final_val_loss)) << sum.final_val_loss;
  EXPECT_EQ(train::stop_requested(), 0);
}

// A root attribute of a checkpoint file, read with HDF5 itself (rank 0's view is every rank's).
std::uint64_t u64_attribute(const std::string& path, const char* name) {
  hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  hid_t a = H5Aopen(f, name, H5P_DEFAULT);
  std::uint64_t v = 0;
  const herr_t read = H5Aread(a, H5T_NATIVE_UINT64, &v);
  H5Aclose(a);
  H5Fclose(f);
  EXPECT_GE(read, 0) << name;
  return v;
}

// A checkpoint of a step whose evaluation finished records its validation loss; resumed with
// nothing left to train, a run whose last step's evaluation never finished (it stopped during
// it, or the steps came from train_step()) evaluates then, and one that finished takes the
// recorded loss.
TEST(Checkpoint, TheLastStepsValidationLossIsRecordedOrEvaluatedOnResume) {
  train::TrainConfig cfg = tiny_config();
  cfg.steps = 2;
  cfg.save_dir = test_dir("val_loss");
  std::string path;
  {
    train::Trainer t(cfg, world());
    t.train_step();
    t.train_step();
    path = t.save_checkpoint();
  }
  auto has_val_loss = [](const std::string& file) {
    hid_t f = H5Fopen(file.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
    const htri_t has = H5Aexists(f, "val_loss");
    H5Fclose(f);
    return has > 0;
  };
  EXPECT_FALSE(has_val_loss(path));
  cfg.resume = "auto";
  double evaluated = 0;
  {
    train::Trainer t(cfg, world());
    const train::TrainSummary sum = t.run();
    EXPECT_EQ(sum.steps, 2);
    EXPECT_FALSE(sum.stopped_by_signal);
    evaluated = sum.final_val_loss;
    EXPECT_TRUE(std::isfinite(evaluated)) << evaluated;
  }
  // A whole run: its last checkpoint holds the loss it logged, which a resume reports.
  cfg.save_dir = test_dir("val_loss_whole");
  cfg.resume = "none";
  train::TrainSummary whole;
  {
    train::Trainer t(cfg, world());
    whole = t.run();
  }
  EXPECT_EQ(whole.final_val_loss, evaluated) << "the same weights, the same batches";
  ASSERT_TRUE(has_val_loss(whole.last_checkpoint));
  cfg.resume = "auto";
  train::Trainer t(cfg, world());
  EXPECT_EQ(t.run().final_val_loss, whole.final_val_loss);
}

// consumed_samples counts the sequences trained on across resumes at other global batches;
// data_position is the next sample's index at the current one.
TEST(Checkpoint, ConsumedSamplesAddUpAcrossResumesAtAnotherGlobalBatch) {
  const std::string dir = test_dir("consumed");
  train::TrainConfig cfg = tiny_config();
  cfg.save_dir = dir;
  const long g = static_cast<long>(cfg.micro_batch) * world().size();
  cfg.global_batch = g;
  {
    train::Trainer t(cfg, world());
    t.train_step();
    t.train_step();
    t.save_checkpoint();
  }
  cfg.global_batch = 2 * g;
  cfg.resume = "auto";
  train::Trainer t(cfg, world());
  t.train_step();
  const std::string path = t.save_checkpoint();
  EXPECT_EQ(u64_attribute(path, "consumed_samples"), static_cast<std::uint64_t>(2 * g + 2 * g));
  EXPECT_EQ(u64_attribute(path, "data_position"), static_cast<std::uint64_t>(3 * 2 * g));
}

TEST(Checkpoint, DifferentModelShapeIsAClearError) {
  const std::string dir = test_dir("shape");
  train::TrainConfig cfg = tiny_config();
  cfg.save_dir = dir;
  {
    train::Trainer t(cfg, world());
    t.train_step();
    t.save_checkpoint();
  }
  cfg.d_model = 64;
  cfg.resume = "auto";
  const Error e = error_of([&] { train::Trainer t(cfg, world()); });
  EXPECT_EQ(e.code(), Errc::invalid_config) << e.what();
  const std::string msg = e.what();
  EXPECT_NE(msg.find("dataset /model/"), std::string::npos) << msg;
  EXPECT_NE(msg.find("d-model=32"), std::string::npos) << msg;
  EXPECT_NE(msg.find("d-model=64"), std::string::npos) << msg;

  cfg.d_model = 32;
  cfg.resume = dir + "/no_such_file.h5";
  const Error missing = error_of([&] { train::Trainer t(cfg, world()); });
  EXPECT_EQ(missing.code(), Errc::io) << missing.what();
}

TEST(Checkpoint, AFileSomeRanksCannotSeeFailsEveryRank) {
  // As a checkpoint on one node's local disk: the other ranks must not wait for it inside
  // HDF5's collective open (they hung until the communicator's timeout).
  const std::string dir = test_dir("unseen");
  train::TrainConfig cfg = tiny_config();
  cfg.save_dir = dir;
  train::Trainer t(cfg, world());
  t.train_step();
  const std::string saved = t.save_checkpoint();
  const std::string path = world().rank() == 0 ? saved : dir + "/not_on_this_node.h5";
  const Error e = error_of([&] { t.load_checkpoint(path); });
  EXPECT_EQ(e.code(), Errc::io) << e.what();
  EXPECT_NE(std::string(e.what()).find("no checkpoint file"), std::string::npos) << e.what();
  t.load_checkpoint(saved);  // nothing was left half-done
  EXPECT_EQ(t.step(), 1);
}

TEST(Checkpoint, AnAttributeHoldingSeveralValuesIsRefused) {
  train::TrainConfig cfg = tiny_config();
  const std::string path = one_step_checkpoint(cfg, "attribute");
  if (world().rank() == 0) {
    // As another tool may write it: /model's "layers" as an array of two.
    hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    hid_t g = H5Gopen2(f, "/model", H5P_DEFAULT);
    ASSERT_GE(H5Adelete(g, "layers"), 0);
    const hsize_t two = 2;
    const std::int64_t layers[2] = {cfg.layers, cfg.layers};
    hid_t space = H5Screate_simple(1, &two, nullptr);
    hid_t a = H5Acreate2(g, "layers", H5T_STD_I64LE, space, H5P_DEFAULT, H5P_DEFAULT);
    ASSERT_GE(H5Awrite(a, H5T_NATIVE_INT64, layers), 0);
    H5Aclose(a);
    H5Sclose(space);
    H5Gclose(g);
    H5Fclose(f);
  }
  world().barrier();
  cfg.resume = path;
  const Error e = error_of([&] { train::Trainer t(cfg, world()); });
  EXPECT_EQ(e.code(), Errc::corrupt_data) << e.what();
  EXPECT_NE(std::string(e.what()).find("attribute 'layers' holds 2 values"), std::string::npos) << e.what();
}

TEST(Checkpoint, ANegativeStepIsRefused) {
  train::TrainConfig cfg = tiny_config();
  const std::string path = one_step_checkpoint(cfg, "negative_step");
  cfg.resume = path;
  for (const char* object : {"/", "/optimizer"}) {
    rewrite_attribute(path, object, "step", -3);
    const Error e = error_of([&] { train::Trainer t(cfg, world()); });
    EXPECT_EQ(e.code(), Errc::corrupt_data) << e.what();
    EXPECT_NE(std::string(e.what()).find("negative step (-3)"), std::string::npos) << e.what();
    world().barrier();
    rewrite_attribute(path, object, "step", 1);  // back, for the next one's turn
  }
}

TEST(Checkpoint, ADatasetThatIsALinkIsRefused) {
  train::TrainConfig cfg = tiny_config();
  const std::string path = one_step_checkpoint(cfg, "link");
  if (world().rank() == 0) {  // wpe replaced by a link to a dataset of the same shape
    hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    ASSERT_GE(H5Ldelete(f, "/model/wpe", H5P_DEFAULT), 0);
    ASSERT_GE(H5Lcreate_soft("/optimizer/wpe/exp_avg", f, "/model/wpe", H5P_DEFAULT, H5P_DEFAULT), 0);
    H5Fclose(f);
    const Error e = error_of([&] { ckpt::CheckpointFile file(path); });  // the tools' view
    EXPECT_EQ(e.code(), Errc::corrupt_data) << e.what();
    EXPECT_NE(std::string(e.what()).find("/model/wpe is a soft or external link"), std::string::npos) << e.what();
  }
  world().barrier();
  cfg.resume = path;
  const Error e = error_of([&] { train::Trainer t(cfg, world()); });
  EXPECT_EQ(e.code(), Errc::corrupt_data) << e.what();
  EXPECT_NE(std::string(e.what()).find("/model/wpe is a soft or external link"), std::string::npos) << e.what();
}

TEST(Checkpoint, KeepCountsThisRunsCheckpointsNotAnEarlierRunsLaterOnes) {
  // An earlier run's step 100 in the directory, and this run starting over beside it: keep 2
  // keeps this run's last two and leaves the other run's file alone (it used to count as one
  // of the two newest, so each save deleted this run's previous one).
  const std::string dir = test_dir("keep");
  const std::string other = dir + "/" + ckpt::checkpoint_name(100);
  if (world().rank() == 0) std::ofstream(other) << "an earlier run's";
  world().barrier();
  train::TrainConfig cfg = tiny_config();
  cfg.save_dir = dir;
  cfg.keep = 2;
  train::Trainer t(cfg, world());
  for (int k = 0; k < 3; ++k) {
    t.train_step();
    t.save_checkpoint();
  }
  EXPECT_FALSE(fs::exists(dir + "/" + ckpt::checkpoint_name(1)));
  EXPECT_TRUE(fs::exists(dir + "/" + ckpt::checkpoint_name(2)));
  EXPECT_TRUE(fs::exists(dir + "/" + ckpt::checkpoint_name(3)));
  EXPECT_TRUE(fs::exists(other));
}
