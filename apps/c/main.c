/* dtrain-c-example: a C program that owns its model (an MLP in mlp.c, forward and backward
 * written here) and uses dtrain for the rest: the data-parallel gradient average, clipping,
 * ZeRO-1 sharded AdamW and HDF5 checkpoints. The task is a synthetic regression (data.c).
 *
 *   mpiexec -n 2 dtrain-c-example --steps 300 --save-dir ckpt --save-every 100
 *   mpiexec -n 2 dtrain-c-example --steps 400 --save-dir ckpt --resume auto
 *
 * Every step trains on a global batch of 32 samples split evenly over the data-parallel
 * ranks, so any rank count trains the same model (to rounding). With --tp N the hidden layer
 * is split over N ranks as Megatron splits an MLP (mlp.h): the program does its own
 * all-reduce, and dtrain's byom on a grid clips by the whole model's norm and writes whole
 * tensors, so checkpoints move between --tp 1 and --tp N:
 *
 *   mpiexec -n 4 dtrain-c-example --tp 2 --steps 300
 *
 * A fresh run exits non-zero unless the evaluation loss at least halves. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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

/* 1 where every rank of world was given the same arguments with the same outcome. */
static int same_on_every_rank(dt_comm_t world, int argc, char** argv, int parsed) {
  uint64_t hash = 1469598103934665603ull; /* FNV-1a over the arguments, NUL-separated */
  for (int i = 1; i < argc; ++i)
    for (const char* c = argv[i];; ++c) {
      hash = (hash ^ (unsigned char)*c) * 1099511628211ull;
      if (!*c) break;
    }
  /* The maxima of each value and of its negation: equal everywhere iff max == -max(-x). */
  const int64_t h = (int64_t)(hash >> 2), v[4] = {h, -h, parsed, -parsed};
  int64_t m[4];
  check(dt_all_reduce(world, v, m, 4, DT_I64, DT_MAX), "dt_all_reduce");
  return m[0] == -m[1] && m[2] == -m[3];
}

/* Mean loss over samples [first, first + n), averaged over the data-parallel ranks' equal
 * shares (every rank of a TP group has the same loss). */
static float mean_loss(dt_comm_t world, dt_comm_t tp, mlp_tensors_t p, long first, int n,
                       const mlp_tensors_t* g) {
  float x[EVAL_SAMPLES * DATA_INPUTS], y[EVAL_SAMPLES * DATA_OUTPUTS], loss, mean = 0;
  for (int s = 0; s < n; ++s) data_sample(first + s, x + s * DATA_INPUTS, y + s * DATA_OUTPUTS);
  check(mlp_loss(p, x, y, n, g, tp, &loss), "dt_all_reduce over the tensor-parallel group");
  check(dt_all_reduce(world, &loss, &mean, 1, DT_F32, DT_AVG), "dt_all_reduce");
  return mean;
}

/* The whole model's parameters in the order of a model on one rank, from every TP rank's part
 * (collective over tp; whole: mlp_numel(MLP_HIDDEN) floats). */
static void gather_whole(dt_comm_t tp, int ranks, mlp_tensors_t mine, const float* flat, float* whole) {
  const size_t part = mlp_numel(mine.hidden);
  float* parts = malloc(part * (size_t)ranks * sizeof(float));
  mlp_tensors_t all = mlp_view(whole, MLP_HIDDEN, 0);
  if (!parts) exit(1);
  if (tp) check(dt_all_gather(tp, flat, parts, part, DT_F32), "dt_all_gather");
  else memcpy(parts, flat, part * sizeof(float));
  for (int r = 0; r < ranks; ++r) {
    const mlp_tensors_t p = mlp_view(parts + (size_t)r * part, mine.hidden, r * mine.hidden);
    memcpy(all.w1 + p.first * MLP_IN, p.w1, sizeof(float) * (size_t)(p.hidden * MLP_IN));
    memcpy(all.b1 + p.first, p.b1, sizeof(float) * (size_t)p.hidden);
    for (int o = 0; o < MLP_OUT; ++o)
      memcpy(all.w2 + o * MLP_HIDDEN + p.first, p.w2 + o * p.hidden, sizeof(float) * (size_t)p.hidden);
    memcpy(all.b2, p.b2, sizeof(float) * MLP_OUT);
  }
  free(parts);
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
  dt_comm_t world = NULL, tp = NULL;
  dt_grid_t grid = NULL;
  dt_byom_t byom = NULL;
  dt_optimizer_config_t oc = DT_OPTIMIZER_CONFIG_INIT;
  int rank = 0, size = 1, dp = 1, tp_rank = 0, pp_rank = 0, dp_rank = 0, per, eval_share, hidden;
  long start = 0, eval_first;
  float *params, *grads, *whole, eval_before, eval_after;
  mlp_tensors_t p, g;

  check(dt_init(&argc, &argv, &ctx), "dt_init");
  check(dt_context_rank(ctx, &rank), "dt_context_rank");
  check(dt_context_size(ctx, &size), "dt_context_size");
  check(dt_context_world(ctx, &world), "dt_context_world");
  {
    const int parsed = parse_options(argc, argv, &opt, rank == 0);
    /* Every rank goes on or stops alike: a rank given other options (a launcher's per-rank
     * arguments) would otherwise wait in a collective the others never enter. */
    const int agreed = same_on_every_rank(world, argc, argv, parsed);
    if (!agreed && rank == 0) fprintf(stderr, "dtrain-c-example: the ranks were given different options\n");
    if (parsed < 0 && agreed && rank == 0) print_usage(stdout); /* --help */
    if (parsed || !agreed) {
      dt_finalize(ctx);
      return parsed < 0 && agreed ? 0 : 2;
    }
  }
  {
    const char* why = NULL;
    char text[160];
    if (size % opt.tp || MLP_HIDDEN % opt.tp) {
      snprintf(text, sizeof text, "--tp %d must divide the %d ranks and the %d hidden units", opt.tp, size,
               MLP_HIDDEN);
      why = text;
    } else if (GLOBAL_BATCH % (size / opt.tp) || EVAL_SAMPLES % (size / opt.tp)) {
      snprintf(text, sizeof text, "the %d data-parallel ranks must divide the batch of %d and the %d evaluation samples",
               size / opt.tp, GLOBAL_BATCH, EVAL_SAMPLES);
      why = text;
    }
    if (why) {
      if (rank == 0) fprintf(stderr, "dtrain-c-example: %s\n", why);
      dt_finalize(ctx);
      return 2;
    }
  }
  if (opt.out) { /* rank 0 writes it at the end: tried now (to append: nothing in it is lost;
                  * a file the try made is removed again, so a run that fails leaves none) */
    int writable = 1;
    if (rank == 0) {
      const int existed = access(opt.out, F_OK) == 0;
      FILE* f = fopen(opt.out, "a");
      writable = f != NULL;
      if (f) fclose(f);
      if (f && !existed) remove(opt.out);
    }
    check(dt_broadcast(world, &writable, &writable, 1, DT_I32, 0), "dt_broadcast");
    if (!writable) {
      if (rank == 0) fprintf(stderr, "dtrain-c-example: cannot write %s\n", opt.out);
      dt_finalize(ctx);
      return 1;
    }
  }
  if (opt.tp > 1) { /* the grid's TP groups split the hidden layer; its DP groups the data */
    dt_grid_config_t gc = DT_GRID_CONFIG_INIT;
    gc.tp = opt.tp;
    check(dt_grid_create(ctx, &gc, &grid), "dt_grid_create");
    check(dt_grid_comm(grid, DT_GROUP_TP, &tp), "dt_grid_comm");
    check(dt_grid_coords(grid, &tp_rank, &pp_rank, &dp_rank), "dt_grid_coords");
  } else {
    dp_rank = rank;
  }
  dp = size / opt.tp;
  per = GLOBAL_BATCH / dp;
  eval_share = EVAL_SAMPLES / dp;
  hidden = MLP_HIDDEN / opt.tp;

  /* One flat allocation each for parameters and gradients; the tensors are views into it. */
  params = calloc(mlp_numel(hidden), sizeof(float));
  grads = calloc(mlp_numel(hidden), sizeof(float));
  whole = calloc(mlp_numel(MLP_HIDDEN), sizeof(float));
  if (!params || !grads || !whole) exit(1);
  p = mlp_view(params, hidden, tp_rank * hidden);
  g = mlp_view(grads, hidden, tp_rank * hidden);
  mlp_init(p);

  oc.zero_stage = 1; /* each rank keeps the AdamW moments of its half */
  oc.weight_decay = 0.01f;
  oc.clip_grad = 1.0f;
  if (grid)
    check(dt_byom_create_grid(grid, &oc, &byom), "dt_byom_create_grid");
  else
    check(dt_byom_create(world, &oc, &byom), "dt_byom_create");
  {
    float* pt[4] = {p.w1, p.b1, p.w2, p.b2};
    const float* gt[4] = {g.w1, g.b1, g.w2, g.b2};
    int64_t shapes[4][2];
    mlp_shapes(p, shapes);
    for (int t = 0; t < 4; ++t)
      check(dt_byom_register(byom, mlp_names[t], mlp_ndims[t], shapes[t], DT_F32, pt[t], gt[t],
                             (mlp_ndims[t] == 1 ? DT_PARAM_NO_DECAY : 0u) | mlp_split[t]),
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

  eval_first = DATA_EVAL_FIRST + (long)dp_rank * eval_share; /* this rank's share of the eval set */
  eval_before = mean_loss(world, tp, p, eval_first, eval_share, NULL);
  for (long step = start; step < opt.steps; ++step) {
    float loss, norm = 0;
    memset(grads, 0, mlp_numel(hidden) * sizeof(float));
    loss = mean_loss(world, tp, p, step * GLOBAL_BATCH + (long)dp_rank * per, per, &g);
    check(dt_byom_step(byom, opt.lr, &norm), "dt_byom_step");
    if (opt.save_dir && opt.save_every > 0 && (step + 1) % opt.save_every == 0)
      check(dt_byom_save_checkpoint(byom, opt.save_dir, opt.keep), "dt_byom_save_checkpoint");
    if (rank == 0 && (step % 50 == 0 || step + 1 == opt.steps))
      printf("step %5ld  loss %.5f  grad-norm %.4f\n", step, loss, norm);
  }
  if (opt.save_dir && opt.save_every == 0)
    check(dt_byom_save_checkpoint(byom, opt.save_dir, opt.keep), "dt_byom_save_checkpoint");
  eval_after = mean_loss(world, tp, p, eval_first, eval_share, NULL);
  gather_whole(tp, opt.tp, p, params, whole);

  if (rank == 0) {
    printf("c-example: eval loss %.5f -> %.5f, steps %ld..%d on %d ranks (tp %d)\n", eval_before,
           eval_after, start, opt.steps, size, opt.tp);
    if (opt.out) write_results(opt.out, eval_after, whole, mlp_numel(MLP_HIDDEN));
  }
  check(dt_finalize(ctx), "dt_finalize");
  free(whole);
  free(params);
  free(grads);
  if (!isfinite(eval_after)) return 1;
  if (start == 0 && opt.steps > 0 && !(eval_after < 0.5f * eval_before)) {
    if (rank == 0) fprintf(stderr, "dtrain-c-example: the loss did not halve\n");
    return 1;
  }
  return 0;
}
