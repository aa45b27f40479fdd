#pragma once
// Shared by the Trainer tests: a tiny, quiet training configuration and a loss-curve runner.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "dtrain/comm/communicator.hpp"
#include "dtrain/train/trainer.hpp"

namespace dtrain::test {

// Small enough for many runs per test at 4 oversubscribed ranks; no logging, no evaluation.
// Mixed precision stores the parameters in 16 bits, which --param-storage auto would not
// choose for so small a model: the tests cover that path, and compare it with the fp32
// arena where it matters.
inline train::TrainConfig tiny_train_config() {
  train::TrainConfig c;
  c.param_storage = "16bit";
  c.layers = 2;
  c.heads = 2;
  c.d_model = 32;
  c.seq_len = 16;
  c.vocab = 128;
  c.micro_batch = 2;
  c.steps = 20;
  c.warmup_steps = 5;
  c.lr = 3e-3;
  c.eval_every = 0;
  c.eval_batches = 1;
  c.log_every = 1000;
  return c;
}

// A fresh, empty directory `prefix_name_np<world size>` made by rank 0 (the np runs of one
// test may overlap), seen by every rank of comm when this returns.
inline std::string fresh_dir(Communicator& comm, const std::string& prefix,
                             const std::string& name, int world_size) {
  const std::string dir = prefix + "_" + name + "_np" + std::to_string(world_size);
  if (comm.rank() == 0) {
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
  }
  comm.barrier();
  return dir;
}

// The loss history of cfg.steps steps of cfg on comm.
inline std::vector<double> train_losses(const train::TrainConfig& cfg, Communicator& comm) {
  train::Trainer t(cfg, comm);
  for (long s = 0; s < cfg.steps; ++s) t.train_step();
  return t.loss_history();
}

// What a layout must reproduce of one rank's run: each step's loss and gradient norm. AdamW
// hardly sees a uniform scale of the gradients (a sum where an average belongs, an average
// taken twice): the losses stay within about 1e-7, the norms do not.
struct Curves {
  std::vector<double> loss, grad_norm;
};

inline Curves train_curves(const train::TrainConfig& cfg, Communicator& comm) {
  train::Trainer t(cfg, comm);
  Curves c;
  for (long s = 0; s < cfg.steps; ++s) {
    t.train_step();
    c.grad_norm.push_back(t.last_grad_norm());
  }
  c.loss = t.loss_history();
  return c;
}

// The same run on each rank of comm alone (gradient accumulation over the whole global batch).
inline Curves single_rank_curves(const train::TrainConfig& cfg, Communicator& comm) {
  Communicator self = comm.split(comm.rank(), 0, "self");
  return train_curves(cfg, self);
}

// Every step's loss within rel of the reference's, and its gradient norm within rel_norm
// (where negative: rel, at least 1e-4); a NaN fails, but an fp16 step skipped in both, whose
// norm is NaN. The norm follows a run's drift more closely than the loss: with TF32 GEMMs
// (the emulated GPU) a split run's norms were 1.8e-5 off by step 20 where its losses agreed
// within 1e-5. Under bf16/fp16 the norm is of the gradients rounded to 16 bits, where a
// last-bit difference of the fp32 sum may round an element to its neighbour, 2^-8 away for
// bf16: the norms differed by up to 3.1e-4, the losses by 8e-6. A scale error (a sum where
// an average belongs) is a gap of 1 or more.
inline void expect_curves_close(const Curves& got, const Curves& want, double rel, const std::string& what = "",
                                double rel_norm = -1) {
  if (rel_norm < 0) rel_norm = std::max(rel, 1e-4);
  ASSERT_EQ(got.loss.size(), want.loss.size()) << what;
  ASSERT_EQ(got.grad_norm.size(), want.grad_norm.size()) << what;
  for (std::size_t i = 0; i < want.loss.size(); ++i) {
    EXPECT_LE(std::fabs(got.loss[i] - want.loss[i]), rel * std::fabs(want.loss[i]))
        << what << ": step " << i + 1 << " loss " << got.loss[i] << " against " << want.loss[i];
    if (std::isnan(got.grad_norm[i]) && std::isnan(want.grad_norm[i])) continue;
    EXPECT_LE(std::fabs(got.grad_norm[i] - want.grad_norm[i]), rel_norm * std::fabs(want.grad_norm[i]))
        << what << ": step " << i + 1 << " gradient norm " << got.grad_norm[i] << " against " << want.grad_norm[i];
  }
}

}  // namespace dtrain::test
