#include "mlp.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

const char* const mlp_names[4] = {"hidden.weight", "hidden.bias", "out.weight", "out.bias"};
const int mlp_ndims[4] = {2, 1, 2, 1};
const unsigned mlp_split[4] = {DT_PARAM_TP_ROWS, DT_PARAM_TP_ROWS, DT_PARAM_TP_COLS, 0u};

void mlp_shapes(mlp_tensors_t p, int64_t shapes[4][2]) {
  const int64_t s[4][2] = {{p.hidden, MLP_IN}, {p.hidden, 0}, {MLP_OUT, p.hidden}, {MLP_OUT, 0}};
  memcpy(shapes, s, sizeof s);
}

size_t mlp_numel(int hidden) { return (size_t)(hidden * MLP_IN + hidden + MLP_OUT * hidden + MLP_OUT); }

mlp_tensors_t mlp_view(float* flat, int hidden, int first) {
  mlp_tensors_t t;
  t.hidden = hidden;
  t.first = first;
  t.w1 = flat;
  t.b1 = t.w1 + hidden * MLP_IN;
  t.w2 = t.b1 + hidden;
  t.b2 = t.w2 + MLP_OUT * hidden;
  return t;
}

void mlp_init(mlp_tensors_t p) {
  for (int j = 0; j < p.hidden; ++j)
    for (int i = 0; i < MLP_IN; ++i) {
      const int whole = (p.first + j) * MLP_IN + i; /* index in the whole [HIDDEN][IN] */
      p.w1[j * MLP_IN + i] = sinf(1.7f * (float)whole + 0.3f) / sqrtf((float)MLP_IN);
    }
  for (int o = 0; o < MLP_OUT; ++o)
    for (int j = 0; j < p.hidden; ++j) {
      const int whole = o * MLP_HIDDEN + p.first + j; /* in the whole [OUT][HIDDEN] */
      p.w2[o * p.hidden + j] = cosf(2.3f * (float)whole) / sqrtf((float)MLP_HIDDEN);
    }
  memset(p.b1, 0, sizeof(float) * (size_t)p.hidden);
  memset(p.b2, 0, sizeof(float) * MLP_OUT);
}

/* out[o] = b[o] + sum_i w[o][i] in[i]  (w: [nout][nin]; b may be NULL) */
static void linear(const float* w, const float* b, const float* in, int nin, int nout, float* out) {
  for (int o = 0; o < nout; ++o) {
    float acc = b ? b[o] : 0.0f;
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

dt_result_t mlp_loss(mlp_tensors_t p, const float* x, const float* y, int n, const mlp_tensors_t* g,
                     dt_comm_t tp, float* loss) {
  static float h[MLP_MAX_SAMPLES * MLP_HIDDEN], out[MLP_MAX_SAMPLES * MLP_OUT];
  float dout[MLP_OUT], dh[MLP_HIDDEN];
  double total = 0;
  const int H = p.hidden;
  /* Forward: this rank's hidden units, and its part of every output (no bias yet). */
  for (int s = 0; s < n; ++s) {
    float* hs = h + s * H;
    linear(p.w1, p.b1, x + s * MLP_IN, MLP_IN, H, hs);
    for (int j = 0; j < H; ++j) hs[j] = tanhf(hs[j]);
    linear(p.w2, NULL, hs, H, MLP_OUT, out + s * MLP_OUT);
  }
  if (tp) {
    const dt_result_t rc = dt_all_reduce(tp, out, out, (size_t)n * MLP_OUT, DT_F32, DT_SUM);
    if (rc != DT_SUCCESS) return rc;
  }
  for (int s = 0; s < n; ++s) {
    const float* hs = h + s * H;
    for (int o = 0; o < MLP_OUT; ++o) {
      const float e = out[s * MLP_OUT + o] + p.b2[o] - y[s * MLP_OUT + o];
      total += 0.5 * (double)e * e;
      dout[o] = e / (float)n; /* d(mean loss)/d(out) */
    }
    if (!g) continue;
    linear_backward(p.w2, hs, dout, H, MLP_OUT, g->w2, g->b2, dh);
    for (int j = 0; j < H; ++j) dh[j] *= 1.0f - hs[j] * hs[j];
    linear_backward(p.w1, x + s * MLP_IN, dh, MLP_IN, H, g->w1, g->b1, NULL);
  }
  *loss = (float)(total / n);
  return DT_SUCCESS;
}
