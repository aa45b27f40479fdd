/* Helpers of the C tests that compare models: all of a model's parameters in one array, and
 * the largest absolute difference or value of float arrays. Include after check.h. */
#ifndef DTRAIN_TEST_MODEL_VALUES_H
#define DTRAIN_TEST_MODEL_VALUES_H

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

/* dt_model_get_parameters into a malloc'ed array (the caller frees it); *n the count. */
static inline float* parameters(dt_context_t ctx, dt_model_t m, size_t* n) {
  float* p;
  OK(ctx, dt_model_num_parameters(m, n));
  p = malloc(*n * sizeof *p);
  OK(ctx, dt_model_get_parameters(m, p, *n));
  return p;
}

/* Whether two models hold the same number of parameters with the same bits. */
static inline int same_parameters(dt_context_t ctx, dt_model_t a, dt_model_t b) {
  size_t na, nb;
  float* pa = parameters(ctx, a, &na);
  float* pb = parameters(ctx, b, &nb);
  const int same = na == nb && memcmp(pa, pb, na * sizeof *pa) == 0;
  free(pa);
  free(pb);
  return same;
}

static inline float max_diff(const float* a, const float* b, size_t n) {
  float d = 0;
  for (size_t i = 0; i < n; ++i) d = worse(d, fabsf(a[i] - b[i]));
  return d;
}

static inline float max_abs(const float* a, size_t n) {
  float m = 0;
  for (size_t i = 0; i < n; ++i) m = worse(m, fabsf(a[i]));
  return m;
}

#endif /* DTRAIN_TEST_MODEL_VALUES_H */
