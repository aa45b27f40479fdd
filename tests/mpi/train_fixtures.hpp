#pragma once
// Shared by the Trainer tests: a tiny, quiet training configuration and a loss-curve runner.
#include <vector>

#include "dtrain/comm/communicator.hpp"
#include "dtrain/train/trainer.hpp"

namespace dtrain::test {

// Small enough for many runs per test at 4 oversubscribed ranks; no logging, no evaluation.
inline train::TrainConfig tiny_train_config() {
  train::TrainConfig c;
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

// The loss history of cfg.steps steps of cfg on comm.
inline std::vector<double> train_losses(const train::TrainConfig& cfg, Communicator& comm) {
  train::Trainer t(cfg, comm);
  for (long s = 0; s < cfg.steps; ++s) t.train_step();
  return t.loss_history();
}

}  // namespace dtrain::test
