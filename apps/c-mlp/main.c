/* c-mlp: trains dtrain's built-in MLP classifier from C, data parallel over every rank.
 * Each rank draws its own share of a synthetic 3-class problem; dtrain averages the
 * gradients, clips them and applies AdamW. Prints the loss; exits non-zero unless it falls.
 *
 *   mpiexec -n 2 dtrain-c-mlp [steps]
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "dtrain.h"

enum { INPUTS = 8, HIDDEN = 32, CLASSES = 3, BATCH = 16 };

/* Sample `id`: inputs from a fixed pseudo-random pattern, the class from their weighted sum. */
static void make_sample(long id, float* x, int32_t* label) {
  float s = 0;
  for (int i = 0; i < INPUTS; ++i) {
    x[i] = sinf(0.91f * (float)(id * INPUTS + i) + 0.3f * (float)i);
    s += x[i] * (i % 2 ? 1.0f : -0.5f);
  }
  *label = s > 0.7f ? 2 : (s > -0.7f ? 1 : 0);
}

static int fail(dt_context_t ctx, const char* what, dt_result_t rc) {
  fprintf(stderr, "c-mlp: %s failed: %s: %s\n", what, dt_get_error_string(rc), dt_get_last_error(ctx));
  return 1;
}

int main(int argc, char** argv) {
  dt_context_t ctx = NULL;
  dt_comm_t world = NULL;
  dt_model_t model = NULL;
  dt_result_t rc;
  int rank = 0, size = 1;
  const int steps = argc > 1 ? atoi(argv[1]) : 200;
  const int sizes[3] = {INPUTS, HIDDEN, CLASSES};
  dt_mlp_config_t mc = DT_MLP_CONFIG_INIT;
  dt_optimizer_config_t oc = DT_OPTIMIZER_CONFIG_INIT;
  float x[BATCH * INPUTS];
  int32_t y[BATCH];
  float first = 0, loss = 0;

  if ((rc = dt_init(&argc, &argv, &ctx)) != DT_SUCCESS) return fail(NULL, "dt_init", rc);
  dt_context_rank(ctx, &rank);
  dt_context_size(ctx, &size);
  dt_context_world(ctx, &world);
  mc.num_sizes = 3;
  mc.sizes = sizes;
  mc.max_batch = BATCH;
  oc.weight_decay = 0.01f;
  if ((rc = dt_model_create_mlp(world, &mc, &oc, &model)) != DT_SUCCESS)
    return fail(ctx, "dt_model_create_mlp", rc);

  for (int step = 0; step < steps; ++step) {
    float global = 0;
    for (int s = 0; s < BATCH; ++s)  /* 64 distinct batches, each split over the ranks */
      make_sample(((long)(step % 64) * size + rank) * BATCH + s, x + s * INPUTS, y + s);
    if ((rc = dt_mlp_forward_backward(model, x, y, BATCH, &loss)) != DT_SUCCESS)
      return fail(ctx, "dt_mlp_forward_backward", rc);
    if ((rc = dt_model_step(model, 3e-3f, NULL)) != DT_SUCCESS) return fail(ctx, "dt_model_step", rc);
    dt_all_reduce(world, &loss, &global, 1, DT_F32, DT_AVG);
    if (step == 0) first = global;
    if (rank == 0 && (step % 20 == 0 || step == steps - 1))
      printf("step %4d  loss %.4f\n", step, global);
    loss = global;
  }
  if (rank == 0) printf("c-mlp: loss %.4f -> %.4f on %d ranks\n", first, loss, size);
  dt_finalize(ctx);
  return loss < 0.5f * first ? 0 : 2;
}
