#pragma once
// CUDA and cuBLAS status codes turned into dtrain::Error, so a failed call names what was
// attempted instead of surfacing later as a wrong number.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "dtrain/core/error.hpp"

namespace dtrain::cuda {

[[noreturn]] void throw_cuda_error(cudaError_t err, const char* what);
[[noreturn]] void throw_cublas_error(cublasStatus_t status, const char* what);

inline void check(cudaError_t err, const char* what) {
  if (err != cudaSuccess) throw_cuda_error(err, what);
}
inline void check(cublasStatus_t status, const char* what) {
  if (status != CUBLAS_STATUS_SUCCESS) throw_cublas_error(status, what);
}
// After a kernel launch: a bad launch configuration shows up here; faults inside the kernel
// show up at the next synchronising call.
inline void check_launch(const char* kernel) { check(cudaGetLastError(), kernel); }

// Whether two byte ranges share a byte.
inline bool overlaps(const void* a, std::size_t a_bytes, const void* b, std::size_t b_bytes) {
  const auto x = reinterpret_cast<std::uintptr_t>(a), y = reinterpret_cast<std::uintptr_t>(b);
  return a_bytes && b_bytes && x < y + b_bytes && y < x + a_bytes;
}
// A kernel that reads one format and writes another may not work in place: its threads
// write bytes other threads (of other blocks, in any order on a GPU) have yet to read.
inline void require_apart(const void* dst, std::size_t dst_bytes, const void* src,
                          std::size_t src_bytes, const char* what) {
  DTRAIN_CHECK(!overlaps(dst, dst_bytes, src, src_bytes), Errc::invalid_argument,
               what << ": the output overlaps the input, which this conversion cannot do in place");
}

}  // namespace dtrain::cuda

#define DTRAIN_CUDA(expr) ::dtrain::cuda::check((expr), #expr)
