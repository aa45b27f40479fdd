#pragma once
// The CUDA emulator's lib/device/cuda/async_copy.cuh: a copy happens when it is issued, so
// committing and waiting have nothing left to do. Stricter than a GPU in one way (both
// addresses must be 16-byte aligned, or the run stops) and more lenient in another: a kernel
// that reads a tile before waiting for its copies reads the data here, not stale values.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace dtrain::cuda {

inline void copy_16_bytes_async(void* dst, const void* src, bool whole) {
  if (reinterpret_cast<std::uintptr_t>(dst) % 16 != 0 ||
      reinterpret_cast<std::uintptr_t>(src) % 16 != 0) {
    std::fprintf(stderr, "CUDA emulator: copy_16_bytes_async between addresses not 16-byte "
                         "aligned (%p <- %p)\n", dst, src);
    std::abort();
  }
  if (whole) std::memcpy(dst, src, 16);
  else std::memset(dst, 0, 16);
}

inline void commit_async_copies() {}

template <int Pending> void wait_async_copies() {}

}  // namespace dtrain::cuda
