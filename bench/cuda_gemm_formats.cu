// cuda_gemm_formats: cuBLAS's GEMM rate at the shapes of one GPT-2 124M training step
// (micro-batch 16 x 1024 tokens), in the operand format dtrain uses now and in those 16-bit
// storage would allow, so that one run says what keeping activations and weights in bf16 in
// memory would gain the GEMMs:
//   fp32 storage, FAST_16BF   dtrain --precision bf16 today: cuBLAS rounds fp32 operands
//   bf16 in, fp32 out         16-bit operands in memory, fp32 results
//   bf16 in, bf16 out         16-bit operands and results
//   fp32 storage, FAST_TF32   dtrain --precision fp32
// For each linear layer shape (forward, input gradient, weight gradient, as the plugin maps
// them onto column-major cuBLAS calls) it prints TFLOP/s, best of 10 timed calls, and the
// GEMM time of a whole step (12 layers, the LM head once). Needs a GPU; asserts nothing.
//
//   cuda_gemm_formats [tokens]      (default 16384)
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

namespace {

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "cuda_gemm_formats: %s: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
}
void check(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS) {
    std::fprintf(stderr, "cuda_gemm_formats: %s: cuBLAS status %d\n", what, static_cast<int>(s));
    std::exit(1);
  }
}

// Values in [-1, 1) from a hash of the index: not zeros, which tensor cores multiply faster.
template <class T> __global__ void fill(T* x, long long n) {
  for (long long i = blockIdx.x * 256LL + threadIdx.x; i < n; i += gridDim.x * 256LL) {
    unsigned h = static_cast<unsigned>(i) * 2654435761u;
    h ^= h >> 15;
    x[i] = static_cast<T>(static_cast<float>(h & 0xffff) / 32768.0f - 1.0f);
  }
}

struct Format {
  const char* name;
  cudaDataType_t in, out;
  cublasComputeType_t compute;
};

struct Gemm {
  const char* what;
  bool ta, tb;  // column-major cuBLAS operands
  int m, n, k;
  int lda, ldb, ldc;
  int per_step;  // calls of this shape in one step
};

}  // namespace

int main(int argc, char** argv) {
  const int N = argc > 1 ? std::atoi(argv[1]) : 16384;  // tokens per micro-batch
  const int C = 768, L = 12, V = 50304;                  // GPT-2 124M, padded vocabulary
  if (N <= 0) {
    std::fprintf(stderr, "usage: cuda_gemm_formats [tokens > 0]\n");
    return 2;
  }
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  std::printf("GPU: %s; %d tokens; GPT-2 124M GEMM shapes (C %d, %d layers, vocabulary %d)\n",
              prop.name, N, C, L, V);

  // Row-major out[N,OC] = inp[N,IC] W[OC,IC]^T and its two gradients, as column-major calls
  // (lib/device/cuda/gemm_args.hpp): forward m=OC n=N k=IC (W transposed); input gradient
  // m=IC n=N k=OC; weight gradient m=IC n=OC k=N (dout transposed).
  std::vector<Gemm> gemms;
  auto linear = [&](const char* name, int IC, int OC, int count) {
    gemms.push_back({name, true, false, OC, N, IC, IC, IC, OC, count});
    gemms.push_back({name, false, false, IC, N, OC, IC, OC, IC, count});
    gemms.push_back({name, false, true, IC, OC, N, IC, OC, IC, count});
  };
  linear("qkv     C->3C", C, 3 * C, L);
  linear("proj    C->C", C, C, L);
  linear("fc      C->4C", C, 4 * C, L);
  linear("fc_proj 4C->C", 4 * C, C, L);
  linear("lm_head C->V", C, V, 1);

  std::size_t most = 0;  // elements of the largest operand (column-major: ld x columns)
  for (const Gemm& g : gemms) {
    const std::size_t a = static_cast<std::size_t>(g.lda) * (g.ta ? g.m : g.k);
    const std::size_t b = static_cast<std::size_t>(g.ldb) * (g.tb ? g.k : g.n);
    const std::size_t c = static_cast<std::size_t>(g.ldc) * g.n;
    for (std::size_t e : {a, b, c}) most = e > most ? e : most;
  }
  float *A32, *B32, *C32;
  __nv_bfloat16 *A16, *B16, *C16;
  check(cudaMalloc(&A32, most * 4), "cudaMalloc");
  check(cudaMalloc(&B32, most * 4), "cudaMalloc");
  check(cudaMalloc(&C32, most * 4), "cudaMalloc");
  check(cudaMalloc(&A16, most * 2), "cudaMalloc");
  check(cudaMalloc(&B16, most * 2), "cudaMalloc");
  check(cudaMalloc(&C16, most * 2), "cudaMalloc");
  const long long n = static_cast<long long>(most);
  fill<<<1024, 256>>>(A32, n);
  fill<<<1024, 256>>>(B32, n);
  fill<<<1024, 256>>>(A16, n);
  fill<<<1024, 256>>>(B16, n);
  check(cudaGetLastError(), "fill");
  cublasHandle_t blas;
  check(cublasCreate(&blas), "cublasCreate");
  void* workspace;
  const std::size_t workspace_bytes = std::size_t{32} << 20;  // as the plugin gives cuBLAS
  check(cudaMalloc(&workspace, workspace_bytes), "cudaMalloc");
  check(cublasSetWorkspace(blas, workspace, workspace_bytes), "cublasSetWorkspace");
  cudaEvent_t start, stop;
  check(cudaEventCreate(&start), "cudaEventCreate");
  check(cudaEventCreate(&stop), "cudaEventCreate");

  const Format formats[] = {
      {"fp32 storage, FAST_16BF", CUDA_R_32F, CUDA_R_32F, CUBLAS_COMPUTE_32F_FAST_16BF},
      {"bf16 in, fp32 out", CUDA_R_16BF, CUDA_R_32F, CUBLAS_COMPUTE_32F},
      {"bf16 in, bf16 out", CUDA_R_16BF, CUDA_R_16BF, CUBLAS_COMPUTE_32F},
      {"fp32 storage, FAST_TF32", CUDA_R_32F, CUDA_R_32F, CUBLAS_COMPUTE_32F_FAST_TF32},
  };
  std::printf("\n%-16s %-8s %6s %6s %6s", "layer", "pass", "m", "n", "k");
  for (const Format& f : formats) std::printf(" %24s", f.name);
  std::printf("\n%-16s %-8s %6s %6s %6s", "", "", "", "", "");
  for (std::size_t i = 0; i < sizeof formats / sizeof formats[0]; ++i)
    std::printf(" %24s", "TFLOP/s");
  std::printf("\n");
  std::vector<double> step_ms(sizeof formats / sizeof formats[0], 0.0);
  const char* passes[] = {"forward", "dinput", "dweight"};
  for (std::size_t g = 0; g < gemms.size(); ++g) {
    const Gemm& s = gemms[g];
    std::printf("%-16s %-8s %6d %6d %6d", s.what, passes[g % 3], s.m, s.n, s.k);
    for (std::size_t f = 0; f < sizeof formats / sizeof formats[0]; ++f) {
      const Format& fmt = formats[f];
      const bool in16 = fmt.in == CUDA_R_16BF, out16 = fmt.out == CUDA_R_16BF;
      const void* a = in16 ? static_cast<const void*>(A16) : A32;
      const void* b = in16 ? static_cast<const void*>(B16) : B32;
      void* c = out16 ? static_cast<void*>(C16) : C32;
      const float alpha = 1.0f, beta = 0.0f;
      auto run = [&] {
        check(cublasGemmEx(blas, s.ta ? CUBLAS_OP_T : CUBLAS_OP_N, s.tb ? CUBLAS_OP_T : CUBLAS_OP_N,
                           s.m, s.n, s.k, &alpha, a, fmt.in, s.lda, b, fmt.in, s.ldb, &beta, c,
                           fmt.out, s.ldc, fmt.compute, CUBLAS_GEMM_DEFAULT),
              "cublasGemmEx");
      };
      run();
      run();  // warm-up: the heuristic's choice and its kernels loaded
      float best = 1e30f;
      for (int rep = 0; rep < 10; ++rep) {
        check(cudaEventRecord(start), "cudaEventRecord");
        run();
        check(cudaEventRecord(stop), "cudaEventRecord");
        check(cudaEventSynchronize(stop), "cudaEventSynchronize");
        float ms = 0;
        check(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
        best = ms < best ? ms : best;
      }
      const double flops = 2.0 * s.m * s.n * s.k;
      std::printf(" %24.1f", flops / (best * 1e-3) / 1e12);
      step_ms[f] += best * s.per_step;
    }
    std::printf("\n");
  }
  std::printf("\nGEMM time of one step (each shape's best time x its calls per step):\n");
  for (std::size_t f = 0; f < sizeof formats / sizeof formats[0]; ++f)
    std::printf("  %-24s %8.2f ms\n", formats[f].name, step_ms[f]);
  return 0;
}
