#pragma once
#include "dtrain/device/device.hpp"

namespace dtrain::train {
// Best-of-N GEMM rate (FLOP/s) of this rank on `dev` for fp32 storage, in the device's GEMM
// precision (fp32 on the CPU; TF32, bf16 or fp16 tensor cores on a GPU), measured in about
// 0.1 s with square matrices (512 on the CPU, 4096 on a GPU): the denominator of the MFU
// estimate.
double measure_peak_flops(Device& dev);
}  // namespace dtrain::train
