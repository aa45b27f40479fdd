// One query row against a sequence's cached keys and values: per head, the scores of every
// position, their softmax (the same fast exp as attention_forward) and the weighted sum of
// the values. O(T C) work, bound by reading the cache, so plain loops over rows of k and v.
#include <cmath>

#include "device/cpu/fastmath.hpp"
#include "device/cpu/kernels.hpp"
#include "device/cpu/parallel.hpp"

namespace dtrain::cpu {

void attention_decode(float* out, float* workspace, const float* q, const float* k,
                      const float* v, int T_, int C, int NH, int ld) {
  const int hs = C / NH;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  parallel_for(0, NH, static_cast<std::int64_t>(T_) * C, [=](int h) {
    const float* qh = q + h * hs;
    float* p = workspace + static_cast<std::int64_t>(h) * T_;
    float mx = -INFINITY;
    for (int t = 0; t < T_; ++t) {
      const float* kt = k + static_cast<std::int64_t>(t) * ld + h * hs;
      float s = 0;
      DTRAIN_OMP_SIMD_SUM(s)
      for (int i = 0; i < hs; ++i) s += qh[i] * kt[i];
      p[t] = s * scale;
      mx = p[t] > mx ? p[t] : mx;
    }
    float sum = 0;
    for (int t = 0; t < T_; ++t) {
      p[t] = exp_any<float>(p[t] - mx);  // subtract the max: no overflow
      sum += p[t];
    }
    float* oh = out + h * hs;
    for (int i = 0; i < hs; ++i) oh[i] = 0;
    for (int t = 0; t < T_; ++t) {
      const float* vt = v + static_cast<std::int64_t>(t) * ld + h * hs;
      const float w = p[t] / sum;
      for (int i = 0; i < hs; ++i) oh[i] += w * vt[i];
    }
  });
}

}  // namespace dtrain::cpu
