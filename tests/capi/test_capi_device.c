/* Built-in models on a GPU through the C ABI (config->device "cuda"): the same training on the
 * GPU and on the CPU in one program gives the same losses and gradient norms (within TOL
 * relative, step by step), parameters, evaluation and generation logits, under ZeRO 0 to 3;
 * a checkpoint written by the GPU model loads into a CPU model bit for bit and the other way
 * round; dt_model_device names each device. Where no GPU is usable, "cuda" must give
 * DT_ERR_UNAVAILABLE on every rank, and the program exits 77 (skipped).
 *   mpiexec -n N test_capi_device SCRATCH_DIR */
#define _XOPEN_SOURCE 700 /* nftw, mkdir */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "model_values.h"
#include "scratch_dir.h"

enum { STEPS = 6, B = 2, T = 8, VOCAB = 64, MIN = 6, MHID = 24, MCLASSES = 4, MB = 4 };
/* fp32 GEMMs on both devices (DTRAIN_CUDA_TF32=0): only the summation order and the exp and
 * tanh implementations differ. */
static const float TOL = 1e-4f;

static int relative_ok(float got, float want) { return fabsf(got - want) <= TOL * fabsf(want); }

/* The model's device description starts with `kind`. */
static void expect_device(dt_context_t ctx, dt_model_t m, const char* kind) {
  char name[256] = "";
  size_t length = 0;
  OK(ctx, dt_model_device(m, name, sizeof name, &length));
  CHECK(strncmp(name, kind, strlen(kind)) == 0);
  CHECK(length == strlen(name));
}

/* ---- GPT -------------------------------------------------------------------------------- */

static dt_result_t try_gpt(dt_comm_t world, const char* device, int zero, dt_model_t* m) {
  dt_gpt_config_t gc = DT_GPT_CONFIG_INIT;
  dt_optimizer_config_t oc = DT_OPTIMIZER_CONFIG_INIT;
  gc.layers = 2;
  gc.heads = 2;
  gc.d_model = 32;
  gc.seq_len = T;
  gc.vocab = VOCAB;
  gc.max_batch = B;
  gc.device = device;
  oc.zero_stage = zero;
  oc.bucket_mb = 0.02; /* several buckets */
  oc.clip_grad = 0.5f; /* clipping active: the norm must be the whole model's */
  return dt_model_create_gpt(world, &gc, &oc, m);
}

static dt_model_t make_gpt(dt_context_t ctx, dt_comm_t world, const char* device, int zero) {
  dt_model_t m = NULL;
  OK(ctx, try_gpt(world, device, zero, &m));
  return m;
}

/* This rank's micro-batch `micro` of step `step`: a learnable next-token pattern. */
static void gpt_batch(int step, int micro, int32_t* tokens, int32_t* targets) {
  for (int i = 0; i < B * T; ++i) {
    tokens[i] = (step * 7 + micro * 13 + my_rank * 29 + i * 5) % VOCAB;
    targets[i] = (tokens[i] * 3 + 1) % VOCAB;
  }
}

/* Steps [from, to) with 1 + step % 2 backward calls each; losses and norms per step. */
static void gpt_train(dt_context_t ctx, dt_model_t m, int from, int to, float* loss, float* norm) {
  int32_t tokens[B * T], targets[B * T];
  for (int step = from; step < to; ++step) {
    float sum = 0, l = 0;
    for (int micro = 0; micro <= step % 2; ++micro) {
      gpt_batch(step, micro, tokens, targets);
      OK(ctx, dt_gpt_forward_backward(m, tokens, targets, B, T, &l));
      sum += l;
    }
    OK(ctx, dt_model_step(m, 3e-3f, &norm[step]));
    loss[step] = sum;
  }
}

/* Next-token logits after a 5-token prompt and after one more token. */
static void gpt_decode(dt_context_t ctx, dt_model_t m, float* first, float* second) {
  const int32_t prompt[5] = {3, 14, 15, 9, 26}, next = 5;
  OK(ctx, dt_gpt_decode(m, prompt, 5, 1, first));
  OK(ctx, dt_gpt_decode(m, &next, 1, 0, second));
}

static void test_gpt(dt_context_t ctx, dt_comm_t world, int zero) {
  dt_model_t cpu = make_gpt(ctx, world, "cpu", zero), gpu = make_gpt(ctx, world, "cuda", zero);
  float lc[STEPS], nc[STEPS], lg[STEPS], ng[STEPS], ec = 0, eg = 0, worst = 0, pd, ld;
  float dc[2][VOCAB], dg[2][VOCAB];
  int32_t tokens[B * T], targets[B * T];
  size_t n = 0;
  float *pc, *pg;
  expect_device(ctx, cpu, "cpu");
  expect_device(ctx, gpu, "cuda");
  gpt_train(ctx, cpu, 0, STEPS, lc, nc);
  gpt_train(ctx, gpu, 0, STEPS, lg, ng);
  for (int s = 0; s < STEPS; ++s) {
    CHECK(relative_ok(lg[s], lc[s]));
    CHECK(relative_ok(ng[s], nc[s]));
    worst = worse(worst, worse(fabsf(lg[s] - lc[s]) / lc[s], fabsf(ng[s] - nc[s]) / nc[s]));
  }
  CHECK(lc[STEPS - 1] / 2 < lc[0]); /* it learns (the last step has 2 backward calls) */
  pc = parameters(ctx, cpu, &n);
  pg = parameters(ctx, gpu, &n);
  pd = max_diff(pc, pg, n);
  CHECK(pd < 1e-4f);
  gpt_batch(STEPS, 0, tokens, targets);
  OK(ctx, dt_gpt_evaluate(cpu, tokens, targets, B, T, &ec));
  OK(ctx, dt_gpt_evaluate(gpu, tokens, targets, B, T, &eg));
  CHECK(relative_ok(eg, ec));
  gpt_decode(ctx, cpu, dc[0], dc[1]);
  gpt_decode(ctx, gpu, dg[0], dg[1]);
  ld = worse(max_diff(dc[0], dg[0], VOCAB), max_diff(dc[1], dg[1], VOCAB));
  CHECK(ld <= TOL * max_abs(&dc[0][0], 2 * VOCAB));
  if (my_rank == 0)
    printf("gpt zero=%d: cuda vs cpu over %d steps: max relative loss/norm diff %.3g, max |param "
           "diff| %.3g, eval %.6f vs %.6f, max |logit diff| %.3g\n",
           zero, STEPS, worst, pd, eg, ec, ld);
  free(pc);
  free(pg);
  OK(ctx, dt_model_destroy(gpu));
  OK(ctx, dt_model_destroy(cpu));
}

/* A checkpoint of the GPU model loads into a CPU model bit for bit, and one of the CPU model
 * into a GPU model; each then trains on as its source would have. */
static void test_checkpoint_across_devices(dt_context_t ctx, dt_comm_t world, int zero) {
  const char* devices[2] = {"cuda", "cpu"};
  for (int from = 0; from < 2; ++from) {
    char dir[1100], name[64];
    dt_model_t a = make_gpt(ctx, world, devices[from], zero);
    dt_model_t b = make_gpt(ctx, world, devices[1 - from], zero);
    float la[STEPS], na[STEPS], lb[STEPS], nb[STEPS];
    long steps = 0;
    snprintf(name, sizeof name, "from_%s_zero%d", devices[from], zero);
    fresh_dir(ctx, world, name, dir, sizeof dir);
    gpt_train(ctx, a, 0, 3, la, na);
    OK(ctx, dt_model_save_checkpoint(a, dir, 0));
    OK(ctx, dt_model_load_checkpoint(b, dir));
    OK(ctx, dt_model_steps(b, &steps));
    CHECK(steps == 3);
    CHECK(same_parameters(ctx, a, b));
    gpt_train(ctx, a, 3, STEPS, la, na);
    gpt_train(ctx, b, 3, STEPS, lb, nb);
    for (int s = 3; s < STEPS; ++s) CHECK(relative_ok(lb[s], la[s]));
    OK(ctx, dt_model_destroy(a));
    OK(ctx, dt_model_destroy(b));
  }
  if (my_rank == 0) printf("gpt zero=%d: checkpoints cuda -> cpu and cpu -> cuda load bit for bit\n", zero);
}

/* ---- MLP -------------------------------------------------------------------------------- */

static dt_model_t make_mlp(dt_context_t ctx, dt_comm_t world, const char* device, int zero) {
  const int sizes[3] = {MIN, MHID, MCLASSES};
  dt_mlp_config_t mc = DT_MLP_CONFIG_INIT;
  dt_optimizer_config_t oc = DT_OPTIMIZER_CONFIG_INIT;
  dt_model_t m = NULL;
  mc.num_sizes = 3;
  mc.sizes = sizes;
  mc.max_batch = MB;
  mc.device = device;
  oc.zero_stage = zero;
  OK(ctx, dt_model_create_mlp(world, &mc, &oc, &m));
  return m;
}

static void mlp_batch(int step, float* x, int32_t* labels) {
  for (int i = 0; i < MB * MIN; ++i) x[i] = sinf(0.37f * (float)(i + 11 * step + 5 * my_rank));
  for (int i = 0; i < MB; ++i) labels[i] = (i + step + my_rank) % MCLASSES;
}

static void test_mlp(dt_context_t ctx, dt_comm_t world, int zero) {
  dt_model_t cpu = make_mlp(ctx, world, "cpu", zero), gpu = make_mlp(ctx, world, "cuda", zero);
  float x[MB * MIN], lc[MB * MCLASSES], lg[MB * MCLASSES];
  int32_t labels[MB];
  float worst = 0;
  expect_device(ctx, gpu, "cuda");
  for (int step = 0; step < STEPS; ++step) {
    float a = 0, b = 0, na = 0, nb = 0;
    mlp_batch(step, x, labels);
    OK(ctx, dt_mlp_forward_backward(cpu, x, labels, MB, &a));
    OK(ctx, dt_mlp_forward_backward(gpu, x, labels, MB, &b));
    OK(ctx, dt_model_step(cpu, 1e-2f, &na));
    OK(ctx, dt_model_step(gpu, 1e-2f, &nb));
    CHECK(relative_ok(b, a));
    CHECK(relative_ok(nb, na));
    worst = worse(worst, worse(fabsf(b - a) / a, fabsf(nb - na) / na));
  }
  mlp_batch(STEPS, x, labels);
  OK(ctx, dt_mlp_predict(cpu, x, MB, lc));
  OK(ctx, dt_mlp_predict(gpu, x, MB, lg));
  CHECK(max_diff(lc, lg, MB * MCLASSES) <= TOL * max_abs(lc, MB * MCLASSES));
  if (my_rank == 0)
    printf("mlp zero=%d: cuda vs cpu over %d steps: max relative loss/norm diff %.3g\n", zero,
           STEPS, worst);
  OK(ctx, dt_model_destroy(gpu));
  OK(ctx, dt_model_destroy(cpu));
}

int main(int argc, char** argv) {
  dt_context_t ctx = NULL;
  dt_comm_t world = NULL;
  dt_model_t probe = NULL;
  dt_result_t rc;
  int size = 0, status;
  status = start_with_scratch("test_capi_device", &argc, &argv, &ctx, &world, &size);
  if (status != 0) return status;

  rc = try_gpt(world, "cuda", 0, &probe);
  if (rc == DT_ERR_UNAVAILABLE) {
    /* The same answer on every rank, and nothing left behind. */
    MESSAGE(ctx, "cuda");
    CHECK(probe == NULL);
    status = finish("capi_device", ctx, world);
    OK(ctx, dt_finalize(ctx));
    if (status == 0 && my_rank == 0) printf("capi_device: no usable GPU: skipped\n");
    return status == 0 ? 77 : status;
  }
  EXPECT(DT_SUCCESS, ctx, rc);
  if (probe) OK(ctx, dt_model_destroy(probe));

  for (int zero = 0; zero <= 3; ++zero) {
    test_gpt(ctx, world, zero);
    test_mlp(ctx, world, zero);
  }
  test_checkpoint_across_devices(ctx, world, 0);
  test_checkpoint_across_devices(ctx, world, 3);

  status = finish("capi_device", ctx, world);
  OK(ctx, dt_finalize(ctx));
  return status;
}
