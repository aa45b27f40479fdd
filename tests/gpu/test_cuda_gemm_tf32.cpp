// GEMM with TF32 tensor cores (the default for fp32 on the CUDA device) against the CPU's
// fp32 GEMM. TF32 keeps 10 of fp32's 23 mantissa bits: each input is rounded with a relative
// error of at most 2^-11 (2^-10 if the hardware truncates), so each product is off by at most
// about 2^-9 ~ 2e-3 of |a||b|, and products are accumulated in fp32. The test asserts, for
// every element, |gpu - cpu| <= 4e-3 * sum_k |A_ik| |B_kj| (twice that estimate), plus a
// statistical check that the typical error is far below the worst case.
#include <cmath>

#include "gpu_test.hpp"

namespace {

using dtrain::Device;
using gputest::OnDevice;
using gputest::random_floats;

constexpr double kTf32ElementBound = 4e-3;

TEST(CudaGemmTf32, WithinTheTf32Bound) {
  Device& cpu = dtrain::cpu_device();
  Device& gpu = dtrain::select_device("cuda");
  ASSERT_NE(gpu.name().find("TF32"), std::string::npos)
      << "run with DTRAIN_CUDA_TF32=1 (the default); device: " << gpu.name();
  const int M = 256, N = 384, K = 768;  // GPT-2-like inner dimension
  auto A = random_floats(static_cast<std::size_t>(M) * K, 1);
  auto B = random_floats(static_cast<std::size_t>(N) * K, 2);  // used transposed, as linear does
  std::vector<float> C(static_cast<std::size_t>(M) * N);
  OnDevice<float> dA(gpu, A), dB(gpu, B), dC(gpu, C.size());
  cpu.gemm(false, true, M, N, K, 1.0f, A.data(), K, B.data(), K, 0.0f, C.data(), N);
  gpu.gemm(false, true, M, N, K, 1.0f, dA.get(), K, dB.get(), K, 0.0f, dC.get(), N);
  const auto G = dC.host();
  double worst_ratio = 0, sum_sq_err = 0, sum_sq_ref = 0;
  for (int i = 0; i < M; ++i) {
    for (int j = 0; j < N; ++j) {
      double mag = 0;  // sum_k |A_ik| |B_jk|
      for (int k = 0; k < K; ++k)
        mag += std::fabs(A[static_cast<std::size_t>(i) * K + k]) *
               std::fabs(B[static_cast<std::size_t>(j) * K + k]);
      const double err = std::fabs(static_cast<double>(G[i * N + j]) - C[i * N + j]);
      worst_ratio = std::max(worst_ratio, err / mag);
      sum_sq_err += err * err;
      sum_sq_ref += static_cast<double>(C[i * N + j]) * C[i * N + j];
      ASSERT_LE(err, kTf32ElementBound * mag) << "element (" << i << ", " << j << ")";
    }
  }
  const double rms_rel = std::sqrt(sum_sq_err / sum_sq_ref);
  std::printf("  TF32 gemm: worst |err| / sum|a||b| = %.3g, rms relative error = %.3g\n",
              worst_ratio, rms_rel);
  // Rounding errors of random sign average out: the rms error relative to the rms result is
  // about 2^-11 * sqrt(2) ~ 7e-4 at most; 5e-3 leaves room and still catches garbage.
  EXPECT_LE(rms_rel, 5e-3);
}

}  // namespace
