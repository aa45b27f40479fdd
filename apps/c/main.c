/* dtrain-c-example: a C program that owns its model (an MLP in mlp.c, forward and backward
 * written here) and uses dtrain for the rest: the data-parallel gradient average, clipping,
 * ZeRO-1 sharded AdamW and HDF5 checkpoints. The task is a synthetic regression (data.c).
 *
 *   mpiexec -n 2 dtrain-c-example --steps 300 --save-dir ckpt --save-every 100
 *   mpiexec -n 2 dtrain-c-example --steps 400 --save-dir ckpt --resume auto
 *
 * Every step trains on a global batch of 32 samples split evenly over the ranks, so any
 * rank count trains the same model (to rounding). A fresh run exits non-zero unless the
 * evaluation loss at least halves. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data.h"
#include "dtrain.h"
#include "mlp.h"
#include "options.h"

enum { GLOBAL_BATCH = 32, EVAL_SAMPLES = 256 };

static dt_context_t ctx = NULL;

/* Stops the job on a failed call: the message says which and why. */
static void check(dt_result_t rc, const char* what) {
  if (rc == DT_SUCCESS) return;
  fprintf(stderr, "dtrain-c-example: %s failed (%s): %s\n", what, dt_get_error_string(rc),
          dt_get_last_error(ctx));
  exit(1);
}

/* Mean loss over samples [first, first + n), averaged over the ranks' equal shares. */
static float mean_loss(dt_comm_t world, mlp_tensors_t p, long first, int n, const mlp_tensors_t* g) {
  float x[EVAL_SAMPLES * DATA_INPUTS], y[EVAL_SAMPLES * DATA_OUTPUTS], loss, mean = 0;
  for (int s = 0; s < n; ++s) data_sample(first + s, x + s * DATA_INPUTS, y + s * DATA_OUTPUTS);
  loss = mlp_loss(p, x, y, n, g);
  check(dt_all_reduce(world, &loss, &mean, 1, DT_F32, DT_AVG), "dt_all_reduce");
  return mean;
}

/* rank 0 writes the final evaluation loss and every parameter, one per line. */
static void write_results(const char* path, float eval, const float* params, size_t n) {
  FILE* f = fopen(path, "w");
  if (!f) {
    fprintf(stderr, "dtrain-c-example: cannot write %s\n", path);
    exit(1);
  }
  fprintf(f, "eval_loss %.9g\n", eval);
  for (size_t i = 0; i < n; ++i) fprintf(f, "param %.9g\n", params[i]);
  fclose(f);
}

int main(int argc, char** argv) {
  options_t opt;
  dt_comm_t world = NULL;
  dt_byom_t byom = NULL;
  dt_optimizer_config_t oc = DT_OPTIMIZER_CONFIG_INIT;
  int rank = 0, size = 1, per, eval_share;
  long start = 0, eval_first;
  float *params, *grads, eval_before, eval_after;
  mlp_tensors_t p, g;

  check(dt_init(&argc, &argv, &ctx), "dt_init");
  if (parse_options(argc, argv, &opt)) exit(2);
  check(dt_context_rank(ctx, &rank), "dt_context_rank");
  check(dt_context_size(ctx, &size), "dt_context_size");
  check(dt_context_world(ctx, &world), "dt_context_world");
  if (GLOBAL_BATCH % size || EVAL_SAMPLES % size) {
    if (rank == 0)
      fprintf(stderr, "dtrain-c-example: %d ranks do not divide the batch of %d\n", size, GLOBAL_BATCH);
    exit(2);
  }
  per = GLOBAL_BATCH / size;
  eval_share = EVAL_SAMPLES / size;

  /* One flat allocation each for parameters and gradients; the tensors are views into it. */
  params = calloc(mlp_numel(), sizeof(float));
  grads = calloc(mlp_numel(), sizeof(float));
  p = mlp_view(params);
  g = mlp_view(grads);
  mlp_init(p);

  oc.zero_stage = 1; /* each rank keeps the AdamW moments of its half */
  oc.weight_decay = 0.01f;
  oc.clip_grad = 1.0f;
  check(dt_byom_create(world, &oc, &byom), "dt_byom_create");
  {
    float* pt[4] = {p.w1, p.b1, p.w2, p.b2};
    const float* gt[4] = {g.w1, g.b1, g.w2, g.b2};
    for (int t = 0; t < 4; ++t)
      check(dt_byom_register(byom, mlp_names[t], mlp_ndims[t], mlp_shapes[t], DT_F32, pt[t], gt[t],
                             mlp_ndims[t] == 1 ? DT_PARAM_NO_DECAY : 0u),
            "dt_byom_register");
  }

  if (opt.resume) {
    char found[4096];
    const char* source = opt.resume;
    if (strcmp(opt.resume, "auto") == 0) {
      size_t len = 0;
      check(dt_checkpoint_find(world, opt.save_dir, found, sizeof found, &len), "dt_checkpoint_find");
      source = len > 0 ? found : NULL;
    }
    if (source) {
      check(dt_byom_load_checkpoint(byom, source), "dt_byom_load_checkpoint");
      check(dt_byom_steps(byom, &start), "dt_byom_steps");
      if (rank == 0) printf("resumed from %s at step %ld\n", source, start);
    }
  }

  eval_first = DATA_EVAL_FIRST + (long)rank * eval_share; /* this rank's share of the eval set */
  eval_before = mean_loss(world, p, eval_first, eval_share, NULL);
  for (long step = start; step < opt.steps; ++step) {
    float loss, norm = 0;
    memset(grads, 0, mlp_numel() * sizeof(float));
    loss = mean_loss(world, p, step * GLOBAL_BATCH + (long)rank * per, per, &g);
    check(dt_byom_step(byom, opt.lr, &norm), "dt_byom_step");
    if (opt.save_dir && opt.save_every > 0 && (step + 1) % opt.save_every == 0)
      check(dt_byom_save_checkpoint(byom, opt.save_dir, opt.keep), "dt_byom_save_checkpoint");
    if (rank == 0 && (step % 50 == 0 || step + 1 == opt.steps))
      printf("step %5ld  loss %.5f  grad-norm %.4f\n", step, loss, norm);
  }
  if (opt.save_dir && opt.save_every == 0)
    check(dt_byom_save_checkpoint(byom, opt.save_dir, opt.keep), "dt_byom_save_checkpoint");
  eval_after = mean_loss(world, p, eval_first, eval_share, NULL);

  if (rank == 0) {
    printf("c-example: eval loss %.5f -> %.5f, steps %ld..%d on %d ranks\n", eval_before, eval_after,
           start, opt.steps, size);
    if (opt.out) write_results(opt.out, eval_after, params, mlp_numel());
  }
  check(dt_finalize(ctx), "dt_finalize");
  free(params);
  free(grads);
  if (!isfinite(eval_after)) return 1;
  if (start == 0 && opt.steps > 0 && !(eval_after < 0.5f * eval_before)) {
    if (rank == 0) fprintf(stderr, "dtrain-c-example: the loss did not halve\n");
    return 1;
  }
  return 0;
}
