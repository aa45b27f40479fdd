#include "checkpoints.hpp"

#include <algorithm>
#include <climits>
#include <filesystem>
#include <new>

#include "dtrain/ckpt/file.hpp"
#include "dtrain/core/error.hpp"
#include "dtrain/core/log.hpp"
#include "agree.hpp"
#include "guard.hpp"

namespace dtrain::capi {

Checkpoints::Checkpoints(Communicator& dp, ParameterStore& params, StepEngine& engine, Owner owner,
                         const GptConfig* gpt)
    : own_grid_(std::make_unique<ProcessGrid>(dp, GridShape{})),
      grid_(*own_grid_),
      params_(params),
      engine_(engine),
      owner_(owner),
      checkpointer_(grid_, params, engine.optimizer(), engine.zero_stage(),
                    owner == Owner::gpt ? *gpt : ckpt::not_a_gpt()) {}

Checkpoints::Checkpoints(ProcessGrid& layout, ParameterStore& params, StepEngine& engine, Owner owner,
                         const GptConfig* gpt)
    : grid_(layout),
      params_(params),
      engine_(engine),
      owner_(owner),
      checkpointer_(grid_, params, engine.optimizer(), engine.zero_stage(),
                    owner == Owner::gpt ? *gpt : ckpt::not_a_gpt()) {}

std::string Checkpoints::save(const std::string& dir, int keep) {
  ckpt::CheckpointInfo info;
  info.step = engine_.steps();
  if (engine_.scaler().enabled()) {  // fp16 goes on from this scale after a load
    info.loss_scale = engine_.scaler().scale();
    info.loss_scale_clean_steps = engine_.scaler().clean_steps_in_a_row();
    info.loss_scale_skipped_steps = engine_.scaler().skipped_steps();
  }
  return checkpointer_.save(dir, info, keep == 0 ? INT_MAX : keep);
}

std::string Checkpoints::resolve(const std::string& source) {
  Communicator& comm = grid_.world();
  // "auto" on a directory gives its newest checkpoint; on anything else "".
  std::string path = ckpt::resolve_resume(comm, "auto", source);
  if (!path.empty()) return path;
  on_root_for_all(comm, [&] {
    std::error_code ec;
    if (std::filesystem::is_directory(source, ec))
      fail(DT_ERR_IO, "no checkpoint in directory '" + source + "'");
    if (!std::filesystem::is_regular_file(source, ec))
      fail(DT_ERR_IO, "no checkpoint file or directory '" + source + "'");
  });
  return source;
}

void Checkpoints::check_tensors(const std::string& path) {
  // One rank of each pipeline stage checks the stage's tensors (their whole shapes).
  const bool checks = grid_.dp_rank() == 0 && grid_.tp_rank() == 0;
  agreed_checks(grid_.world(), true, [&] {
    if (!checks) return;
    const ckpt::CheckpointFile file(path);
    for (const ParamInfo& p : params_) {
      const ckpt::DatasetInfo* d = file.find("/model/" + p.name);
      if (!d) fail(DT_ERR_INVALID_CONFIG, "checkpoint '" + path + "' has no tensor '" + p.name + "'");
      const std::vector<std::uint64_t> want(p.shape.begin(), p.shape.end());
      if (d->shape != want)
        fail(DT_ERR_INVALID_CONFIG, "tensor '" + p.name + "' has shape " + ckpt::shape_text(d->shape) +
                                        " in checkpoint '" + path + "' but " + ckpt::shape_text(want) + " here");
    }
    if (owner_ == Owner::byom) return;
    const std::string model = "/model/";
    for (const ckpt::DatasetInfo& d : file.datasets()) {
      if (d.path.compare(0, model.size(), model) != 0) continue;
      const std::string name = d.path.substr(model.size());
      const auto named = [&](const ParamInfo& p) { return p.name == name; };
      if (std::none_of(params_.begin(), params_.end(), named))
        fail(DT_ERR_INVALID_CONFIG, "checkpoint '" + path + "' holds tensor '" + name +
                                        "', which this model has not: it was written for another configuration");
    }
  });
}

void Checkpoints::load(const std::string& source) {
  const std::string path = resolve(source);
  if (owner_ != Owner::gpt) check_tensors(path);
  const ckpt::CheckpointInfo info = checkpointer_.load(path);
  const std::string changed = checkpointer_.adamw_changes(info);
  if (!changed.empty()) {
    DTRAIN_LOG(warn, "checkpoint " << path << " was written with other AdamW settings (" << changed
                     << "): the updates from here on differ from those of the model that wrote it");
  }
  // Mixed precision: the loaded masters, rounded, are this rank's parameter pieces.
  if (engine_.optimizer().has_master_weights()) engine_.share_parameters();
  // A scaling model goes on from the saved loss scale; from a file without one (another
  // precision, a byom that did not scale) it starts again as a new one would, so that a load
  // gives the same state whatever came before it.
  optim::LossScaler& scaler = engine_.scaler();
  if (scaler.enabled() && info.loss_scale > 0)
    scaler.set_scale(info.loss_scale, info.loss_scale_clean_steps, info.loss_scale_skipped_steps);
  else if (scaler.enabled())
    scaler.set_scale(scaler.config().initial_scale, 0);
}

std::string find_checkpoint(Communicator& comm, const std::string& dir) {
  // A missing directory is a fresh start; a file there is a mistake, not one.
  on_root_for_all(comm, [&] {
    std::error_code ec;
    const auto status = std::filesystem::status(dir, ec);
    if (std::filesystem::exists(status) && !std::filesystem::is_directory(status))
      fail(DT_ERR_IO, "'" + dir + "' is not a directory, where checkpoints are looked for");
  });
  return ckpt::resolve_resume(comm, "auto", dir);
}

}  // namespace dtrain::capi
