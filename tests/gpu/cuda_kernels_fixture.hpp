#pragma once
// The fixture of the CUDA kernel tests (test_cuda_kernels.cpp, test_cuda_gemm_linear.cpp,
// test_cuda_16bit_inputs.cpp, test_cuda_16bit_gradients.cpp):
// the CPU device as the reference and the CUDA device under test, with fp32 GEMMs exact
// (DTRAIN_CUDA_TF32=0).
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "gpu_test.hpp"

namespace gputest {

class CudaKernels : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(gpu.kind(), dtrain::DeviceKind::cuda);
    // The fp32 bound needs exact fp32 GEMMs (the TF32 bound has its own test).
    ASSERT_EQ(gpu.name().find("TF32"), std::string::npos)
        << "run with DTRAIN_CUDA_TF32=0; device: " << gpu.name();
  }
  template <class T> OnDevice<T> up(const std::vector<T>& v) { return OnDevice<T>(gpu, v); }
  // n NaNs on the device: a gradient written over them must keep none.
  OnDevice<float> nans(std::size_t n) {
    return up(std::vector<float>(n, std::numeric_limits<float>::quiet_NaN()));
  }
  static constexpr dtrain::Device::GradWrite kOverwrite = dtrain::Device::GradWrite::overwrite;
  // v's values as GEMM operands of format fmt see them (rounded to 16 bits, or as they are).
  std::vector<float> as_operands(dtrain::DType fmt, std::vector<float> v) {
    if (fmt != dtrain::DType::f32)
      cpu.round_to_16bit(v.data(), v.data(), static_cast<std::int64_t>(v.size()), fmt);
    return v;
  }

  dtrain::Device& cpu = dtrain::cpu_device();
  dtrain::Device& gpu = dtrain::select_device("cuda");
};

// An attention test's shape: B sequences of T positions, width C in NH heads.
struct AttentionShape {
  int B, T, C, NH;
  std::size_t qkv() const { return static_cast<std::size_t>(B) * T * 3 * C; }
  std::size_t out() const { return static_cast<std::size_t>(B) * T * C; }
  std::string tag(dtrain::DType fmt) const {
    return std::string(dtrain::dtype_name(fmt)) + " hs=" + std::to_string(C / NH) +
           " T=" + std::to_string(T);
  }
};

}  // namespace gputest
