#pragma once
// What a checkpoint file's root group says of itself (docs/checkpoint-format.md): its format,
// and the position of the run that wrote it.
#include <cstdint>
#include <limits>
#include <string>

#include "dtrain/export.hpp"

namespace dtrain::ckpt {

inline constexpr const char* kFormatName = "dtrain-checkpoint";
inline constexpr int kFormatVersion = 1;

// The run's position, stored as attributes of the file's root group.
struct DTRAIN_API CheckpointInfo {
  long step = 0;                        // optimiser steps taken
  std::uint64_t consumed_samples = 0;   // training sequences consumed (across resumes)
  std::uint64_t data_position = 0;      // global index of the next training sample
  std::string run_config;               // "key = value" lines of the run (informative)
  double loss_scale = 0;                // fp16 dynamic loss scale (0: the run has none)
  long loss_scale_clean_steps = 0;      // clean steps in a row toward its next growth
  long loss_scale_skipped_steps = 0;    // steps skipped for overflow, across resumes
  // /optimizer's AdamW settings the file was written with (NaN: absent, as in a file another
  // tool wrote). Read by a load; a save writes the optimiser's own.
  double beta1 = std::numeric_limits<double>::quiet_NaN();
  double beta2 = std::numeric_limits<double>::quiet_NaN();
  double eps = std::numeric_limits<double>::quiet_NaN();
  double weight_decay = std::numeric_limits<double>::quiet_NaN();
  std::uint64_t data_fingerprint = 0;   // the data's content hash (TokenSource::fingerprint; 0: none)
  // The validation loss at `step`, where that step's evaluation finished (NaN: none was).
  double val_loss = std::numeric_limits<double>::quiet_NaN();
};

}  // namespace dtrain::ckpt
