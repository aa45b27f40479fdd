/* A byom on a grid (dt_byom_create_grid): the program splits its own model over the TP and
 * PP groups, and dtrain steps it as one model. Four tensors: a column-parallel layer
 * ("a.weight" [8, 6] and "a.bias" [8], split by rows), a row-parallel one ("b.weight" [5, 8],
 * split by columns; "b.bias" [5] replicated over TP); with pp 2 stage 0 holds a.*, stage 1
 * b.*, with pp 4 each tensor is a stage of its own (at 4 ranks tp 4 splits each tensor four
 * ways). The loss is a sum over elements, so each rank computes the gradient of what it holds
 * (its data-parallel share of it), and a byom on each rank alone holding the whole tensors
 * trains on the mean over dp. With clipping active every step, the split byom's values and
 * norms must follow that one's (the norm is the whole model's: every slice, every stage, the
 * replicated bias once); checkpoints hold whole tensors, loaded across the two both ways
 * bit for bit; also with loss scaling. An fp16 tensor on one stage only: its overflow skips
 * the step on all. Refusals: a TP group's ranks splitting a tensor differently, settings
 * that differ over the grid, a name on two stages, both split flags, ZeRO 3.
 *   mpiexec -n N test_capi_byom_grid SCRATCH_DIR     (N = 2 or 4) */
#define _XOPEN_SOURCE 700 /* nftw, mkdir */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "model_values.h"
#include "scratch_dir.h"

enum { NT = 4, STEPS = 20 };
static const float TOL = 1e-5f; /* relative: the norm's summation order differs */

typedef struct {
  const char* name;
  int64_t rows, cols; /* cols 0: a vector of rows elements */
  unsigned split;     /* DT_PARAM_TP_ROWS, DT_PARAM_TP_COLS or 0 (replicated) */
  int stage;          /* with pp 2; with pp 4 the tensor's index */
  unsigned flags;
} tensor_t;

static const tensor_t TENSORS[NT] = {
    {"a.weight", 8, 6, DT_PARAM_TP_ROWS, 0, 0},
    {"a.bias", 8, 0, DT_PARAM_TP_ROWS, 0, DT_PARAM_NO_DECAY},
    {"b.weight", 5, 8, DT_PARAM_TP_COLS, 1, 0},
    {"b.bias", 5, 0, 0, 1, DT_PARAM_NO_DECAY},
};

static size_t whole_numel(const tensor_t* t) { return (size_t)(t->rows * (t->cols ? t->cols : 1)); }

/* The loss's pieces at logical element i of tensor t: initial value, target, weight. */
static float start_value(int t, size_t i) { return 0.1f * sinf(1.3f * (float)i + (float)t); }
static float grad_at(int t, size_t i, float w, int dp_rank) {
  const float target = 0.2f * cosf(0.7f * (float)i + 2.0f * (float)t);
  const float c = 1.0f + 0.5f * sinf((float)i);
  return c * (w - target) + 0.05f * (float)(dp_rank + 1) * sinf((float)i + (float)t);
}

typedef struct {
  int tp, pp, dp, tp_rank, pp_rank, dp_rank;
} coords_t;

/* This rank's slice of tensor t: its element count, and the logical index of element k. */
static size_t slice_numel(const tensor_t* t, const coords_t* c) {
  return t->split ? whole_numel(t) / (size_t)c->tp : whole_numel(t);
}
static size_t logical_index(const tensor_t* t, const coords_t* c, size_t k) {
  if (t->split == DT_PARAM_TP_ROWS) return (size_t)c->tp_rank * slice_numel(t, c) + k;
  if (t->split == DT_PARAM_TP_COLS) {
    const size_t cols = (size_t)t->cols / (size_t)c->tp;
    return (k / cols) * (size_t)t->cols + (size_t)c->tp_rank * cols + k % cols;
  }
  return k;
}
static int held_here(const tensor_t* t, const coords_t* c) {
  if (c->pp == 4) return t == &TENSORS[c->pp_rank];
  return c->pp == 1 || t->stage == c->pp_rank;
}

typedef struct {
  float *w[NT], *g[NT]; /* null where the tensor is not on this stage */
} buffers_t;

/* The split byom: this rank's slices of the tensors its stage holds. */
static dt_byom_t make_split(dt_context_t ctx, dt_grid_t grid, const coords_t* c, const dt_optimizer_config_t* oc,
                            buffers_t* b) {
  dt_byom_t byom = NULL;
  OK(ctx, dt_byom_create_grid(grid, oc, &byom));
  for (int t = 0; t < NT; ++t) {
    const tensor_t* x = &TENSORS[t];
    int64_t shape[2] = {x->rows, x->cols};
    b->w[t] = b->g[t] = NULL;
    if (!held_here(x, c)) continue;
    if (x->split == DT_PARAM_TP_ROWS) shape[0] /= c->tp;
    if (x->split == DT_PARAM_TP_COLS) shape[1] /= c->tp;
    b->w[t] = malloc(slice_numel(x, c) * sizeof(float));
    b->g[t] = malloc(slice_numel(x, c) * sizeof(float));
    for (size_t k = 0; k < slice_numel(x, c); ++k) b->w[t][k] = start_value(t, logical_index(x, c, k));
    OK(ctx, dt_byom_register(byom, x->name, x->cols ? 2 : 1, shape, DT_F32, b->w[t], b->g[t], x->split | x->flags));
  }
  return byom;
}

/* The reference: every tensor whole, on this rank alone. */
static dt_byom_t make_whole(dt_context_t ctx, dt_comm_t one, const dt_optimizer_config_t* oc, buffers_t* b) {
  dt_byom_t byom = NULL;
  OK(ctx, dt_byom_create(one, oc, &byom));
  for (int t = 0; t < NT; ++t) {
    const tensor_t* x = &TENSORS[t];
    const int64_t shape[2] = {x->rows, x->cols};
    b->w[t] = malloc(whole_numel(x) * sizeof(float));
    b->g[t] = malloc(whole_numel(x) * sizeof(float));
    for (size_t i = 0; i < whole_numel(x); ++i) b->w[t][i] = start_value(t, i);
    OK(ctx, dt_byom_register(byom, x->name, x->cols ? 2 : 1, shape, DT_F32, b->w[t], b->g[t], x->flags));
  }
  return byom;
}

static void free_buffers(buffers_t* b) {
  for (int t = 0; t < NT; ++t) {
    free(b->w[t]);
    free(b->g[t]);
  }
}

/* The largest relative gap between this rank's slices and the reference's elements; bits:
 * whether all are identical. */
static float slice_gap(const coords_t* c, const buffers_t* split, const buffers_t* whole, int* bits) {
  float worst = 0;
  *bits = 1;
  for (int t = 0; t < NT; ++t) {
    if (!split->w[t]) continue;
    for (size_t k = 0; k < slice_numel(&TENSORS[t], c); ++k) {
      const float a = split->w[t][k], b = whole->w[t][logical_index(&TENSORS[t], c, k)];
      worst = worse(worst, fabsf(a - b) / fmaxf(fabsf(b), 1e-3f));
      if (a != b) *bits = 0;
    }
  }
  return worst;
}

/* scale > 0: both byoms scale the loss from it (a power of two: the same steps). */
static void test_layout(dt_context_t ctx, dt_comm_t world, int tp, int pp, int zero, float scale) {
  dt_grid_config_t gc = DT_GRID_CONFIG_INIT, sc = DT_GRID_CONFIG_INIT;
  dt_optimizer_config_t oc = DT_OPTIMIZER_CONFIG_INIT;
  dt_grid_t grid = NULL, solo = NULL;
  dt_comm_t one = NULL;
  coords_t c;
  buffers_t split, whole;
  dt_byom_t s, w;
  float worst = 0, gap;
  int bits = 0;
  char dir[1100], name[64];
  oc.clip_grad = 0.05f; /* below every step's norm: the clipping needs the whole model's */
  oc.zero_stage = zero;
  gc.tp = tp;
  gc.pp = pp;
  OK(ctx, dt_grid_create(ctx, &gc, &grid));
  OK(ctx, dt_grid_shape(grid, &c.tp, &c.pp, &c.dp));
  OK(ctx, dt_grid_coords(grid, &c.tp_rank, &c.pp_rank, &c.dp_rank));
  OK(ctx, dt_context_size(ctx, &sc.pp));
  OK(ctx, dt_grid_create(ctx, &sc, &solo));
  OK(ctx, dt_grid_comm(solo, DT_GROUP_DP, &one));
  s = make_split(ctx, grid, &c, &oc, &split);
  w = make_whole(ctx, one, &oc, &whole);
  if (scale > 0) {
    OK(ctx, dt_byom_scale_loss(s, scale));
    OK(ctx, dt_byom_scale_loss(w, scale));
  }
  for (int step = 0; step < STEPS; ++step) {
    float ns = 0, nw = 0, by = 1;
    OK(ctx, dt_byom_loss_scale(s, &by, NULL));
    for (int t = 0; t < NT; ++t) {
      const tensor_t* x = &TENSORS[t];
      for (size_t k = 0; split.w[t] && k < slice_numel(x, &c); ++k)
        split.g[t][k] = by * grad_at(t, logical_index(x, &c, k), split.w[t][k], c.dp_rank);
      for (size_t i = 0; i < whole_numel(x); ++i) {
        float sum = 0;
        for (int r = 0; r < c.dp; ++r) sum += grad_at(t, i, whole.w[t][i], r);
        whole.g[t][i] = by * (sum / (float)c.dp);
      }
    }
    OK(ctx, dt_byom_step(s, 1e-2f, &ns));
    OK(ctx, dt_byom_step(w, 1e-2f, &nw));
    CHECK(fabsf(ns - nw) <= TOL * nw);
    CHECK(nw > oc.clip_grad);
    worst = worse(worst, fabsf(ns - nw) / nw);
  }
  gap = slice_gap(&c, &split, &whole, &bits);
  CHECK(gap < TOL);

  /* The split byom's file loads into the whole one and back, bit for bit. */
  snprintf(name, sizeof name, "byom_grid_tp%d_pp%d_zero%d", tp, pp, zero);
  fresh_dir(ctx, world, name, dir, sizeof dir);
  OK(ctx, dt_byom_save_checkpoint(s, dir, 0));
  OK(ctx, dt_byom_load_checkpoint(w, dir));
  slice_gap(&c, &split, &whole, &bits);
  CHECK(bits);
  for (int t = 0; t < NT; ++t) /* then the whole one's changed values into the split one */
    for (size_t i = 0; i < whole_numel(&TENSORS[t]); ++i) whole.w[t][i] += 0.25f;
  snprintf(name, sizeof name, "byom_whole_tp%d_pp%d_zero%d", tp, pp, zero);
  fresh_dir(ctx, world, name, dir, sizeof dir);
  if (my_rank == 0) OK(ctx, dt_byom_save_checkpoint(w, dir, 0)); /* rank 0's file for all */
  OK(ctx, dt_barrier(world));
  OK(ctx, dt_byom_load_checkpoint(s, dir));
  slice_gap(&c, &split, &whole, &bits);
  CHECK(bits);
  if (my_rank == 0)
    printf("byom on a grid tp=%d pp=%d dp=%d zero=%d loss scale %g: %d steps with clipping, norms "
           "within %.3g and values within %.3g of whole tensors on one rank; checkpoints across bit "
           "for bit\n", c.tp, c.pp, c.dp, zero, (double)scale, STEPS, (double)worst, (double)gap);
  OK(ctx, dt_byom_destroy(w));
  OK(ctx, dt_byom_destroy(s));
  free_buffers(&whole);
  free_buffers(&split);
  OK(ctx, dt_grid_destroy(solo));
  OK(ctx, dt_grid_destroy(grid));
}

/* Stages of different formats: an fp16 tensor on the last stage only, an fp32 one on the
 * first; an overflow there skips the step on every stage (NaN norm, nothing moves). */
static void test_mixed_formats(dt_context_t ctx) {
  dt_grid_config_t gc = DT_GRID_CONFIG_INIT;
  dt_grid_t grid = NULL;
  dt_byom_t b = NULL;
  float x[4] = {0.5f, 0.5f, 0.5f, 0.5f}, gx[4] = {0.1f, 0.1f, 0.1f, 0.1f}, norm = 0;
  uint16_t y[4] = {0x3800u, 0x3800u, 0x3800u, 0x3800u}, gy[4] = {0x2E66u, 0x2E66u, 0x2E66u, 0x2E66u};
  const int64_t shape[1] = {4};
  int tp_rank = 0, dp_rank = 0, stage = 0;
  gc.pp = 2;
  OK(ctx, dt_grid_create(ctx, &gc, &grid));
  OK(ctx, dt_grid_coords(grid, &tp_rank, &stage, &dp_rank));
  OK(ctx, dt_byom_create_grid(grid, NULL, &b));
  if (stage == 0) OK(ctx, dt_byom_register(b, "x", 1, shape, DT_F32, x, gx, 0));
  if (stage == 1) OK(ctx, dt_byom_register(b, "y", 1, shape, DT_F16, y, gy, 0));
  OK(ctx, dt_byom_step(b, 1e-2f, &norm));
  CHECK(isfinite(norm));
  if (stage == 1) gy[2] = 0x7C00u; /* +inf */
  {
    const float x_before = x[0];
    const uint16_t y_before = y[0];
    OK(ctx, dt_byom_step(b, 1e-2f, &norm));
    CHECK(isnan(norm) && x[0] == x_before && y[0] == y_before);
  }
  OK(ctx, dt_byom_destroy(b));
  OK(ctx, dt_grid_destroy(grid));
}

/* On a grid every rank fails alike where the registrations cannot make one model. */
static void test_grid_refusals(dt_context_t ctx) {
  dt_grid_config_t tc = DT_GRID_CONFIG_INIT, pc = DT_GRID_CONFIG_INIT;
  dt_optimizer_config_t oc = DT_OPTIMIZER_CONFIG_INIT;
  dt_grid_t tp_grid = NULL, pp_grid = NULL;
  dt_byom_t b = NULL;
  float w[4] = {0}, g[4] = {0};
  const int64_t shape[2] = {2, 2};
  int tp_rank = 0, pp_rank = 0, dp_rank = 0;
  tc.tp = 2;
  pc.pp = 2;
  OK(ctx, dt_grid_create(ctx, &tc, &tp_grid));
  OK(ctx, dt_grid_coords(tp_grid, &tp_rank, &pp_rank, &dp_rank));
  /* A TP group's ranks splitting the same tensor differently. */
  OK(ctx, dt_byom_create_grid(tp_grid, NULL, &b));
  OK(ctx, dt_byom_register(b, "w", 2, shape, DT_F32, w, g, tp_rank == 0 ? DT_PARAM_TP_ROWS : DT_PARAM_TP_COLS));
  FAILS(DT_ERR_INVALID_CONFIG, ctx, "differ between the ranks of a TP group", dt_byom_step(b, 1e-2f, NULL));
  OK(ctx, dt_byom_destroy(b));
  /* The same whole tensor split along different dimensions ([2, 2] by rows, [4, 1] by
   * columns: both [4, 2]). */
  {
    const int64_t column[2] = {4, 1};
    OK(ctx, dt_byom_create_grid(tp_grid, NULL, &b));
    OK(ctx, dt_byom_register(b, "w", 2, tp_rank == 0 ? shape : column, DT_F32, w, g,
                             tp_rank == 0 ? DT_PARAM_TP_ROWS : DT_PARAM_TP_COLS));
    FAILS(DT_ERR_INVALID_CONFIG, ctx, "differ between the ranks of a TP group", dt_byom_step(b, 1e-2f, NULL));
  }
  OK(ctx, dt_byom_destroy(b));
  /* Different clipping on the TP ranks (a replicated tensor would drift apart). */
  oc.clip_grad = tp_rank == 0 ? 1.0f : 0.5f;
  OK(ctx, dt_byom_create_grid(tp_grid, &oc, &b));
  OK(ctx, dt_byom_register(b, "w", 2, shape, DT_F32, w, g, 0));
  FAILS(DT_ERR_INVALID_CONFIG, ctx, "optimizer settings or loss scaling differ between the ranks of the grid",
        dt_byom_save_checkpoint(b, "unused", 0));
  OK(ctx, dt_byom_destroy(b));
  {
    /* At tp 2 x dp 2, one rank splitting otherwise: its DP group fails one comparison and its
     * TP group another, the other ranks none; every rank still fails alike. */
    int tp = 0, pp = 0, dp = 0;
    OK(ctx, dt_grid_shape(tp_grid, &tp, &pp, &dp));
    if (dp == 2) {
      const int odd = tp_rank == 1 && dp_rank == 1;
      OK(ctx, dt_byom_create_grid(tp_grid, NULL, &b));
      OK(ctx, dt_byom_register(b, "w", 2, shape, DT_F32, w, g, odd ? DT_PARAM_TP_COLS : DT_PARAM_TP_ROWS));
      FAILS(DT_ERR_INVALID_CONFIG, ctx, "differ between the ranks", dt_byom_step(b, 1e-2f, NULL));
      OK(ctx, dt_byom_destroy(b));
    }
  }
  OK(ctx, dt_grid_destroy(tp_grid));
  /* One name on both stages. */
  OK(ctx, dt_grid_create(ctx, &pc, &pp_grid));
  OK(ctx, dt_byom_create_grid(pp_grid, NULL, &b));
  OK(ctx, dt_byom_register(b, "same", 2, shape, DT_F32, w, g, 0));
  FAILS(DT_ERR_INVALID_ARGUMENT, ctx, "names must be unique over the stages", dt_byom_step(b, 1e-2f, NULL));
  OK(ctx, dt_byom_destroy(b));
  /* A name on one stage that is a '/'-prefix of the other's: refused at the first step, not
   * at the first save. */
  OK(ctx, dt_grid_coords(pp_grid, &tp_rank, &pp_rank, &dp_rank));
  OK(ctx, dt_byom_create_grid(pp_grid, NULL, &b));
  OK(ctx, dt_byom_register(b, pp_rank == 0 ? "nest" : "nest/inner", 2, shape, DT_F32, w, g, 0));
  FAILS(DT_ERR_INVALID_ARGUMENT, ctx, "cannot both be saved", dt_byom_step(b, 1e-2f, NULL));
  OK(ctx, dt_byom_destroy(b));
  OK(ctx, dt_grid_destroy(pp_grid));
}

static void test_refusals(dt_context_t ctx) {
  dt_grid_config_t gc = DT_GRID_CONFIG_INIT;
  dt_optimizer_config_t oc = DT_OPTIMIZER_CONFIG_INIT;
  dt_grid_t grid = NULL;
  dt_byom_t b = NULL;
  float w[4], g[4];
  const int64_t shape[1] = {4};
  OK(ctx, dt_grid_create(ctx, &gc, &grid));
  oc.zero_stage = 3;
  FAILS(DT_ERR_NOT_IMPLEMENTED, ctx, "zero_stage 3", dt_byom_create_grid(grid, &oc, &b));
  CHECK(b == NULL);
  FAILS(DT_ERR_INVALID_ARGUMENT, ctx, "byom must not be NULL", dt_byom_create_grid(grid, NULL, NULL));
  OK(ctx, dt_byom_create_grid(grid, NULL, &b));
  FAILS(DT_ERR_INVALID_ARGUMENT, ctx, "exclude each other",
        dt_byom_register(b, "w", 1, shape, DT_F32, w, g, DT_PARAM_TP_ROWS | DT_PARAM_TP_COLS));
  FAILS(DT_ERR_INVALID_STATE, ctx, "destroy them first", dt_grid_destroy(grid));
  OK(ctx, dt_byom_destroy(b));
  OK(ctx, dt_grid_destroy(grid));
}

int main(int argc, char** argv) {
  dt_context_t ctx = NULL;
  dt_comm_t world = NULL;
  int size = 0, status;
  status = start_with_scratch("test_capi_byom_grid", &argc, &argv, &ctx, &world, &size);
  if (status != 0) return status;
  test_layout(ctx, world, 2, 1, 0, 0);
  test_layout(ctx, world, 1, 2, 0, 0);
  test_layout(ctx, world, 2, 1, 0, 1024.0f);
  if (size == 4) {
    test_layout(ctx, world, 2, 2, 0, 0);
    test_layout(ctx, world, 2, 1, 1, 0);
    test_layout(ctx, world, 1, 2, 1, 1024.0f);
    test_layout(ctx, world, 4, 1, 0, 0);
    test_layout(ctx, world, 4, 1, 0, 1024.0f);
    test_layout(ctx, world, 1, 4, 0, 0);
    test_layout(ctx, world, 1, 4, 0, 1024.0f);
  }
  test_mixed_formats(ctx);
  test_grid_refusals(ctx);
  test_refusals(ctx);
  status = finish("capi_byom_grid", ctx, world);
  OK(ctx, dt_finalize(ctx));
  return status;
}
