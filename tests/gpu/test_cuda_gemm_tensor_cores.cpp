// GEMMs on tensor cores against the CPU's fp32 GEMM: TF32 (the default for fp32 on the CUDA
// device) and the bf16/fp16 operands of mixed precision (Device::set_gemm_operand_format).
// A format with p stored mantissa bits (TF32 10, fp16 10, bf16 7) rounds each input with a
// relative error of at most 2^-(p+1) (2^-p if the hardware truncates), so a product is off by
// at most about 2^(1-p) of |a||b|, and products are accumulated in fp32. Each test asserts,
// for every element, |gpu - cpu| <= 2^(2-p) * sum_k |A_ik| |B_kj| (twice that estimate), and
// that the rms error relative to the rms result is below 5 * 2^-p (random signs average
// out); for bf16 also that it is above what TF32 gives, so a GEMM that ignored the format
// (stayed TF32) fails.
#include <cmath>

#include "dtrain/core/dtype.hpp"
#include "dtrain/core/error.hpp"
#include "gpu_test.hpp"

namespace {

using dtrain::Device;
using dtrain::DType;
using gputest::OnDevice;
using gputest::random_floats;

struct GemmError {
  double worst_ratio = 0;  // max over elements of |gpu - cpu| / sum_k |a||b|
  double rms_rel = 0;      // rms error / rms result
};

// C[M,N] = A[M,K] · B[N,K]^T (as the linear layer multiplies) on both devices; fails the test
// where an element is off by more than element_bound * sum_k |A_ik| |B_jk|.
GemmError compare_with_cpu(Device& gpu, double element_bound) {
  Device& cpu = dtrain::cpu_device();
  const int M = 256, N = 384, K = 768;  // GPT-2-like inner dimension
  auto A = random_floats(static_cast<std::size_t>(M) * K, 1);
  auto B = random_floats(static_cast<std::size_t>(N) * K, 2);
  std::vector<float> C(static_cast<std::size_t>(M) * N);
  OnDevice<float> dA(gpu, A), dB(gpu, B), dC(gpu, C.size());
  cpu.gemm(false, true, M, N, K, 1.0f, A.data(), K, B.data(), K, 0.0f, C.data(), N);
  gpu.gemm(false, true, M, N, K, 1.0f, dA.get(), K, dB.get(), K, 0.0f, dC.get(), N);
  const auto G = dC.host();
  GemmError e;
  double sum_sq_err = 0, sum_sq_ref = 0;
  for (int i = 0; i < M; ++i) {
    for (int j = 0; j < N; ++j) {
      double mag = 0;
      for (int k = 0; k < K; ++k)
        mag += std::fabs(A[static_cast<std::size_t>(i) * K + k]) *
               std::fabs(B[static_cast<std::size_t>(j) * K + k]);
      const double err = std::fabs(static_cast<double>(G[i * N + j]) - C[i * N + j]);
      e.worst_ratio = std::max(e.worst_ratio, err / mag);
      sum_sq_err += err * err;
      sum_sq_ref += static_cast<double>(C[i * N + j]) * C[i * N + j];
      if (err > element_bound * mag) {
        ADD_FAILURE() << "element (" << i << ", " << j << "): |err| " << err << " > "
                      << element_bound << " * " << mag;
        return e;
      }
    }
  }
  e.rms_rel = std::sqrt(sum_sq_err / sum_sq_ref);
  return e;
}

GemmError measure(const char* what, DType fmt, int mantissa_bits) {
  Device& gpu = dtrain::select_device("cuda");
  gputest::OperandFormat scoped(gpu, fmt);
  const double unit = std::ldexp(1.0, -mantissa_bits);
  const GemmError e = compare_with_cpu(gpu, 4 * unit);
  std::printf("  %s gemm (%s): worst |err| / sum|a||b| = %.3g, rms relative error = %.3g\n",
              what, gpu.name().c_str(), e.worst_ratio, e.rms_rel);
  EXPECT_LE(e.rms_rel, 5 * unit) << what;
  return e;
}

TEST(CudaGemmTensorCores, Tf32WithinItsBound) {
  ASSERT_NE(dtrain::select_device("cuda").name().find("TF32"), std::string::npos)
      << "run with DTRAIN_CUDA_TF32=1 (the default)";
  measure("TF32", DType::f32, 10);
}

TEST(CudaGemmTensorCores, Bf16OperandsWithinTheirBoundAndCoarserThanTf32) {
  const GemmError tf32 = measure("TF32", DType::f32, 10);
  const GemmError bf16 = measure("bf16", DType::bf16, 7);
  // bf16 keeps 3 fewer mantissa bits: its error should be about 8x TF32's; 2x is enough to
  // show the operands were rounded to bf16.
  EXPECT_GT(bf16.rms_rel, 2 * tf32.rms_rel) << "the GEMM did not use bf16 operands";
}

TEST(CudaGemmTensorCores, Fp16OperandsWithinTheirBound) {
  // Inputs in [-1, 1] stay far from fp16's range limits; fp16 has TF32's mantissa.
  measure("fp16", DType::f16, 10);
}

TEST(CudaGemmTensorCores, OtherOperandFormatsRefused) {
  Device& gpu = dtrain::select_device("cuda");
  EXPECT_THROW(gpu.set_gemm_operand_format(DType::i32), dtrain::Error);
  EXPECT_NE(gpu.name().find("TF32"), std::string::npos) << gpu.name();
}

}  // namespace
