// Mapping of CUDA / cuBLAS failures onto dtrain's error codes.
#include "device/cuda/cuda_check.hpp"

#include <string>

namespace dtrain::cuda {

void throw_cuda_error(cudaError_t err, const char* what) {
  Errc code = Errc::internal;
  if (err == cudaErrorMemoryAllocation) code = Errc::out_of_memory;
  if (err == cudaErrorNoDevice || err == cudaErrorInsufficientDriver) code = Errc::unavailable;
  throw Error(code, std::string("CUDA error in ") + what + ": " + cudaGetErrorString(err) +
                        " (error " + std::to_string(static_cast<int>(err)) + ")");
}

void throw_cublas_error(cublasStatus_t status, const char* what) {
  const Errc code = status == CUBLAS_STATUS_ALLOC_FAILED ? Errc::out_of_memory : Errc::internal;
  throw Error(code, std::string("cuBLAS error in ") + what + ": " +
                        cublasGetStatusString(status) + " (status " +
                        std::to_string(static_cast<int>(status)) + ")");
}

}  // namespace dtrain::cuda
