#pragma once
// The bf16 storage type, as far as lib/device/cuda uses it: 16 bits, and the format tag of the warp matrix products (replaced/warp_mma.cuh)
// (the kernels encode and decode the bits themselves, device/half_bits.hpp).
struct __nv_bfloat16 {
  unsigned short bits;
};
