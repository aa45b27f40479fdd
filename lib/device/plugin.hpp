#pragma once
// The C entry points a CUDA plugin (libdtrain_cuda.so) exports. The core loads the plugin with
// dlopen only when a device is asked for, so processes that never touch CUDA never pay for
// loading cuBLAS. Bump kCudaPluginAbi when these signatures or the Device vtable change.
#include "dtrain/device/device.hpp"

namespace dtrain {
constexpr int kCudaPluginAbi = 18;  // 2: Device::discard; 3: 16-bit casts, any_nonfinite;
                                   // 4: Device::set_gemm_operand_format,
                                   //    discard_releases_memory, sum_squares_runs;
                                   // 5: Device::allocate_arena, restore, trim_memory;
                                   // 6: trim_memory(Trim);
                                   // 7: attention_backward(out), attention_saved_floats;
                                   // 8: GradWrite of linear/gelu/attention_backward
                                   // 9: attention_forward(workspace)
                                   // 10: attention_decode
                                   // 11: gemm_operand_format, 16-bit inputs of the
                                   //     linear, GELU and attention ops,
                                   //     crossentropy_backward_16bit
                                   // 12: out16 of layernorm_forward and
                                   //     attention_forward
                                   // 13: adamw_ranges
                                   // 14: a null fp32 output beside out16
                                   // 15: linear_forward(out16)
                                   // 16: gelu_forward_16bit,
                                   //     crossentropy_forward_16bit,
                                   //     crossentropy_backward_16bit(logits16)
                                   // 17: linear_forward_residual, gelu_backward_rounded
                                   // 18: attention_backward_rounded
}  // namespace dtrain

extern "C" {
// Returns kCudaPluginAbi of the plugin's build.
typedef int (*dtrain_cuda_plugin_abi_fn)(void);
// Number of usable GPUs; <= 0 when there is no driver or device (e.g. cudaGetDeviceCount
// failing with error 35). Must never abort the process. msg gets a reason when it is <= 0.
typedef int (*dtrain_cuda_device_count_fn)(char* msg, unsigned long msg_len);
// The process-wide device for the GPU ordinal (owned by the plugin), or null.
typedef dtrain::Device* (*dtrain_cuda_get_device_fn)(int ordinal);
}

#define DTRAIN_CUDA_SYM_ABI "dtrain_cuda_plugin_abi"
#define DTRAIN_CUDA_SYM_COUNT "dtrain_cuda_device_count"
#define DTRAIN_CUDA_SYM_GET "dtrain_cuda_get_device"
