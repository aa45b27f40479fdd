#include "data.h"

#include <math.h>

/* A value in [0, 1) from (id, i): the fractional part of a scaled sine, in double so that
 * every rank computes the same bits. */
static double hash01(long id, int i) {
  const double v = sin((double)id * 12.9898 + (double)i * 78.233) * 43758.5453;
  return v - floor(v);
}

void data_sample(long id, float* x, float* y) {
  for (int i = 0; i < DATA_INPUTS; ++i) x[i] = (float)(2.0 * hash01(id, i) - 1.0);
  y[0] = sinf(2.0f * x[0]) * cosf(x[1]);
  y[1] = 0.5f * x[2] * x[3] + 0.3f * x[0];
}
