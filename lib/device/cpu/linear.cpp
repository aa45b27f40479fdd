// Linear layer on top of GEMM. Weights are stored [OC, C] (out x in, as in PyTorch/GPT-2), so
// the forward is inp · W^T and both backward products are plain GEMMs with beta = 1, which
// gives the += accumulation for free (beta = 0 writes dinp over).
#include "device/cpu/kernels.hpp"

namespace dtrain::cpu {

// out[N,OC] = inp[N,C] · weight[OC,C]^T + bias[OC]
template <class T>
void linear_forward(T* out, const T* inp, const T* weight, const T* bias, int N, int C, int OC) {
  if (bias) {
    // Pre-load the bias and let the GEMM add onto it: one pass over out instead of two.
    for (int n = 0; n < N; ++n) {
      T* o = out + static_cast<std::int64_t>(n) * OC;
      for (int j = 0; j < OC; ++j) o[j] = bias[j];
    }
  }
  gemm<T>(false, true, N, OC, C, T(1), inp, C, weight, C, bias ? T(1) : T(0), out, OC);
}

template <class T>
void linear_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight,
                     int N, int C, int OC, bool accumulate_dinp) {
  // dinp[N,C] += dout[N,OC] · weight[OC,C]
  if (dinp)
    gemm<T>(false, false, N, C, OC, T(1), dout, OC, weight, C, accumulate_dinp ? T(1) : T(0),
            dinp, C);
  // dweight[OC,C] += dout[N,OC]^T · inp[N,C]
  if (dweight) gemm<T>(true, false, OC, C, N, T(1), dout, OC, inp, C, T(1), dweight, C);
  // dbias[OC] += sum over rows of dout; row-wise so the inner loop is contiguous
  if (dbias) {
    for (int n = 0; n < N; ++n) {
      const T* d = dout + static_cast<std::int64_t>(n) * OC;
      for (int j = 0; j < OC; ++j) dbias[j] += d[j];
    }
  }
}

#define DTRAIN_INSTANTIATE(T)                                                              \
  template void linear_forward<T>(T*, const T*, const T*, const T*, int, int, int);        \
  template void linear_backward<T>(T*, T*, T*, const T*, const T*, const T*, int, int, int, \
                                   bool);
DTRAIN_INSTANTIATE(float)
DTRAIN_INSTANTIATE(double)
#undef DTRAIN_INSTANTIATE

}  // namespace dtrain::cpu
