/* Mixed precision of the built-in GPT (and MLP, test_mlp) through the C ABI
 * (config->precision): a bf16 and an
 * fp16 model train as the fp32 model does (every step's loss within BOUND relative, ZeRO 0 to
 * 3, alongside an fp32 model in the same process); the parameters they compute
 * with are exact 16-bit values while the checkpoint keeps the fp32 master weights (a model in
 * fp32 loading it gets values that round to the 16-bit ones, and some that are not 16-bit
 * values themselves); a tensor set in full precision reaches the masters; an fp16 step whose
 * gradients overflow is skipped on every rank (NaN norm, parameters and step count unchanged,
 * the loss scale halved, and a checkpoint carries it);
 * an unknown precision is refused.
 *   mpiexec -n N test_capi_precision SCRATCH_DIR */
#define _XOPEN_SOURCE 700 /* nftw, mkdir */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "half_words.h"
#include "model_values.h"
#include "scratch_dir.h"

enum { STEPS = 10, B = 2, T = 8, VOCAB = 64, C = 32 };
/* The loss gap 16-bit arithmetic may leave after STEPS steps of this model: measured at most
 * 2.8e-4 in bf16 and 2.1e-4 in fp16 on the CPU, 1.5e-4 and 6.1e-5 on the CUDA emulator
 * (docs/c-api.md); a GPU's tensor cores round the activations too. */
static const float BOUND = 5e-3f;
/* The gradient norm's: every gradient is rounded to 16 bits (bf16's unit roundoff 3.9e-3);
 * measured at most 2.7e-3 for the MLP (the emulator, bf16). An unscaled fp16 norm would be
 * off by the loss scale. */
static const float NORM_BOUND = 5e-2f;

static dt_model_t make_gpt(dt_context_t ctx, dt_comm_t world, const char* precision, int zero) {
  dt_gpt_config_t gc = DT_GPT_CONFIG_INIT;
  dt_optimizer_config_t oc = DT_OPTIMIZER_CONFIG_INIT;
  dt_model_t m = NULL;
  gc.layers = 2;
  gc.heads = 2;
  gc.d_model = C;
  gc.seq_len = T;
  gc.vocab = VOCAB;
  gc.max_batch = B;
  gc.precision = precision;
  oc.zero_stage = zero;
  OK(ctx, dt_model_create_gpt(world, &gc, &oc, &m));
  return m;
}

static void batch(int step, int32_t* tokens, int32_t* targets) {
  for (int i = 0; i < B * T; ++i) {
    tokens[i] = (step * 7 + my_rank * 29 + i * 5) % VOCAB;
    targets[i] = (tokens[i] * 3 + 1) % VOCAB;
  }
}

static float train_step(dt_context_t ctx, dt_model_t m, int step, float* norm) {
  int32_t tokens[B * T], targets[B * T];
  float loss = 0;
  batch(step, tokens, targets);
  OK(ctx, dt_gpt_forward_backward(m, tokens, targets, B, T, &loss));
  OK(ctx, dt_model_step(m, 3e-3f, norm));
  return loss;
}

/* The 16-bit model and an fp32 model side by side (in turns, one process): losses agree to
 * BOUND; the 16-bit model's parameters are 16-bit values. */
static void test_curves(dt_context_t ctx, dt_comm_t world, const char* precision, int zero) {
  dt_model_t ref = make_gpt(ctx, world, "fp32", zero), low = make_gpt(ctx, world, precision, zero);
  float worst = 0, nr = 0, nl = 0, *p;
  size_t n = 0, inexact = 0;
  for (int step = 0; step < STEPS; ++step) {
    const float lr = train_step(ctx, ref, step, &nr), ll = train_step(ctx, low, step, &nl);
    CHECK(fabsf(ll - lr) <= BOUND * lr);
    CHECK(isfinite(nl));
    worst = worse(worst, fabsf(ll - lr) / lr);
  }
  {
    float scale = 0;
    long skipped = -1;
    OK(ctx, dt_model_loss_scale(ref, &scale, &skipped));
    CHECK(scale == 1.0f && skipped == 0); /* no scaling outside fp16 */
  }
  p = parameters(ctx, low, &n);
  for (size_t i = 0; i < n; ++i) inexact += p[i] != round_to(precision, p[i]);
  CHECK(inexact == 0);
  free(p);
  if (my_rank == 0)
    printf("%s zero=%d: max relative loss gap to fp32 over %d steps %.3g; every parameter a %s value\n",
           precision, zero, STEPS, worst, precision);
  OK(ctx, dt_model_destroy(low));
  OK(ctx, dt_model_destroy(ref));
}

/* The checkpoint keeps the masters: an fp32 model loading it holds values that round to the
 * 16-bit model's and are not all 16-bit values; a 16-bit model loading it continues exactly as
 * the saved one. A tensor set in full precision reaches the masters (the next checkpoint). */
static void test_masters(dt_context_t ctx, dt_comm_t world, const char* precision) {
  char dir[1100], name[64];
  dt_model_t low = make_gpt(ctx, world, precision, 1), back = make_gpt(ctx, world, precision, 1);
  dt_model_t full = make_gpt(ctx, world, "fp32", 1);
  float norm = 0, *pl, *pf, *pb, bias[C];
  size_t n = 0, differ = 0, not16 = 0;
  snprintf(name, sizeof name, "masters_%s", precision);
  fresh_dir(ctx, world, name, dir, sizeof dir);
  for (int step = 0; step < 4; ++step) train_step(ctx, low, step, &norm);
  for (int i = 0; i < C; ++i) bias[i] = 0.1f + 1e-5f * (float)i; /* not 16-bit values */
  OK(ctx, dt_model_set_tensor(low, "h.1.ln_2.bias", bias, C));
  OK(ctx, dt_model_save_checkpoint(low, dir, 0));
  OK(ctx, dt_model_load_checkpoint(full, dir));
  OK(ctx, dt_model_load_checkpoint(back, dir));
  pl = parameters(ctx, low, &n);
  pf = parameters(ctx, full, &n);
  pb = parameters(ctx, back, &n);
  for (size_t i = 0; i < n; ++i) {
    differ += round_to(precision, pf[i]) != pl[i];
    not16 += pf[i] != round_to(precision, pf[i]);
  }
  CHECK(differ == 0);
  CHECK(not16 > 0);
  CHECK(memcmp(pl, pb, n * sizeof *pl) == 0);
  {
    float got[C];
    OK(ctx, dt_model_get_tensor(full, "h.1.ln_2.bias", got, C));
    CHECK(memcmp(got, bias, sizeof got) == 0); /* the masters took the full values */
    OK(ctx, dt_model_get_tensor(low, "h.1.ln_2.bias", got, C));
    for (int i = 0; i < C; ++i) CHECK(got[i] == round_to(precision, bias[i]));
  }
  for (int step = 4; step < 7; ++step) {
    float a = 0, b = 0;
    CHECK(train_step(ctx, low, step, &a) == train_step(ctx, back, step, &b));
    CHECK(a == b);
  }
  if (my_rank == 0)
    printf("%s: checkpoint holds the fp32 masters (%zu of %zu values are not %s values); resumed "
           "bit for bit\n", precision, not16, n, precision);
  free(pl);
  free(pf);
  free(pb);
  OK(ctx, dt_model_destroy(low));
  OK(ctx, dt_model_destroy(back));
  OK(ctx, dt_model_destroy(full));
}

/* fp16: gradients that overflow (rank 0's token embedding, which is also the LM head, made
 * huge: the scaled gradients pass fp16's 65504) skip the step on every rank: NaN norm,
 * parameters and step count unchanged; training goes on afterwards. */
static void test_overflow(dt_context_t ctx, dt_comm_t world) {
  dt_model_t m = make_gpt(ctx, world, "fp16", 1);
  static float wte[VOCAB * C], huge[VOCAB * C];
  float norm = 0, *before, *after;
  long steps = 0;
  size_t n = 0;
  train_step(ctx, m, 0, &norm);
  OK(ctx, dt_model_get_tensor(m, "wte", wte, VOCAB * C));
  for (int i = 0; i < VOCAB * C; ++i) huge[i] = my_rank == 0 ? 3e4f : wte[i];
  OK(ctx, dt_model_set_tensor(m, "wte", huge, VOCAB * C));
  before = parameters(ctx, m, &n);
  train_step(ctx, m, 1, &norm);
  CHECK(isnan(norm));
  after = parameters(ctx, m, &n);
  CHECK(memcmp(before, after, n * sizeof *before) == 0);
  OK(ctx, dt_model_steps(m, &steps));
  CHECK(steps == 1);
  {
    float scale = 0;
    long skipped = -1;
    char dir[1100];
    dt_model_t other = make_gpt(ctx, world, "fp16", 1);
    OK(ctx, dt_model_loss_scale(m, &scale, &skipped));
    CHECK(scale == 32768.0f && skipped == 1); /* halved from 2^16 */
    OK(ctx, dt_model_loss_scale(other, &scale, &skipped));
    CHECK(scale == 65536.0f && skipped == 0);
    fresh_dir(ctx, world, "loss_scale", dir, sizeof dir);
    OK(ctx, dt_model_save_checkpoint(m, dir, 0));
    OK(ctx, dt_model_load_checkpoint(other, dir));
    OK(ctx, dt_model_loss_scale(other, &scale, NULL));
    CHECK(scale == 32768.0f); /* the checkpoint carries the scale */
    OK(ctx, dt_model_destroy(other));
  }
  OK(ctx, dt_model_set_tensor(m, "wte", wte, VOCAB * C));
  train_step(ctx, m, 2, &norm);
  CHECK(isfinite(norm));
  OK(ctx, dt_model_steps(m, &steps));
  CHECK(steps == 2);
  free(before);
  free(after);
  OK(ctx, dt_model_destroy(m));
}

/* The MLP in 16 bits (config->precision) trains as the fp32 MLP does (losses within BOUND),
 * computes with 16-bit parameters, scales the loss in fp16 only, and checkpoints the fp32
 * masters (an fp32 MLP loading them holds values that round to the 16-bit ones). */
static dt_model_t make_mlp(dt_context_t ctx, dt_comm_t world, const char* precision, int zero) {
  static const int sizes[3] = {6, 16, 3};
  dt_mlp_config_t mc = DT_MLP_CONFIG_INIT;
  dt_optimizer_config_t oc = DT_OPTIMIZER_CONFIG_INIT;
  dt_model_t m = NULL;
  mc.sizes = sizes;
  mc.num_sizes = 3;
  mc.max_batch = 8;
  mc.precision = precision;
  oc.zero_stage = zero;
  OK(ctx, dt_model_create_mlp(world, &mc, &oc, &m));
  return m;
}

static float mlp_step(dt_context_t ctx, dt_model_t m, int step, float* norm) {
  float x[8 * 6], loss = 0;
  int32_t labels[8];
  for (int i = 0; i < 8; ++i) {
    for (int j = 0; j < 6; ++j) x[i * 6 + j] = 0.1f * (float)((step + i * 3 + j * 5 + my_rank) % 7) - 0.3f;
    labels[i] = (i + step) % 3;
  }
  OK(ctx, dt_mlp_forward_backward(m, x, labels, 8, &loss));
  OK(ctx, dt_model_step(m, 1e-2f, norm));
  return loss;
}

static void test_mlp(dt_context_t ctx, dt_comm_t world, const char* precision, int zero) {
  dt_model_t ref = make_mlp(ctx, world, "fp32", zero), low = make_mlp(ctx, world, precision, zero);
  dt_model_t full = make_mlp(ctx, world, "fp32", zero);
  float worst = 0, worst_norm = 0, nr = 0, nl = 0, scale = 0, *p, *pf;
  size_t n = 0, inexact = 0, differ = 0, not16 = 0;
  char dir[1100], name[64];
  for (int step = 0; step < STEPS; ++step) {
    const float lr = mlp_step(ctx, ref, step, &nr), ll = mlp_step(ctx, low, step, &nl);
    CHECK(fabsf(ll - lr) <= BOUND * lr);
    CHECK(fabsf(nl - nr) <= NORM_BOUND * nr); /* fp16: the norm of the unscaled gradients */
    worst = worse(worst, fabsf(ll - lr) / lr);
    worst_norm = worse(worst_norm, fabsf(nl - nr) / nr);
  }
  OK(ctx, dt_model_loss_scale(low, &scale, NULL));
  CHECK(scale == (strcmp(precision, "fp16") == 0 ? 65536.0f : 1.0f));
  {
    /* Evaluation and prediction compute with the 16-bit parameters too. */
    float x[8 * 6], el = 0, er = 0, logits[8 * 3];
    int32_t labels[8];
    for (int i = 0; i < 8 * 6; ++i) x[i] = 0.05f * (float)(i % 11) - 0.2f;
    for (int i = 0; i < 8; ++i) labels[i] = i % 3;
    OK(ctx, dt_mlp_evaluate(low, x, labels, 8, &el));
    OK(ctx, dt_mlp_evaluate(ref, x, labels, 8, &er));
    CHECK(fabsf(el - er) <= BOUND * er);
    OK(ctx, dt_mlp_predict(low, x, 8, logits));
    CHECK(isfinite(logits[0]) && isfinite(logits[8 * 3 - 1]));
  }
  p = parameters(ctx, low, &n);
  for (size_t i = 0; i < n; ++i) inexact += p[i] != round_to(precision, p[i]);
  CHECK(inexact == 0);
  snprintf(name, sizeof name, "mlp_%s_zero%d", precision, zero);
  fresh_dir(ctx, world, name, dir, sizeof dir);
  OK(ctx, dt_model_save_checkpoint(low, dir, 0));
  OK(ctx, dt_model_load_checkpoint(full, dir));
  pf = parameters(ctx, full, &n);
  for (size_t i = 0; i < n; ++i) {
    differ += round_to(precision, pf[i]) != p[i];
    not16 += pf[i] != round_to(precision, pf[i]);
  }
  CHECK(differ == 0);
  CHECK(not16 > 0); /* the masters, not the rounded values */
  if (my_rank == 0)
    printf("mlp %s zero=%d: max relative loss gap to fp32 over %d steps %.3g, norm gap %.3g; every "
           "parameter a %s value, the checkpoint's masters round to them\n", precision, zero, STEPS,
           worst, worst_norm, precision);
  free(p);
  free(pf);
  OK(ctx, dt_model_destroy(full));
  OK(ctx, dt_model_destroy(low));
  OK(ctx, dt_model_destroy(ref));
}

/* ---- a byom holding 16-bit tensors ------------------------------------------------------
 * The program's parameters and gradients are bf16 or fp16 words; dtrain keeps fp32 masters. */

enum { NW = 24, SAMPLES = 8 };

/* Gradient of 0.5 * mean |w . x_s - y_s|^2 over this rank's samples, at the values w. */
static void regression_grad(const float* w, float* g) {
  memset(g, 0, sizeof(float) * NW);
  for (int s = my_rank * SAMPLES; s < (my_rank + 1) * SAMPLES; ++s) {
    float e = -cosf(0.3f * (float)s);
    for (int i = 0; i < NW; ++i) e += w[i] * sinf(0.1f * (float)(s * NW + i));
    for (int i = 0; i < NW; ++i) g[i] += e * sinf(0.1f * (float)(s * NW + i)) / SAMPLES;
  }
}

/* The program's gradient words at its words w16. */
static void gradient_words(const char* fmt, const uint16_t* w16, uint16_t* g16) {
  float w[NW], g[NW];
  for (int i = 0; i < NW; ++i) w[i] = decode16(fmt, w16[i]);
  regression_grad(w, g);
  for (int i = 0; i < NW; ++i) g16[i] = encode16(fmt, round_to(fmt, g[i]));
}

/* The same model trained by a byom of 16-bit words and by one of fp32 values (ZeRO `zero`) at
 * a learning rate whose updates are below half a 16-bit step: the fp32 masters collect them,
 * so the 16-bit values move (without masters they would stay where they started) and stay
 * the rounded fp32 run. The checkpoint holds the masters, and a 16-bit byom resumed from it
 * goes on bit for bit. A value the program writes replaces the tensor's masters. fp16: a
 * step whose gradients overflowed is skipped. */
static void test_byom16(dt_context_t ctx, dt_comm_t world, const char* fmt, int zero) {
  const dt_dtype_t dtype = strcmp(fmt, "bf16") == 0 ? DT_BF16 : DT_F16;
  const int64_t shape[1] = {NW};
  const float lr = strcmp(fmt, "bf16") == 0 ? 2e-4f : 2e-5f; /* under half a step at 0.5 */
  dt_optimizer_config_t oc = DT_OPTIMIZER_CONFIG_INIT;
  dt_byom_t low = NULL, full = NULL, loaded = NULL, resumed = NULL;
  uint16_t w16[NW], g16[NW], start[NW], r16[NW] = {0}, rg16[NW];
  float wf[NW], gf[NW], back[NW], gback[NW] = {0};
  int moved = 0, off = 0, masters = 0;
  long steps = 0;
  char dir[1100], name[64];
  oc.zero_stage = zero;
  for (int i = 0; i < NW; ++i) {
    wf[i] = round_to(fmt, 0.5f + 0.01f * (float)i);
    w16[i] = start[i] = encode16(fmt, wf[i]);
  }
  OK(ctx, dt_byom_create(world, &oc, &low));
  OK(ctx, dt_byom_create(world, &oc, &full));
  OK(ctx, dt_byom_register(low, "w", 1, shape, dtype, w16, g16, 0));
  OK(ctx, dt_byom_register(full, "w", 1, shape, DT_F32, wf, gf, 0));
  /* A checkpoint before the first step (it takes the program's values as the masters). */
  snprintf(name, sizeof name, "byom16_%s_zero%d_start", fmt, zero);
  fresh_dir(ctx, world, name, dir, sizeof dir);
  OK(ctx, dt_byom_save_checkpoint(low, dir, 0));
  for (int step = 0; step < 40; ++step) {
    gradient_words(fmt, w16, g16);
    regression_grad(wf, gf);
    OK(ctx, dt_byom_step(low, lr, NULL));
    OK(ctx, dt_byom_step(full, lr, NULL));
  }
  for (int i = 0; i < NW; ++i) {
    moved += w16[i] != start[i];
    off += fabsf(decode16(fmt, w16[i]) - wf[i]) > ldexpf(fabsf(wf[i]), strcmp(fmt, "bf16") == 0 ? -6 : -9);
  }
  CHECK(moved == NW); /* every master collected updates below half a 16-bit step */
  CHECK(off == 0);    /* and follows the fp32 run within four 16-bit steps */

  /* The checkpoint holds the masters: an fp32 byom loading it gets values that round to the
   * program's words and are not all 16-bit values; a 16-bit byom loading it holds the same
   * words and steps on exactly as the saved one. */
  snprintf(name, sizeof name, "byom16_%s_zero%d", fmt, zero);
  fresh_dir(ctx, world, name, dir, sizeof dir);
  OK(ctx, dt_byom_save_checkpoint(low, dir, 0));
  OK(ctx, dt_byom_create(world, &oc, &loaded));
  OK(ctx, dt_byom_register(loaded, "w", 1, shape, DT_F32, back, gback, 0));
  OK(ctx, dt_byom_load_checkpoint(loaded, dir));
  for (int i = 0; i < NW; ++i) {
    CHECK(encode16(fmt, round_to(fmt, back[i])) == w16[i]);
    masters += back[i] != round_to(fmt, back[i]);
  }
  CHECK(masters > 0);
  OK(ctx, dt_byom_create(world, &oc, &resumed));
  OK(ctx, dt_byom_register(resumed, "w", 1, shape, dtype, r16, rg16, 0));
  OK(ctx, dt_byom_load_checkpoint(resumed, dir));
  CHECK(memcmp(r16, w16, sizeof r16) == 0);
  for (int step = 0; step < 10; ++step) {
    gradient_words(fmt, w16, g16);
    memcpy(rg16, g16, sizeof g16);
    OK(ctx, dt_byom_step(low, lr, NULL));
    OK(ctx, dt_byom_step(resumed, lr, NULL));
  }
  CHECK(memcmp(r16, w16, sizeof r16) == 0);
  { /* the masters too, not only their rounded words */
    float from_low[NW], from_resumed[NW];
    snprintf(name, sizeof name, "byom16_%s_zero%d_low", fmt, zero);
    fresh_dir(ctx, world, name, dir, sizeof dir);
    OK(ctx, dt_byom_save_checkpoint(low, dir, 0));
    OK(ctx, dt_byom_load_checkpoint(loaded, dir));
    memcpy(from_low, back, sizeof back);
    snprintf(name, sizeof name, "byom16_%s_zero%d_resumed", fmt, zero);
    fresh_dir(ctx, world, name, dir, sizeof dir);
    OK(ctx, dt_byom_save_checkpoint(resumed, dir, 0));
    OK(ctx, dt_byom_load_checkpoint(loaded, dir));
    memcpy(from_resumed, back, sizeof back);
    CHECK(memcmp(from_low, from_resumed, sizeof from_low) == 0);
  }

  /* A value the program writes takes effect: the tensor's masters become its words. So does
   * one it writes back after a checkpoint took the first. */
  w16[3] = encode16(fmt, -0.25f);
  gradient_words(fmt, w16, g16);
  OK(ctx, dt_byom_step(low, lr, NULL));
  CHECK(fabsf(decode16(fmt, w16[3]) + 0.25f) < 0.01f);
  {
    const uint16_t kept = w16[3];
    w16[3] = encode16(fmt, 0.75f);
    OK(ctx, dt_byom_save_checkpoint(low, dir, 0));
    w16[3] = kept;
    gradient_words(fmt, w16, g16);
    OK(ctx, dt_byom_step(low, lr, NULL));
    CHECK(fabsf(decode16(fmt, w16[3]) + 0.25f) < 0.01f);
  }

  /* fp16: an overflowed gradient (inf) on rank 0 skips the step on every rank, the first
   * step of a byom too. */
  if (dtype == DT_F16) {
    dt_byom_t fresh = NULL;
    uint16_t f16[NW], fg16[NW];
    float norm = 0;
    memcpy(f16, start, sizeof f16);
    OK(ctx, dt_byom_create(world, &oc, &fresh));
    OK(ctx, dt_byom_register(fresh, "w", 1, shape, dtype, f16, fg16, 0));
    gradient_words(fmt, f16, fg16);
    if (my_rank == 0) fg16[0] = 0xFC00u; /* -inf */
    OK(ctx, dt_byom_step(fresh, lr, &norm));
    CHECK(isnan(norm));
    gradient_words(fmt, f16, fg16);
    OK(ctx, dt_byom_step(fresh, lr, &norm));
    CHECK(isfinite(norm));
    OK(ctx, dt_byom_destroy(fresh));
  }
  if (dtype == DT_F16) {
    float norm = 0;
    uint16_t before[NW];
    long after = 0;
    OK(ctx, dt_byom_steps(low, &steps));
    memcpy(before, w16, sizeof w16);
    gradient_words(fmt, w16, g16);
    if (my_rank == 0) g16[5] = 0x7C00u; /* +inf */
    OK(ctx, dt_byom_step(low, lr, &norm));
    CHECK(isnan(norm));
    CHECK(memcmp(before, w16, sizeof w16) == 0);
    OK(ctx, dt_byom_steps(low, &after));
    CHECK(after == steps);
    gradient_words(fmt, w16, g16);
    OK(ctx, dt_byom_step(low, lr, &norm));
    CHECK(isfinite(norm));
  }
  if (my_rank == 0)
    printf("byom %s zero=%d: every value moved by updates below half a step (masters), within "
           "four steps of fp32; %d of %d checkpoint values are masters, not %s values; resumed "
           "bit for bit\n", fmt, zero, masters, NW, fmt);
  OK(ctx, dt_byom_destroy(resumed));
  OK(ctx, dt_byom_destroy(loaded));
  OK(ctx, dt_byom_destroy(full));
  OK(ctx, dt_byom_destroy(low));
}

int main(int argc, char** argv) {
  dt_context_t ctx = NULL;
  dt_comm_t world = NULL;
  dt_model_t m = NULL;
  int size = 0, status;
  status = start_with_scratch("test_capi_precision", &argc, &argv, &ctx, &world, &size);
  if (status != 0) return status;

  for (int zero = 0; zero <= 3; ++zero) {
    test_curves(ctx, world, "bf16", zero);
    test_curves(ctx, world, "fp16", zero);
  }
  test_masters(ctx, world, "bf16");
  test_masters(ctx, world, "fp16");
  test_overflow(ctx, world);
  test_mlp(ctx, world, "bf16", 0);
  test_mlp(ctx, world, "fp16", 1);
  test_mlp(ctx, world, "bf16", 3);
  test_byom16(ctx, world, "bf16", 0);
  test_byom16(ctx, world, "fp16", 1);
  {
    dt_gpt_config_t gc = DT_GPT_CONFIG_INIT;
    gc.precision = "fp8";
    FAILS(DT_ERR_INVALID_CONFIG, ctx, "config->precision must be fp32, bf16 or fp16, got 'fp8'",
          dt_model_create_gpt(world, &gc, NULL, &m));
    CHECK(m == NULL);
  }
  {
    static const int sizes[2] = {4, 2};
    dt_mlp_config_t mc = DT_MLP_CONFIG_INIT;
    mc.sizes = sizes;
    mc.num_sizes = 2;
    mc.precision = "fp64";
    FAILS(DT_ERR_INVALID_CONFIG, ctx, "config->precision must be fp32, bf16 or fp16, got 'fp64'",
          dt_model_create_mlp(world, &mc, NULL, &m));
    CHECK(m == NULL);
  }

  status = finish("capi_precision", ctx, world);
  OK(ctx, dt_finalize(ctx));
  return status;
}
