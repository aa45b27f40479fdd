#pragma once
// Copies from global to shared memory that do not pass through registers (PTX cp.async, sm_80
// and later): a thread issues them and goes on computing; a group of them is committed, and
// waiting for all but the newest N groups makes the older ones' data the thread's to read (a
// barrier then makes them every thread's). Kernels use it to load the next tile while they
// work on the current one.
// The CUDA emulator builds its own version (tests/cuda_emu/replaced/async_copy.cuh).
#include <cuda_runtime.h>

#include <cstdint>

namespace dtrain::cuda {

// 16 bytes from src (global, 16-byte aligned) to dst (shared, 16-byte aligned); with
// `whole` false none are read and dst gets zeros.
__device__ inline void copy_16_bytes_async(void* dst, const void* src, bool whole) {
  const auto at = static_cast<std::uint32_t>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(at), "l"(src),
               "r"(whole ? 16 : 0));
}

// Closes the group of this thread's copies issued since the last commit.
__device__ inline void commit_async_copies() { asm volatile("cp.async.commit_group;\n" ::); }

// Waits until at most `Pending` of this thread's committed groups are still in flight.
template <int Pending> __device__ inline void wait_async_copies() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(Pending));
}

}  // namespace dtrain::cuda
