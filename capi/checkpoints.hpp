#pragma once
// HDF5 checkpoints of a byom or built-in model through the public lib/ckpt API: the dp group
// of the handle becomes the world of a tp = pp = 1 process grid for the Checkpointer, or the
// grid of a split model or byom is used.
#include <memory>
#include <optional>
#include <string>

#include "dtrain/ckpt/checkpoint.hpp"
#include "dtrain/comm/process_grid.hpp"
#include "step_engine.hpp"

namespace dtrain::capi {

class Checkpoints {
 public:
  // What a load checks the file against: a GPT's configuration (by the checkpoint layer);
  // an MLP's tensors, by name and shape, none missing and none more (another configuration);
  // a byom's, by name and shape, where the file may hold more (a program may register a part).
  enum class Owner { gpt, mlp, byom };
  // Collective over dp. gpt: the GPT's configuration, for Owner::gpt alone. Every argument is
  // borrowed for the object's lifetime.
  Checkpoints(Communicator& dp, ParameterStore& params, StepEngine& engine, Owner owner, const GptConfig* gpt);
  // The same laid out over `layout` (its TP, PP and DP groups; borrowed). Collective over its
  // world.
  Checkpoints(ProcessGrid& layout, ParameterStore& params, StepEngine& engine, Owner owner, const GptConfig* gpt);
  Checkpoints(const Checkpoints&) = delete;
  Checkpoints& operator=(const Checkpoints&) = delete;

  // Collective. Writes dir/step_<steps>.h5; keep 0 keeps every checkpoint. Returns the path.
  std::string save(const std::string& dir, int keep);
  // Collective. source: a file, or a directory whose newest checkpoint is loaded.
  void load(const std::string& source);

 private:
  std::string resolve(const std::string& source);
  void check_tensors(const std::string& path);

  std::unique_ptr<ProcessGrid> own_grid_;  // the dp-only layout, made here
  ProcessGrid& grid_;
  ParameterStore& params_;
  StepEngine& engine_;
  Owner owner_;
  ckpt::Checkpointer checkpointer_;
};

// Collective over comm: the newest complete checkpoint in dir ("" when none).
std::string find_checkpoint(Communicator& comm, const std::string& dir);

}  // namespace dtrain::capi
