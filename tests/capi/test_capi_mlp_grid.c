/* Tensor parallelism of the built-in MLP through the C ABI (dt_model_create_mlp_grid): an
 * MLP split over the TP group of a grid (column-, row-parallel and replicated layers; tp 2,
 * and at 4 ranks tp 4 and tp 2 x dp 2; ZeRO 0 to 3 over the DP group) trains as one rank
 * does on the whole batch: every step's loss (averaged over dp) and gradient norm within 1e-5
 * relative, the whole parameters within 1e-4, predictions within 1e-4 of the largest logit
 * (bf16 and fp16 against a 16-bit model on one rank: 1e-4, and 1e-2, one 16-bit step). Checkpoints load across the layouts bit for bit; a split tensor set whole
 * reads back whole; different inputs on the ranks of a TP group, sizes that do not split
 * and pipeline stages are refused on every rank.
 *   mpiexec -n N test_capi_mlp_grid SCRATCH_DIR       (N = 2 or 4) */
#define _XOPEN_SOURCE 700 /* nftw, mkdir */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "against_one_rank.h"
#include "check.h"
#include "model_values.h"
#include "scratch_dir.h"

enum { STEPS = 8, B = 4, IN = 6, CLASSES = 5, MAX_SIZES = 5 };
/* Relative bound of a step's loss and norm; the parameters' bound (as test_capi_tp: Adam's
 * normalised update turns rounding-level gradient differences of near-zero gradients into
 * visible parameter differences). bf16 gets its own (main). */
static float tol = 1e-5f, param_tol = 1e-4f;

/* Sample s (0-based over the whole batch of a step): a learnable class of its inputs. */
static void sample(int step, int s, float* x, int32_t* label) {
  float sum = 0;
  for (int i = 0; i < IN; ++i) {
    x[i] = sinf(0.37f * (float)(step * 11 + s * 5 + i * 3));
    sum += x[i] * (float)(i + 1);
  }
  *label = (int32_t)(fabsf(sum) * 2.0f) % CLASSES;
}

typedef struct {
  dt_grid_t grid, solo; /* solo: tp 1, pp = world, DP groups of one rank for the reference */
  dt_model_t split, ref;
  dt_comm_t dp;
  int dp_size, dp_rank;
} layout_t;

static const char* precision = "fp32"; /* of the models test_layout makes */

static dt_mlp_config_t config(const int* sizes, int n, int max_batch) {
  dt_mlp_config_t mc = DT_MLP_CONFIG_INIT;
  mc.precision = precision;
  mc.num_sizes = n;
  mc.sizes = sizes;
  mc.max_batch = max_batch; /* device "auto": on the CUDA emulator its GPU */
  return mc;
}

static layout_t make_layout(dt_context_t ctx, int tp, const int* sizes, int n, int zero) {
  layout_t l;
  dt_grid_config_t g = DT_GRID_CONFIG_INIT, s = DT_GRID_CONFIG_INIT;
  dt_optimizer_config_t oc = clipping_optimizer(zero);
  dt_mlp_config_t mc;
  dt_comm_t one = NULL;
  int t = 0, p = 0;
  memset(&l, 0, sizeof l);
  g.tp = tp;
  OK(ctx, dt_grid_create(ctx, &g, &l.grid));
  OK(ctx, dt_grid_comm(l.grid, DT_GROUP_DP, &l.dp));
  OK(ctx, dt_comm_size(l.dp, &l.dp_size));
  OK(ctx, dt_grid_coords(l.grid, &t, &p, &l.dp_rank));
  mc = config(sizes, n, B);
  OK(ctx, dt_model_create_mlp_grid(l.grid, &mc, &oc, &l.split));
  OK(ctx, dt_context_size(ctx, &s.pp));
  OK(ctx, dt_grid_create(ctx, &s, &l.solo));
  OK(ctx, dt_grid_comm(l.solo, DT_GROUP_DP, &one));
  mc = config(sizes, n, B * l.dp_size);
  OK(ctx, dt_model_create_mlp(one, &mc, &oc, &l.ref));
  return l;
}

static void free_layout(dt_context_t ctx, layout_t* l) {
  OK(ctx, dt_model_destroy(l->split));
  OK(ctx, dt_model_destroy(l->ref));
  OK(ctx, dt_grid_destroy(l->solo));
  OK(ctx, dt_grid_destroy(l->grid));
}

/* Steps [from, to) of both models; returns the worst relative loss or norm gap. */
static float train(dt_context_t ctx, const layout_t* l, int from, int to) {
  enum { ALL = 2 * B }; /* at most dp 2 */
  float x[ALL * IN];
  int32_t labels[ALL];
  const int all = l->dp_size * B, mine = l->dp_rank * B;
  float worst = 0;
  for (int step = from; step < to; ++step) {
    float ls = 0, lr = 0, ns = 0, nr = 0, mean = 0;
    for (int s = 0; s < all; ++s) sample(step, s, x + s * IN, labels + s);
    OK(ctx, dt_mlp_forward_backward(l->split, x + mine * IN, labels + mine, B, &ls));
    OK(ctx, dt_mlp_forward_backward(l->ref, x, labels, all, &lr));
    OK(ctx, dt_model_step(l->split, 1e-2f, &ns));
    OK(ctx, dt_model_step(l->ref, 1e-2f, &nr));
    OK(ctx, dt_all_reduce(l->dp, &ls, &mean, 1, DT_F32, DT_AVG));
    CHECK(within(mean, lr, tol));
    CHECK(within(ns, nr, tol));
    worst = worse(worst, worse(fabsf(mean - lr) / lr, fabsf(ns - nr) / nr));
  }
  return worst;
}

/* Two steps after a checkpoint load the models still agree: the optimiser's moments and step
 * count came across, not only the parameters. */
static void expect_alike_after_steps(dt_context_t ctx, const layout_t* l, int from) {
  size_t na = 0, nb = 0;
  long sa = 0, sb = 0;
  float *a, *b;
  train(ctx, l, from, from + 2);
  a = parameters(ctx, l->split, &na);
  b = parameters(ctx, l->ref, &nb);
  CHECK(na == nb && max_diff(a, b, na < nb ? na : nb) < param_tol);
  OK(ctx, dt_model_steps(l->split, &sa));
  OK(ctx, dt_model_steps(l->ref, &sb));
  CHECK(sa == sb && sa == from + 2);
  free(a);
  free(b);
}

/* Sets `name` whole on both models and reads it back whole from the split one, bit for bit
 * (values a 16-bit model holds exactly). */
static void round_trip(dt_context_t ctx, const layout_t* l, const char* name, size_t count) {
  float w[64 * 64], back[64 * 64];
  for (size_t i = 0; i < count; ++i) w[i] = (float)((int)(i % 23) - 11) / 128; /* exact in 16 bits */
  OK(ctx, dt_model_set_tensor(l->split, name, w, count));
  OK(ctx, dt_model_set_tensor(l->ref, name, w, count));
  OK(ctx, dt_model_get_tensor(l->split, name, back, count));
  CHECK(memcmp(w, back, count * sizeof *w) == 0);
}

static void test_layout(dt_context_t ctx, dt_comm_t world, int tp, const int* sizes, int n,
                        int zero) {
  layout_t l = make_layout(ctx, tp, sizes, n, zero);
  float worst, pd, ld, es = 0, er = 0, x[B * IN], ls[B * CLASSES], lr[B * CLASSES], *ps, *pr;
  int32_t labels[B];
  size_t np = 0, nr = 0;
  char dir[1200], name[96];

  worst = train(ctx, &l, 0, STEPS);
  ps = parameters(ctx, l.split, &np);
  pr = parameters(ctx, l.ref, &nr);
  CHECK(np == nr);
  pd = max_diff(ps, pr, np < nr ? np : nr);
  CHECK(pd < param_tol);
  for (int s = 0; s < B; ++s) sample(STEPS, s, x + s * IN, labels + s);
  OK(ctx, dt_mlp_predict(l.split, x, B, ls));
  OK(ctx, dt_mlp_predict(l.ref, x, B, lr));
  ld = max_diff(ls, lr, B * CLASSES) / max_abs(lr, B * CLASSES);
  CHECK(ld <= param_tol);
  OK(ctx, dt_mlp_evaluate(l.split, x, labels, B, &es));
  OK(ctx, dt_mlp_evaluate(l.ref, x, labels, B, &er));
  CHECK(within(es, er, param_tol));
  if (my_rank == 0)
    printf("%s tp=%d dp=%d layers=%d zero=%d: max relative loss/norm gap to one rank over %d "
           "steps %.3g, max |param diff| %.3g, logits within %.3g of the largest\n",
           precision, tp, l.dp_size, n - 1, zero, STEPS, worst, pd, ld);
  free(ps);
  free(pr);

  /* Tensors set whole read back whole: layer 0 (column-parallel, or replicated alone) and
   * layer 1 (row-parallel: sliced along its inputs); both models then train alike. */
  round_trip(ctx, &l, "layers.0.weight", (size_t)sizes[1] * IN);
  if (n > 2) round_trip(ctx, &l, "layers.1.weight", (size_t)sizes[2] * (size_t)sizes[1]);
  train(ctx, &l, STEPS, STEPS + 2);

  /* The split model's checkpoint loads into the one-rank model, and one written by a
   * one-rank model into the split one, bit for bit. */
  snprintf(name, sizeof name, "%s_tp%d_layers%d_zero%d", precision, tp, n - 1, zero);
  fresh_dir(ctx, world, name, dir, sizeof dir);
  OK(ctx, dt_model_save_checkpoint(l.split, dir, 0));
  OK(ctx, dt_model_load_checkpoint(l.ref, dir));
  CHECK(same_parameters(ctx, l.split, l.ref));
  expect_alike_after_steps(ctx, &l, STEPS + 2);
  snprintf(name, sizeof name, "ref_%s_tp%d_layers%d_zero%d_rank%d", precision, tp, n - 1, zero, my_rank);
  fresh_dir(ctx, world, name, dir, sizeof dir);
  OK(ctx, dt_model_save_checkpoint(l.ref, dir, 0));
  OK(ctx, dt_barrier(world));
  snprintf(name, sizeof name, "/ref_%s_tp%d_layers%d_zero%d_rank0", precision, tp, n - 1, zero);
  snprintf(dir, sizeof dir, "%s%s", scratch, name);
  OK(ctx, dt_model_load_checkpoint(l.split, dir));
  CHECK(same_parameters(ctx, l.split, l.ref));
  expect_alike_after_steps(ctx, &l, STEPS + 4);
  free_layout(ctx, &l);
}

static void test_refusals(dt_context_t ctx, int size) {
  dt_grid_t grid = NULL;
  dt_grid_config_t g = DT_GRID_CONFIG_INIT;
  const int odd[3] = {IN, 7, CLASSES}, good[3] = {IN, 8, CLASSES};
  dt_mlp_config_t mc = config(odd, 3, B);
  dt_model_t m = NULL;
  float x[B * IN];
  int32_t labels[B];

  g.tp = 2;
  OK(ctx, dt_grid_create(ctx, &g, &grid));
  FAILS(DT_ERR_INVALID_CONFIG, ctx, "must be divisible by the tensor-parallel size",
        dt_model_create_mlp_grid(grid, &mc, NULL, &m));
  CHECK(m == NULL);
  /* Different inputs on the ranks of one TP group: every rank refuses. */
  mc = config(good, 3, B);
  OK(ctx, dt_model_create_mlp_grid(grid, &mc, NULL, &m));
  for (int s = 0; s < B; ++s) sample(0, s + my_rank, x + s * IN, labels + s);
  EXPECT(DT_ERR_INVALID_ARGUMENT, ctx, dt_mlp_forward_backward(m, x, labels, B, NULL));
  MESSAGE(ctx, "different inputs");
  OK(ctx, dt_model_destroy(m));
  /* Under ZeRO 2 the call is collective over every rank of the model: all refuse. */
  {
    dt_optimizer_config_t oc = DT_OPTIMIZER_CONFIG_INIT;
    oc.zero_stage = 2;
    OK(ctx, dt_model_create_mlp_grid(grid, &mc, &oc, &m));
    EXPECT(DT_ERR_INVALID_ARGUMENT, ctx, dt_mlp_forward_backward(m, x, labels, B, NULL));
    MESSAGE(ctx, "different inputs");
    OK(ctx, dt_model_destroy(m));
  }
  OK(ctx, dt_grid_destroy(grid));

  g.tp = size / 2;
  g.pp = 2;
  OK(ctx, dt_grid_create(ctx, &g, &grid));
  FAILS(DT_ERR_NOT_IMPLEMENTED, ctx, "not cut into pipeline stages",
        dt_model_create_mlp_grid(grid, &mc, NULL, &m));
  CHECK(m == NULL);
  OK(ctx, dt_grid_destroy(grid));
}

int main(int argc, char** argv) {
  dt_context_t ctx = NULL;
  dt_comm_t world = NULL;
  int size = 0, status;
  /* column, row, replicated; column, row; replicated alone */
  const int three[4] = {IN, 8, 12, CLASSES}, two[3] = {IN, 12, CLASSES}, one[2] = {IN, CLASSES};
  const int four[MAX_SIZES] = {IN, 16, 9, 8, CLASSES}; /* column, row, column, row */
  status = start_with_scratch("test_capi_mlp_grid", &argc, &argv, &ctx, &world, &size);
  if (status != 0) return status;

  test_layout(ctx, world, 2, three, 4, 0);
  test_layout(ctx, world, 2, two, 3, 1);
  test_layout(ctx, world, 2, one, 2, 0);
  test_layout(ctx, world, 2, four, 5, 3);
  precision = "bf16"; /* 16-bit parameters and reduced gradients, fp32 masters */
  tol = 1e-4f;        /* a parameter rounded the other way at a 16-bit boundary moves the */
  param_tol = 1e-2f;  /* loss a little and that parameter by one 16-bit step */
  test_layout(ctx, world, 2, three, 4, 1);
  precision = "fp16"; /* with its loss scale, overflow agreed over the grid */
  test_layout(ctx, world, 2, four, 5, 0);
  precision = "fp32";
  tol = 1e-5f;
  param_tol = 1e-4f;
  if (size == 4) {
    test_layout(ctx, world, 2, three, 4, 2);
    test_layout(ctx, world, 4, four, 5, 1);
  }
  test_refusals(ctx, size);

  status = finish("capi_mlp_grid", ctx, world);
  OK(ctx, dt_finalize(ctx));
  return status;
}
