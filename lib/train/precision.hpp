#pragma once
// The trainer's mixed-precision pieces (docs/mixed-precision.md): the 16-bit format of a
// --precision, the loss scaler it needs, and the per-step gradient handling over this
// rank's optimiser segments (rounding after the reduction, the agreed overflow check).
#include <string>
#include <vector>

#include "dtrain/comm/communicator.hpp"
#include "dtrain/core/dtype.hpp"
#include "dtrain/device/device.hpp"
#include "dtrain/optim/loss_scaler.hpp"
#include "dtrain/optim/optimizer.hpp"
#include "dtrain/train/config.hpp"

namespace dtrain::train {

// "fp32" -> f32, "bf16" -> bf16, "fp16" -> f16; Error(Errc::invalid_config) otherwise.
DType precision_format(const std::string& precision);

// fp16: dynamic scaling from the config; fp32 and bf16 (fp32's exponent range): disabled.
optim::LossScaler make_loss_scaler(const TrainConfig& cfg);

// buf's segments rounded in place to fmt (bf16 or f16).
void round_segments(Device& dev, float* buf, const std::vector<optim::Segment>& segments,
                    DType fmt);

// Whether any element of buf's segments is inf or NaN (this rank's view only).
bool segments_nonfinite(Device& dev, const float* buf, const std::vector<optim::Segment>& segments);

// Collective over comm (one all-reduce, max): true when any rank's flag is set, so every
// rank takes the same skip-or-apply decision.
bool agree_overflow(Communicator& comm, bool local_overflow);

}  // namespace dtrain::train
