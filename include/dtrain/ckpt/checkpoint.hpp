#pragma once
// HDF5 checkpoints (docs/checkpoint-format.md): DIR/step_<8 digits>.h5 plus DIR/latest.
//
// Every logical tensor is stored whole under /model/<global name> with its logical shape,
// its AdamW moments under /optimizer/<name>/exp_avg and exp_avg_sq, whatever the layout that
// wrote it. Each rank writes exactly the pieces it owns (a share of the replicated
// parameters, its ZeRO piece of the moments, its tensor-parallel slice, its pipeline
// stage's tensors; a tied wte held by two stages is written by the first) with collective
// MPI-IO, and reads back the pieces the current layout needs, so any layout loads any file.
// No rank gathers what it does not hold: a ZeRO-3 rank writes and reads its own parameter
// pieces, and under mixed precision the parameters written and read are the optimiser's
// fp32 master weights (this rank's segments), not the rounded arena.
// A file is written under a temporary name and renamed only when complete.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "dtrain/ckpt/format.hpp"
#include "dtrain/comm/process_grid.hpp"
#include "dtrain/export.hpp"
#include "dtrain/nn/gpt.hpp"
#include "dtrain/nn/parameters.hpp"
#include "dtrain/optim/optimizer.hpp"

namespace dtrain::ckpt {

class DTRAIN_API Checkpointer {
 public:
  // Plans which pieces this rank reads and writes (collective over grid.world(): gathers
  // the stages' tensor names over grid.pp() and agrees on the number of I/O calls per
  // dataset). zero_stage: at 1-3 the optimiser's segments are this rank's ZeRO piece of
  // the arena (else it holds every moment, replicated over dp); at 3 the arena holds only
  // those segments' parameters. Master weights, if the optimiser uses them, must be set up
  // before (and kept for the Checkpointer's lifetime). model: the built-in GPT's
  // configuration, whose tensors params must hold over the pipeline stages, or not_a_gpt()
  // for any other model (Errc::invalid_argument otherwise: the file would describe a GPT it
  // does not hold, and `dtrain-ckpt verify` refuse it).
  // The objects are borrowed for the Checkpointer's lifetime.
  Checkpointer(ProcessGrid& grid, ParameterStore& params, optim::AdamW& optimizer,
               int zero_stage, const GptConfig& model);
  // The former "optimizer sharded" flag: a ZeRO-3 caller passing it would be taken for
  // stage 1 and read parameters its arena does not hold.
  Checkpointer(ProcessGrid&, ParameterStore&, optim::AdamW&, bool, const GptConfig&) = delete;
  ~Checkpointer();
  Checkpointer(const Checkpointer&) = delete;
  Checkpointer& operator=(const Checkpointer&) = delete;

  // Collective. Creates dir and claims it for this process (world rank 0 holds an
  // exclusive lock on dir/.dtrain-lock until the Checkpointer is destroyed or saves into
  // another directory): a directory another process has claimed throws Error(Errc::io) on
  // every rank, naming the holder. save() claims its directory itself; a run calls this at
  // start-up to fail before training rather than at its first save.
  void claim(const std::string& dir);

  // Local: throws Error(Errc::io) when the MPI library could not open the
  // checkpoint files of dir from `ranks` ranks (Open MPI's path limit, mpi_io_path.hpp);
  // claim() and save() check it before making the directory.
  static void check_directory_path(const std::string& dir, int ranks);

  // Collective. Claims dir (as claim()), writes dir/step_<info.step>.h5 atomically
  // (temporary name, flush, close, rename), points dir/latest at it and deletes all but the
  // newest `keep` checkpoints (at least 1; INT_MAX keeps them all). Returns the path written.
  // Errors throw AgreedError on every rank: Errc::invalid_argument for what a load would
  // refuse (a step outside [0, 2^62], a loss scale not positive and finite, keep < 1, a NaN
  // in the parameters or moments), found before anything is written; Errc::io for the file
  // system's (Errc::out_of_memory for the host's) failures, the earlier checkpoints intact.
  std::string save(const std::string& dir, const CheckpointInfo& info, int keep);
  // Collective. Writes dir/latest anew, naming the checkpoint it names (nothing where it is
  // missing): a run stopped by a signal with its newest checkpoint already written shows
  // its job script, which tells by `latest` whether the ranks stopped after a save, that they
  // did (jobscripts/README.md). Best effort: a failure is a warning, not an error.
  void republish_latest(const std::string& dir);

  // Collective. Loads path into the parameters and optimiser (moments and step count)
  // after checking the format, the model configuration and every dataset's shape and
  // checksum; a mismatch throws Error(Errc::corrupt_data) naming the file and dataset
  // (Errc::invalid_config when the model configuration differs). Returns the run position.
  // With master weights the masters are loaded and the parameters of this rank's segments
  // set to them rounded; under ZeRO 1/2 the caller then shares the pieces, as after a step.
  CheckpointInfo load(const std::string& path);

  // The optimiser's AdamW settings that differ from those a loaded file was written with, as
  // "beta1 0.5 -> 0.9, weight_decay 0 -> 0.1"; empty when none does (or the file has none).
  // Loading moments under other settings is allowed (a fine-tune with another weight decay),
  // but the updates then differ from the run that wrote them: callers say so.
  std::string adamw_changes(const CheckpointInfo& loaded) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The model configuration of a checkpoint of any model other than the built-in GPT: every
// size 0 (its /model attributes record zeros; docs/checkpoint-format.md).
DTRAIN_API GptConfig not_a_gpt();

// "step_00001234.h5"
DTRAIN_API std::string checkpoint_name(long step);

// "[768, 50304]": a tensor shape as error messages print it.
DTRAIN_API std::string shape_text(const std::vector<std::uint64_t>& dims);

// Collective over world: what to resume from, decided by world rank 0 and broadcast.
//   "none"  -> "" (start fresh)
//   "auto"  -> save_dir/latest when present, else the newest complete step_*.h5 in save_dir,
//              else "" (temporary *.tmp files are never taken)
//   a directory -> as "auto" on it, but finding nothing is an error
//   a file  -> that file (Errc::io when it does not exist)
DTRAIN_API std::string resolve_resume(Communicator& world, const std::string& resume,
                                      const std::string& save_dir);

}  // namespace dtrain::ckpt
