/* ZeRO 2 and 3 of the built-in models through the C ABI: the same data-parallel training with
 * zero_stage 2 or 3 reproduces zero_stage 0 step by step (loss and gradient norm within 1e-5
 * relative), with one or several backward calls per step (gradient accumulation); tensors
 * read and written under ZeRO 3 are whole; a ZeRO-3 checkpoint loads under ZeRO 0 and ZeRO 3
 * and both continue as the uninterrupted run. At 3 ranks the pieces are uneven.
 *   mpiexec -n N test_capi_zero SCRATCH_DIR */
#define _XOPEN_SOURCE 700 /* nftw, mkdir */
#include <ftw.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "check.h"
#include "model_values.h"
#include "scratch_dir.h"

enum { STEPS = 12, B = 2, T = 8, VOCAB = 64, MIN = 6, MHID = 300, MCLASSES = 4, MB = 4 };
static const float TOL = 1e-5f; /* relative, per step */

/* Backward calls of a step: 1, 2, 3, 1, 2, 3, ... (accumulation from the second step on). */
static int micro_steps(int step) { return 1 + step % 3; }

static int relative_ok(float got, float want) { return fabsf(got - want) <= TOL * fabsf(want); }

/* A training curve: this rank's loss (sum over its micro-batches) and the gradient norm. */
typedef struct {
  float loss[STEPS], norm[STEPS];
} curve_t;

static float curve_diff(const curve_t* a, const curve_t* b, int* ok) {
  float worst = 0;
  *ok = 1;
  for (int s = 0; s < STEPS; ++s) {
    worst = worse(worst, fabsf(a->loss[s] - b->loss[s]) / fabsf(b->loss[s]));
    worst = worse(worst, fabsf(a->norm[s] - b->norm[s]) / fabsf(b->norm[s]));
    *ok = *ok && relative_ok(a->loss[s], b->loss[s]) && relative_ok(a->norm[s], b->norm[s]);
  }
  return worst;
}

/* ---- GPT -------------------------------------------------------------------------------- */

static dt_model_t make_gpt(dt_context_t ctx, dt_comm_t world, int zero, int tied) {
  dt_gpt_config_t gc = DT_GPT_CONFIG_INIT;
  dt_optimizer_config_t oc = DT_OPTIMIZER_CONFIG_INIT;
  dt_model_t m = NULL;
  gc.layers = 2;
  gc.heads = 2;
  gc.d_model = 32; /* blocks of ~12k floats: several pages to split over the ranks */
  gc.seq_len = T;
  gc.vocab = VOCAB;
  gc.tie_embeddings = tied;
  gc.max_batch = B;
  oc.zero_stage = zero;
  oc.bucket_mb = 0.02; /* several buckets under ZeRO 2 */
  oc.clip_grad = 0.5f; /* clipping active: the norm must be the whole model's */
  OK(ctx, dt_model_create_gpt(world, &gc, &oc, &m));
  return m;
}

/* This rank's micro-batch `micro` of step `step`: a learnable next-token pattern. */
static void gpt_batch(int step, int micro, int32_t* tokens, int32_t* targets) {
  for (int i = 0; i < B * T; ++i) {
    tokens[i] = (step * 7 + micro * 13 + my_rank * 29 + i * 5) % VOCAB;
    targets[i] = (tokens[i] * 3 + 1) % VOCAB;
  }
}

static void gpt_train(dt_context_t ctx, dt_model_t m, int from, int to, curve_t* c) {
  int32_t tokens[B * T], targets[B * T];
  for (int step = from; step < to; ++step) {
    float sum = 0, loss = 0, norm = 0;
    for (int micro = 0; micro < micro_steps(step); ++micro) {
      gpt_batch(step, micro, tokens, targets);
      OK(ctx, dt_gpt_forward_backward(m, tokens, targets, B, T, &loss));
      sum += loss;
    }
    OK(ctx, dt_model_step(m, 3e-3f, &norm));
    c->loss[step] = sum;
    c->norm[step] = norm;
  }
}

static void test_gpt_stages(dt_context_t ctx, dt_comm_t world, int tied) {
  curve_t c0, c[2];
  dt_model_t ref = make_gpt(ctx, world, 0, tied);
  size_t n = 0;
  float* p0;
  gpt_train(ctx, ref, 0, STEPS, &c0);
  p0 = parameters(ctx, ref, &n);
  CHECK(c0.loss[STEPS - 1] / micro_steps(STEPS - 1) < c0.loss[0]);
  for (int zero = 2; zero <= 3; ++zero) {
    dt_model_t m = make_gpt(ctx, world, zero, tied);
    int ok = 0;
    float worst, pd, *p;
    gpt_train(ctx, m, 0, STEPS, &c[zero - 2]);
    worst = curve_diff(&c[zero - 2], &c0, &ok);
    CHECK(ok);
    p = parameters(ctx, m, &n); /* whole tensors under ZeRO 3 too */
    pd = max_diff(p, p0, n);
    CHECK(pd < 1e-4f);
    if (my_rank == 0)
      printf("gpt tied=%d zero=%d: max relative diff of loss/grad norm vs zero 0 over %d steps = %.3g; "
             "max |param diff| = %.3g\n", tied, zero, STEPS, worst, pd);
    free(p);
    OK(ctx, dt_model_destroy(m));
  }
  free(p0);
  OK(ctx, dt_model_destroy(ref));
}

/* Tensor access under ZeRO 3: whole tensors out (collective: the units are gathered), whole
 * tensors in (local: each rank writes its own pieces). */
static void test_gpt_tensors(dt_context_t ctx, dt_comm_t world) {
  dt_model_t z0 = make_gpt(ctx, world, 0, 1), z3 = make_gpt(ctx, world, 3, 1);
  enum { N = 3 * 32 * 32 };
  static float a[N], b[N], v[N];
  int count = 0;
  curve_t c;
  gpt_train(ctx, z0, 0, 2, &c);
  gpt_train(ctx, z3, 0, 2, &c);
  OK(ctx, dt_model_get_tensor(z0, "h.1.attn.c_attn.weight", a, N));
  OK(ctx, dt_model_get_tensor(z3, "h.1.attn.c_attn.weight", b, N));
  CHECK(max_diff(a, b, N) < 1e-5f);
  for (int i = 0; i < N; ++i) v[i] = 0.001f * (float)(i % 97) - 0.05f;
  OK(ctx, dt_model_set_tensor(z3, "h.1.attn.c_attn.weight", v, N));
  OK(ctx, dt_model_set_tensor(z0, "h.1.attn.c_attn.weight", v, N));
  OK(ctx, dt_model_get_tensor(z3, "h.1.attn.c_attn.weight", b, N));
  CHECK(memcmp(v, b, sizeof v) == 0);
  OK(ctx, dt_model_num_tensors(z3, &count));
  CHECK(count > 0);
  {
    /* Both continue alike from the values set. */
    curve_t c0, c3;
    int ok = 0;
    gpt_train(ctx, z0, 2, 6, &c0);
    gpt_train(ctx, z3, 2, 6, &c3);
    for (int s = 2; s < 6; ++s) CHECK(relative_ok(c3.loss[s], c0.loss[s]));
    (void)ok;
  }
  OK(ctx, dt_model_destroy(z0));
  OK(ctx, dt_model_destroy(z3));
}

/* A ZeRO-3 checkpoint loads under ZeRO 0 and under ZeRO 3; both continue as the run that
 * was never interrupted, and the ZeRO-3 resume exactly so. */
static void test_gpt_checkpoint(dt_context_t ctx, dt_comm_t world) {
  enum { SAVE = 5 };
  char dir[1100];
  curve_t whole, r0, r3;
  dt_model_t a = make_gpt(ctx, world, 3, 1);
  dt_model_t b0 = make_gpt(ctx, world, 0, 1), b3 = make_gpt(ctx, world, 3, 1);
  long steps = 0;
  size_t n = 0;
  float *pa, *pb;
  float worst = 0;
  fresh_dir(ctx, world, "gpt_zero3", dir, sizeof dir);
  gpt_train(ctx, a, 0, SAVE, &whole);
  OK(ctx, dt_model_save_checkpoint(a, dir, 0));
  pa = parameters(ctx, a, &n);
  gpt_train(ctx, a, SAVE, STEPS, &whole);

  OK(ctx, dt_model_load_checkpoint(b0, dir));
  OK(ctx, dt_model_load_checkpoint(b3, dir));
  OK(ctx, dt_model_steps(b0, &steps));
  CHECK(steps == SAVE);
  pb = parameters(ctx, b0, &n);
  CHECK(memcmp(pa, pb, n * sizeof *pa) == 0);
  free(pb);
  pb = parameters(ctx, b3, &n);
  CHECK(memcmp(pa, pb, n * sizeof *pa) == 0);
  free(pb);
  gpt_train(ctx, b0, SAVE, STEPS, &r0);
  gpt_train(ctx, b3, SAVE, STEPS, &r3);
  for (int s = SAVE; s < STEPS; ++s) {
    CHECK(relative_ok(r0.loss[s], whole.loss[s]));
    CHECK(r3.loss[s] == whole.loss[s]);
    worst = worse(worst, fabsf(r0.loss[s] - whole.loss[s]) / whole.loss[s]);
  }
  if (my_rank == 0)
    printf("gpt: zero 3 checkpoint at step %d resumed under zero 0: max relative loss diff = %.3g\n",
           SAVE, worst);
  free(pa);
  OK(ctx, dt_model_destroy(a));
  OK(ctx, dt_model_destroy(b0));
  OK(ctx, dt_model_destroy(b3));
}

/* ---- MLP -------------------------------------------------------------------------------- */

static dt_model_t make_mlp(dt_context_t ctx, dt_comm_t world, int zero) {
  const int sizes[3] = {MIN, MHID, MCLASSES}; /* ~2k floats a weight: uneven pieces */
  dt_mlp_config_t mc = DT_MLP_CONFIG_INIT;
  dt_optimizer_config_t oc = DT_OPTIMIZER_CONFIG_INIT;
  dt_model_t m = NULL;
  mc.num_sizes = 3;
  mc.sizes = sizes;
  mc.max_batch = MB;
  oc.zero_stage = zero;
  oc.clip_grad = 0.5f;
  OK(ctx, dt_model_create_mlp(world, &mc, &oc, &m));
  return m;
}

static void mlp_train(dt_context_t ctx, dt_model_t m, curve_t* c) {
  float x[MB * MIN];
  int32_t y[MB];
  for (int step = 0; step < STEPS; ++step) {
    float sum = 0, loss = 0, norm = 0;
    for (int micro = 0; micro < micro_steps(step); ++micro) {
      for (int s = 0; s < MB; ++s) {
        const int id = ((step * 3 + micro) * 8 + my_rank) * MB + s;
        float acc = 0;
        for (int i = 0; i < MIN; ++i) acc += (x[s * MIN + i] = sinf(0.7f * (float)(id * MIN + i)));
        y[s] = acc > 1.0f ? 3 : (acc > 0.0f ? 2 : (acc > -1.0f ? 1 : 0));
      }
      OK(ctx, dt_mlp_forward_backward(m, x, y, MB, &loss));
      sum += loss;
    }
    OK(ctx, dt_model_step(m, 1e-2f, &norm));
    c->loss[step] = sum;
    c->norm[step] = norm;
  }
}

static void test_mlp_stages(dt_context_t ctx, dt_comm_t world) {
  curve_t c0, c;
  dt_model_t ref = make_mlp(ctx, world, 0);
  size_t n = 0;
  float* p0;
  mlp_train(ctx, ref, &c0);
  p0 = parameters(ctx, ref, &n);
  for (int zero = 2; zero <= 3; ++zero) {
    dt_model_t m = make_mlp(ctx, world, zero);
    int ok = 0;
    float worst, pd, eval = 0, eval0 = 0, *p;
    float x[MB * MIN];
    int32_t y[MB] = {0, 1, 2, 3};
    mlp_train(ctx, m, &c);
    worst = curve_diff(&c, &c0, &ok);
    CHECK(ok);
    p = parameters(ctx, m, &n);
    pd = max_diff(p, p0, n);
    CHECK(pd < 1e-4f);
    for (int i = 0; i < MB * MIN; ++i) x[i] = cosf((float)i);
    OK(ctx, dt_mlp_evaluate(m, x, y, MB, &eval));
    OK(ctx, dt_mlp_evaluate(ref, x, y, MB, &eval0));
    CHECK(relative_ok(eval, eval0));
    if (my_rank == 0)
      printf("mlp zero=%d: max relative diff of loss/grad norm vs zero 0 over %d steps = %.3g; "
             "max |param diff| = %.3g\n", zero, STEPS, worst, pd);
    free(p);
    OK(ctx, dt_model_destroy(m));
  }
  free(p0);
  OK(ctx, dt_model_destroy(ref));
}

/* One rank's bad argument to a call that is collective under ZeRO 2/3 fails that call on
 * every rank, with the failing rank's message, instead of leaving the others waiting. */
static void test_bad_input_fails_everywhere(dt_context_t ctx, dt_comm_t world, int size) {
  int32_t tokens[B * T], targets[B * T];
  static float dst[3 * 32 * 32];
  dt_model_t z2, z3;
  float loss = 0;
  if (size < 2) return;
  z2 = make_gpt(ctx, world, 2, 1);
  z3 = make_gpt(ctx, world, 3, 1);
  gpt_batch(0, 0, tokens, targets);
  if (my_rank == 1) tokens[3] = VOCAB; /* out of range on one rank only */
  FAILS(DT_ERR_INVALID_ARGUMENT, ctx, "rank 1: tokens[3]",
        dt_gpt_forward_backward(z2, tokens, targets, B, T, &loss));
  FAILS(DT_ERR_INVALID_ARGUMENT, ctx, "rank 1: tokens[3]",
        dt_gpt_evaluate(z3, tokens, targets, B, T, &loss));
  FAILS(DT_ERR_INVALID_ARGUMENT, ctx, "rank 1: dst must not be NULL",
        dt_model_get_tensor(z3, "h.1.attn.c_attn.weight", my_rank == 1 ? NULL : dst, 3 * 32 * 32));
  gpt_batch(0, 0, tokens, targets);
  FAILS(DT_ERR_INVALID_ARGUMENT, ctx, "rank 1: loss must not be NULL",
        dt_gpt_evaluate(z3, tokens, targets, B, T, my_rank == 1 ? NULL : &loss));
  /* and the models still work afterwards */
  OK(ctx, dt_gpt_forward_backward(z2, tokens, targets, B, T, &loss));
  OK(ctx, dt_model_get_tensor(z3, "h.1.attn.c_attn.weight", dst, 3 * 32 * 32));
  OK(ctx, dt_model_destroy(z2));
  OK(ctx, dt_model_destroy(z3));
}

int main(int argc, char** argv) {
  dt_context_t ctx = NULL;
  dt_comm_t world = NULL;
  int size = 0, status;
  status = start_with_scratch("test_capi_zero", &argc, &argv, &ctx, &world, &size);
  if (status != 0) return status;
  {
    /* Stages beyond 3 do not exist. */
    dt_optimizer_config_t oc = DT_OPTIMIZER_CONFIG_INIT;
    dt_gpt_config_t gc = DT_GPT_CONFIG_INIT;
    dt_model_t m = NULL;
    oc.zero_stage = 4;
    FAILS(DT_ERR_INVALID_CONFIG, ctx, "zero_stage must be 0, 1, 2 or 3",
          dt_model_create_gpt(world, &gc, &oc, &m));
    CHECK(m == NULL);
  }
  test_gpt_stages(ctx, world, 1);
  test_gpt_stages(ctx, world, 0);
  test_gpt_tensors(ctx, world);
  test_gpt_checkpoint(ctx, world);
  test_mlp_stages(ctx, world);
  test_bad_input_fails_everywhere(ctx, world, size);
  status = finish("capi_zero", ctx, world);
  OK(ctx, dt_finalize(ctx));
  return status != 0 || failures != 0;
}
