#pragma once
#include "dtrain/device/device.hpp"

namespace dtrain::train {
// Best-of-N FP32 GEMM rate (FLOP/s) of this rank on `dev`, measured in about 0.1 s with
// square 512 matrices: the denominator of the MFU estimate.
double measure_peak_flops(Device& dev);
}  // namespace dtrain::train
