// The Checkpointer used directly, as a C++ program with its own model does: what a load would
// refuse is refused by save() before anything is written (the earlier checkpoint and `latest`
// stay as they were), and a GPT configuration the parameters are not is refused at set-up.
#include <gtest/gtest.h>

#include <climits>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>

#include "dtrain/ckpt/checkpoint.hpp"
#include "dtrain/comm/process_grid.hpp"
#include "dtrain/core/error.hpp"
#include "dtrain/device/device.hpp"
#include "dtrain/nn/parameters.hpp"
#include "dtrain/optim/optimizer.hpp"
#include "dtrain/parallel/zero.hpp"
#include "test_support.hpp"
#include "train_fixtures.hpp"

using namespace dtrain;
using dtrain::test::world;

namespace {

// A linear layer of one's own, replicated on every rank.
struct OwnModel {
  ProcessGrid grid{world(), GridShape{}};
  ParameterStore params{cpu_device()};
  std::unique_ptr<optim::AdamW> optimizer;
  OwnModel() {
    params.add("lin.weight", {3, 4}, true);
    params.add("lin.bias", {3}, false);
    params.allocate();
    params.init_normal(params[0], 7, 0.0f, 0.02f);
    params.init_constant(params[1], 0.5f);
    optimizer = std::make_unique<optim::AdamW>(cpu_device(), parallel::parameter_segments(params),
                                               params.numel(), optim::AdamWConfig{});
  }
};

// The code of the AgreedError fn throws on every rank (Errc::internal where it throws none).
Errc agreed_code(const std::function<void()>& fn) {
  Errc code = Errc::internal;
  int agreed = 0;
  try {
    fn();
  } catch (const AgreedError& e) {
    code = e.code();
    agreed = 1;
  }
  world().all_reduce(&agreed, &agreed, 1, DType::i32, ReduceOp::min);
  EXPECT_EQ(agreed, 1) << "some rank did not throw AgreedError";
  return code;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

}  // namespace

TEST(Checkpointer, SaveRefusesWhatALoadWouldRefuseBeforeWritingAnything) {
  OwnModel m;
  ckpt::Checkpointer ck(m.grid, m.params, *m.optimizer, 0, ckpt::not_a_gpt());
  const std::string dir = test::fresh_dir(world(), "checkpointer", "refusals", world().size());
  ckpt::CheckpointInfo info;
  info.step = 2;
  const std::string good = ck.save(dir, info, 3);
  const std::string latest = read_file(dir + "/latest");

  const auto refused = [&](const ckpt::CheckpointInfo& bad, int keep, const std::string& what) {
    EXPECT_EQ(agreed_code([&] { ck.save(dir, bad, keep); }), Errc::invalid_argument) << what;
    std::size_t files = 0;
    for (const auto& e : std::filesystem::directory_iterator(dir))
      files += e.path().extension() == ".h5" || e.path().extension() == ".tmp";
    EXPECT_EQ(files, 1u) << what << ": something was written";
    EXPECT_EQ(read_file(dir + "/latest"), latest) << what;
  };
  ckpt::CheckpointInfo bad = info;
  bad.step = -5;  // was written as step_-0000005.h5, named by `latest`, refused by every resume
  refused(bad, 3, "negative step");
  bad.step = (1L << 62) + 1;
  refused(bad, 3, "step past 2^62");
  bad = info;
  bad.loss_scale = std::nan("");
  refused(bad, 3, "NaN loss scale");
  bad = info;
  bad.loss_scale = 1024;
  bad.loss_scale_clean_steps = -1;
  refused(bad, 3, "negative clean steps");
  refused(info, 0, "keep 0");
  m.optimizer->set_steps_taken(-1);
  refused(info, 3, "negative optimiser step count");
  m.optimizer->set_steps_taken(0);

  info.step = 3;  // and the Checkpointer still saves
  EXPECT_EQ(ck.save(dir, info, 3), dir + "/" + ckpt::checkpoint_name(3));
  EXPECT_TRUE(std::filesystem::exists(good));
}

// GptConfig{} (a 4-layer GPT) for a model of one's own wrote files that claim a GPT, which
// `dtrain-ckpt verify` then refused; a tied/untied mismatch likewise.
TEST(Checkpointer, AGptConfigThatIsNotTheModelIsRefused) {
  OwnModel m;
  EXPECT_EQ(agreed_code([&] {
              try {
                ckpt::Checkpointer ck(m.grid, m.params, *m.optimizer, 0, GptConfig{});
              } catch (const Error& e) {  // local, but the same on every rank: made agreed here
                EXPECT_NE(std::string(e.what()).find("not_a_gpt"), std::string::npos) << e.what();
                throw AgreedError(e.code(), e.what());
              }
            }),
            Errc::invalid_argument);
  ckpt::Checkpointer fine(m.grid, m.params, *m.optimizer, 0, ckpt::not_a_gpt());
}
