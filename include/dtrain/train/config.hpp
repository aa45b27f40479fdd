#pragma once
// Everything a training run is configured by. The dtrain-gpt app fills it from the command
// line / INI file (docs/dtrain-gpt.md); the C ABI fills it from its config struct.
#include <cstdint>
#include <string>

#include "dtrain/export.hpp"

namespace dtrain::train {

struct DTRAIN_API TrainConfig {
  // model
  int layers = 2;
  int heads = 4;
  int d_model = 128;
  int seq_len = 128;
  int vocab = 256;
  bool tie_embeddings = true;
  // parallel
  int tp = 1;
  int pp = 1;
  int dp = 0;  // 0: world size / (tp * pp)
  int zero = 0;
  std::string schedule = "1f1b";
  int virtual_stages = 1;
  std::string pipeline_layers;  // "3,2,2,1": layers per pipeline stage; empty: balanced
  bool sequence_parallel = false;
  int micro_batch = 8;
  double bucket_mb = 25;  // data-parallel gradient bucket size (MiB)
  long global_batch = 0;  // 0: micro_batch * dp (one micro-step per optimiser step)
  // optimiser
  double lr = 3e-3;
  double min_lr = 3e-4;
  long warmup_steps = 20;
  double weight_decay = 0.1;
  double clip_grad = 1.0;  // 0 disables clipping
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  // data
  // Token files: paths and glob patterns separated by commas (expand_data_files in data.hpp).
  std::string data;      // empty: the built-in synthetic corpus
  std::string val_data;  // validation files; empty: the last val_fraction of data's tokens
  double val_fraction = 0.1;
  // run
  long steps = 300;
  std::uint64_t seed = 1337;
  std::string device = "auto";
  std::string precision = "fp32";  // fp32, bf16 or fp16 (docs/mixed-precision.md)
  // fp16 dynamic loss scaling: initial scale, clean steps before it doubles, and the
  // minimum (an overflow there stops training with an error).
  double loss_scale = 65536;
  long loss_scale_window = 2000;
  double min_loss_scale = 1;
  bool deterministic = false;
  // Where mixed precision keeps the parameters between their uses (docs/mixed-precision.md):
  // "16bit" as 16-bit words, widened unit by unit around each pass (where the device can hand
  // memory back: the CPU, a GPU with virtual memory management), "fp32" in the whole fp32
  // arena (the same values, faster, 2 more bytes a parameter), "auto" fp32 where the arena
  // takes at most an eighth of the free device memory on every rank, 16-bit otherwise.
  std::string param_storage = "auto";
  // Mixed precision keeps a block's saved activations in 16 bits (a conversion pass after
  // its forward and before its backward); true keeps them in fp32 instead.
  bool fp32_activations = false;
  // Keep only each block's output between forward and backward and recompute the rest in
  // backward (GptConfig::recompute): less activation memory for about a fifth more compute.
  bool recompute = false;
  // checkpoints
  std::string save_dir;      // empty: no checkpoints are written
  long save_every = 0;       // 0: only at the end (and on SIGTERM/SIGUSR1)
  std::string resume = "auto";  // auto, none or a checkpoint file/directory
  int keep = 3;              // newest checkpoints kept in save_dir
  // The weights a fresh run starts from: a safetensors file (Hugging Face's GPT-2, a
  // dtrain-ckpt export) or a dtrain checkpoint's /model tensors; empty: drawn from the seed.
  // A resumed run takes the checkpoint's weights instead.
  std::string init_from;
  // output
  long log_every = 10;
  std::string metrics;
  bool eval_only = false;
  long eval_every = 100;  // 0: only at the end
  int eval_batches = 4;

  // Throws Error(Errc::invalid_config) naming the offending option. Parallel features whose
  // implementation has not landed are rejected here with a clear message.
  void validate(int world_size) const;
  int resolved_dp(int world_size) const;
  // The options as "key = value" lines (stored in checkpoints).
  std::string to_ini() const;
  // to_ini() and the settings that steer the run around the training itself (device,
  // checkpoints, evaluation, output, the optimiser's constants): every setting there is.
  std::string all_settings_ini() const;
  int accum_steps(int world_size) const;
};

}  // namespace dtrain::train
