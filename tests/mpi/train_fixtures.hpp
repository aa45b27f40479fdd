#pragma once
// Shared by the Trainer tests: a tiny, quiet training configuration and a loss-curve runner.
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

}  // namespace dtrain::test
