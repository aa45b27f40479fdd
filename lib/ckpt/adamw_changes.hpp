#pragma once
// A loaded checkpoint's AdamW settings against the optimiser's: loading moments under other
// settings is allowed (a fine-tune with another weight decay, say), but the updates then
// differ from the run that wrote them, so the loaders say so.
#include <string>

#include "dtrain/ckpt/format.hpp"
#include "dtrain/optim/optimizer.hpp"

namespace dtrain::ckpt {

// The settings of `ours` that differ from those the file was written with, as
// "beta1 0.5 -> 0.9, weight_decay 0 -> 0.1"; empty when none differs (or the file has none).
std::string adamw_changes(const CheckpointInfo& info, const optim::AdamWConfig& ours);

}  // namespace dtrain::ckpt
