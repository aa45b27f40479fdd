/* byom_formats: time of dt_byom_step for one tensor of N values registered as fp32 and as
 * bf16 words (fp32 masters kept by dtrain), side by side in one run (docs/c-api.md).
 *   mpiexec -n 1 byom_formats [N]          (default 2^24) */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "dtrain.h"

static double seconds(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Milliseconds per step over `steps` steps of byom; negative when a step fails. The
 * program leaves its words as the steps wrote them (the common case: no write to take). */
static double time_steps(dt_byom_t byom, int steps) {
  const double start = seconds();
  for (int s = 0; s < steps; ++s)
    if (dt_byom_step(byom, 1e-4f, NULL) != DT_SUCCESS) return -1;
  return (seconds() - start) * 1e3 / steps;
}

int main(int argc, char** argv) {
  dt_context_t ctx = NULL;
  dt_comm_t world = NULL;
  dt_byom_t full = NULL, half = NULL;
  const int64_t n = argc > 1 ? atoll(argv[1]) : (int64_t)1 << 24;
  const int64_t shape[1] = {n};
  float* w = malloc((size_t)n * sizeof *w);
  float* g = malloc((size_t)n * sizeof *g);
  uint16_t* w16 = malloc((size_t)n * sizeof *w16);
  uint16_t* g16 = malloc((size_t)n * sizeof *g16);
  if (!w || !g || !w16 || !g16 || n < 1) return 2;
  for (int64_t i = 0; i < n; ++i) {
    w[i] = 0.5f;
    g[i] = 0.01f;
    w16[i] = 0x3F00u; /* bf16 0.5 */
    g16[i] = 0x3C24u; /* bf16 0.01 */
  }
  if (dt_init(&argc, &argv, &ctx) != DT_SUCCESS) return 1;
  dt_context_world(ctx, &world);
  dt_byom_create(world, NULL, &full);
  dt_byom_create(world, NULL, &half);
  if (dt_byom_register(full, "w", 1, shape, DT_F32, w, g, 0) != DT_SUCCESS ||
      dt_byom_register(half, "w", 1, shape, DT_BF16, w16, g16, 0) != DT_SUCCESS ||
      dt_byom_step(full, 1e-4f, NULL) != DT_SUCCESS || dt_byom_step(half, 1e-4f, NULL) != DT_SUCCESS) {
    fprintf(stderr, "byom_formats: %s\n", dt_get_last_error(ctx));
    dt_finalize(ctx);
    return 1;
  }
  for (int round = 0; round < 3; ++round) {
    const double f = time_steps(full, 10), h = time_steps(half, 10);
    if (f < 0 || h < 0) {
      fprintf(stderr, "byom_formats: %s\n", dt_get_last_error(ctx));
      dt_finalize(ctx);
      return 1;
    }
    printf("%lld values, ms per dt_byom_step: fp32 %.1f, bf16 words %.1f\n", (long long)n, f, h);
  }
  dt_byom_destroy(half);
  dt_byom_destroy(full);
  dt_finalize(ctx);
  free(w);
  free(g);
  free(w16);
  free(g16);
  return 0;
}
