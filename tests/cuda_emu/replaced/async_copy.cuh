#pragma once
// The CUDA emulator's lib/device/cuda/async_copy.cuh: the emulated threads keep their copies
// in flight until they wait for them (dtrain_emu::async_copy_*), so a kernel that reads a tile
// before its wait and barrier, or refills a buffer other warps still read, computes with NaNs
// here as it would with stale or torn data on a GPU. Both addresses must be 16-byte aligned.
#include "cuda_runtime.h"

namespace dtrain::cuda {

inline void copy_16_bytes_async(void* dst, const void* src, bool whole) {
  dtrain_emu::async_copy_16(dst, whole ? src : nullptr);
}

inline void commit_async_copies() { dtrain_emu::async_copy_commit(); }

template <int Pending> void wait_async_copies() { dtrain_emu::async_copy_wait(Pending); }

}  // namespace dtrain::cuda
