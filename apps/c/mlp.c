#include "mlp.h"

#include <math.h>
#include <string.h>

const char* const mlp_names[4] = {"hidden.weight", "hidden.bias", "out.weight", "out.bias"};
const int mlp_ndims[4] = {2, 1, 2, 1};
const int64_t mlp_shapes[4][2] = {{MLP_HIDDEN, MLP_IN}, {MLP_HIDDEN, 0}, {MLP_OUT, MLP_HIDDEN}, {MLP_OUT, 0}};

size_t mlp_numel(void) { return MLP_HIDDEN * MLP_IN + MLP_HIDDEN + MLP_OUT * MLP_HIDDEN + MLP_OUT; }

mlp_tensors_t mlp_view(float* flat) {
  mlp_tensors_t t;
  t.w1 = flat;
  t.b1 = t.w1 + MLP_HIDDEN * MLP_IN;
  t.w2 = t.b1 + MLP_HIDDEN;
  t.b2 = t.w2 + MLP_OUT * MLP_HIDDEN;
  return t;
}

void mlp_init(mlp_tensors_t p) {
  for (int i = 0; i < MLP_HIDDEN * MLP_IN; ++i) p.w1[i] = sinf(1.7f * (float)i + 0.3f) / sqrtf((float)MLP_IN);
  for (int i = 0; i < MLP_OUT * MLP_HIDDEN; ++i) p.w2[i] = cosf(2.3f * (float)i) / sqrtf((float)MLP_HIDDEN);
  memset(p.b1, 0, sizeof(float) * MLP_HIDDEN);
  memset(p.b2, 0, sizeof(float) * MLP_OUT);
}

/* out[o] = b[o] + sum_i w[o][i] in[i]  (w: [nout][nin]) */
static void linear(const float* w, const float* b, const float* in, int nin, int nout, float* out) {
  for (int o = 0; o < nout; ++o) {
    float acc = b[o];
    for (int i = 0; i < nin; ++i) acc += w[o * nin + i] * in[i];
    out[o] = acc;
  }
}

/* Backward of linear: gw += dout (x) in, gb += dout, din = w^T dout (din may be NULL). */
static void linear_backward(const float* w, const float* in, const float* dout, int nin, int nout,
                            float* gw, float* gb, float* din) {
  if (din) memset(din, 0, sizeof(float) * (size_t)nin);
  for (int o = 0; o < nout; ++o) {
    gb[o] += dout[o];
    for (int i = 0; i < nin; ++i) {
      gw[o * nin + i] += dout[o] * in[i];
      if (din) din[i] += w[o * nin + i] * dout[o];
    }
  }
}

float mlp_loss(mlp_tensors_t p, const float* x, const float* y, int n, const mlp_tensors_t* g) {
  float h[MLP_HIDDEN], out[MLP_OUT], dout[MLP_OUT], dh[MLP_HIDDEN];
  double total = 0;
  for (int s = 0; s < n; ++s) {
    const float* xs = x + s * MLP_IN;
    const float* ys = y + s * MLP_OUT;
    linear(p.w1, p.b1, xs, MLP_IN, MLP_HIDDEN, h);
    for (int j = 0; j < MLP_HIDDEN; ++j) h[j] = tanhf(h[j]);
    linear(p.w2, p.b2, h, MLP_HIDDEN, MLP_OUT, out);
    for (int o = 0; o < MLP_OUT; ++o) {
      const float e = out[o] - ys[o];
      total += 0.5 * (double)e * e;
      dout[o] = e / (float)n; /* d(mean loss)/d(out) */
    }
    if (!g) continue;
    linear_backward(p.w2, h, dout, MLP_HIDDEN, MLP_OUT, g->w2, g->b2, dh);
    for (int j = 0; j < MLP_HIDDEN; ++j) dh[j] *= 1.0f - h[j] * h[j];
    linear_backward(p.w1, xs, dh, MLP_IN, MLP_HIDDEN, g->w1, g->b1, NULL);
  }
  return (float)(total / n);
}
