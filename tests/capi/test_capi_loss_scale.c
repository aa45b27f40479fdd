/* Loss scaling of a byom (dt_byom_scale_loss): a program computing its gradients in fp16
 * multiplies its loss by dt_byom_loss_scale()'s scale.
 *  - Gradients far below fp16's smallest value (1e-8 x the error) train as in fp32 when
 *    scaled (every value within four fp16 steps of an fp32 byom, norms within 1e-3), and not
 *    at all unscaled (they round to zero).
 *  - A gradient that overflows on one rank skips the step on every rank and halves the scale;
 *    2000 clean steps in a row double it; a checkpoint carries the scale and the count of
 *    clean steps (a file without them starts the scale again); an overflow at scale 1 is
 *    refused on every rank, changing nothing.
 *  - A built-in fp16 model that fails at scale 1 drops that step's gradients: it steps on.
 *  - Ranks that disagree on scaling are refused at the first step; the scale can only be set
 *    before it.
 *   mpiexec -n N test_capi_loss_scale SCRATCH_DIR */
#define _XOPEN_SOURCE 700 /* nftw, mkdir */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "half_words.h"
#include "scratch_dir.h"

enum { NW = 16 };
static const float TINY = 1e-8f; /* the loss's factor: its gradients underflow fp16 */

/* This rank's gradient of TINY/2 * |w - t - 0.1 rank|^2 at w. */
static void tiny_grad(const float* w, float* g) {
  for (int i = 0; i < NW; ++i) g[i] = TINY * (w[i] - (-0.25f + 0.03f * (float)i) - 0.1f * (float)my_rank);
}

/* The program's fp16 gradient words at its words w16, its loss multiplied by scale. */
static void scaled_words(const uint16_t* w16, float scale, uint16_t* g16) {
  float w[NW], g[NW];
  for (int i = 0; i < NW; ++i) w[i] = decode16("fp16", w16[i]);
  tiny_grad(w, g);
  for (int i = 0; i < NW; ++i) g16[i] = fp16_word(scale * g[i]);
}

static float current_scale(dt_context_t ctx, dt_byom_t b) {
  float scale = 0;
  OK(ctx, dt_byom_loss_scale(b, &scale, NULL));
  return scale;
}

static dt_byom_t make_byom(dt_context_t ctx, dt_comm_t world, uint16_t* w16, uint16_t* g16, float scale) {
  const int64_t shape[1] = {NW};
  dt_optimizer_config_t oc = DT_OPTIMIZER_CONFIG_INIT;
  dt_byom_t b = NULL;
  oc.weight_decay = 0; /* a parameter moves by its gradient only */
  OK(ctx, dt_byom_create(world, &oc, &b));
  OK(ctx, dt_byom_register(b, "w", 1, shape, DT_F16, w16, g16, 0));
  if (scale >= 0) OK(ctx, dt_byom_scale_loss(b, scale));
  return b;
}

static void start_values(uint16_t* w16, float* wf) {
  for (int i = 0; i < NW; ++i) {
    const float v = round_to("fp16", 0.5f + 0.01f * (float)i);
    w16[i] = encode16("fp16", v);
    if (wf) wf[i] = v;
  }
}

/* Scaled fp16 against fp32, and unscaled fp16 that cannot train. */
static void test_underflow(dt_context_t ctx, dt_comm_t world) {
  const int64_t shape[1] = {NW};
  dt_optimizer_config_t oc = DT_OPTIMIZER_CONFIG_INIT;
  uint16_t ws[NW], gs[NW], wu[NW], gu[NW], start[NW];
  float wf[NW], gf[NW], worst = 0;
  dt_byom_t scaled, unscaled, full = NULL;
  int moved = 0, off = 0;
  long skipped = -1;
  start_values(ws, wf);
  start_values(wu, NULL);
  memcpy(start, ws, sizeof start);
  scaled = make_byom(ctx, world, ws, gs, 0);
  unscaled = make_byom(ctx, world, wu, gu, -1);
  oc.weight_decay = 0;
  OK(ctx, dt_byom_create(world, &oc, &full));
  OK(ctx, dt_byom_register(full, "w", 1, shape, DT_F32, wf, gf, 0));
  CHECK(current_scale(ctx, scaled) == 65536.0f);
  CHECK(current_scale(ctx, unscaled) == 1.0f);
  for (int step = 0; step < 30; ++step) {
    float ns = 0, nf = 0;
    scaled_words(ws, current_scale(ctx, scaled), gs);
    scaled_words(wu, current_scale(ctx, unscaled), gu);
    tiny_grad(wf, gf);
    OK(ctx, dt_byom_step(scaled, 1e-3f, &ns));
    OK(ctx, dt_byom_step(unscaled, 1e-3f, NULL));
    OK(ctx, dt_byom_step(full, 1e-3f, &nf));
    CHECK(fabsf(ns - nf) <= 1e-3f * nf); /* the norm of the unscaled gradients */
    if (fabsf(ns - nf) > worst * nf) worst = fabsf(ns - nf) / nf;
  }
  for (int i = 0; i < NW; ++i) {
    moved += ws[i] != start[i];
    off += fabsf(decode16("fp16", ws[i]) - wf[i]) > ldexpf(fabsf(wf[i]), -9);
  }
  CHECK(moved == NW);
  CHECK(off == 0);
  CHECK(memcmp(wu, start, sizeof wu) == 0); /* its gradients were all zero */
  OK(ctx, dt_byom_loss_scale(scaled, NULL, &skipped));
  CHECK(skipped == 0 && current_scale(ctx, scaled) == 65536.0f);
  if (my_rank == 0)
    printf("scaled fp16 gradients of 1e-8 x the error: within four fp16 steps of fp32 after 30 "
           "steps, norms within %.2e; unscaled, nothing moved\n", (double)worst);
  OK(ctx, dt_byom_destroy(full));
  OK(ctx, dt_byom_destroy(unscaled));
  OK(ctx, dt_byom_destroy(scaled));
}

/* n clean steps at learning rate 0 (the scale's count of clean steps grows by n). */
static void clean_steps(dt_context_t ctx, dt_byom_t b, uint16_t* w16, uint16_t* g16, int n) {
  for (int i = 0; i < n; ++i) {
    scaled_words(w16, current_scale(ctx, b), g16);
    OK(ctx, dt_byom_step(b, 0.0f, NULL));
  }
}

/* Overflow on one rank, back-off, growth, and the scale through a checkpoint. */
static void test_dynamics(dt_context_t ctx, dt_comm_t world, int size) {
  const int last = size - 1;
  uint16_t w16[NW], g16[NW], before[NW], r16[NW], rg16[NW];
  float norm = 0;
  long steps = -1, skipped = -1;
  char dir[1100];
  dt_byom_t b, resumed, plain;
  start_values(w16, NULL);
  start_values(r16, NULL);
  b = make_byom(ctx, world, w16, g16, 0);
  memcpy(before, w16, sizeof before);
  scaled_words(w16, current_scale(ctx, b), g16);
  if (my_rank == last) g16[5] = fp16_word(1.5f * current_scale(ctx, b)); /* 98304: inf */
  OK(ctx, dt_byom_step(b, 1e-3f, &norm));
  CHECK(isnan(norm));
  CHECK(memcmp(before, w16, sizeof w16) == 0);
  OK(ctx, dt_byom_steps(b, &steps));
  OK(ctx, dt_byom_loss_scale(b, NULL, &skipped));
  CHECK(steps == 0 && skipped == 1 && current_scale(ctx, b) == 32768.0f);
  scaled_words(w16, current_scale(ctx, b), g16);
  if (my_rank == last) g16[5] = fp16_word(1.5f * current_scale(ctx, b)); /* 49152 fits */
  OK(ctx, dt_byom_step(b, 1e-3f, &norm));
  CHECK(isfinite(norm));
  CHECK(memcmp(before, w16, sizeof w16) != 0);
  clean_steps(ctx, b, w16, g16, 999);

  /* 1000 clean steps: a checkpoint keeps the scale and the count toward the next growth. */
  fresh_dir(ctx, world, "loss_scale", dir, sizeof dir);
  OK(ctx, dt_byom_save_checkpoint(b, dir, 0));
  resumed = make_byom(ctx, world, r16, rg16, 0);
  OK(ctx, dt_byom_load_checkpoint(resumed, dir));
  CHECK(current_scale(ctx, resumed) == 32768.0f);
  CHECK(memcmp(r16, w16, sizeof r16) == 0);
  plain = make_byom(ctx, world, r16, rg16, -1); /* it does not scale: a saved scale is not its */
  OK(ctx, dt_byom_load_checkpoint(plain, dir));
  CHECK(current_scale(ctx, plain) == 1.0f);
  { /* a file saved without a scale starts a scaling byom's scale again */
    char plain_dir[1100];
    uint16_t f16[NW], fg16[NW];
    dt_byom_t fresh;
    fresh_dir(ctx, world, "loss_scale_plain", plain_dir, sizeof plain_dir);
    OK(ctx, dt_byom_save_checkpoint(plain, plain_dir, 0));
    start_values(f16, NULL);
    fresh = make_byom(ctx, world, f16, fg16, 1024.0f);
    scaled_words(f16, current_scale(ctx, fresh), fg16);
    fg16[0] = 0x7C00u;
    OK(ctx, dt_byom_step(fresh, 1e-3f, NULL));
    CHECK(current_scale(ctx, fresh) == 512.0f);
    OK(ctx, dt_byom_load_checkpoint(fresh, plain_dir));
    CHECK(current_scale(ctx, fresh) == 1024.0f);
    OK(ctx, dt_byom_destroy(fresh));
  }
  OK(ctx, dt_byom_destroy(plain));
  clean_steps(ctx, b, w16, g16, 999);
  clean_steps(ctx, resumed, r16, rg16, 999);
  CHECK(current_scale(ctx, b) == 32768.0f && current_scale(ctx, resumed) == 32768.0f);
  clean_steps(ctx, b, w16, g16, 1);
  clean_steps(ctx, resumed, r16, rg16, 1);
  CHECK(current_scale(ctx, b) == 65536.0f && current_scale(ctx, resumed) == 65536.0f);
  OK(ctx, dt_byom_destroy(resumed));

  FAILS(DT_ERR_INVALID_STATE, ctx, "before the first step", dt_byom_scale_loss(b, 0));
  OK(ctx, dt_byom_destroy(b));
  if (my_rank == 0)
    printf("an overflow on rank %d skipped the step on every rank and halved the scale; 2000 "
           "clean steps doubled it, across a checkpoint too\n", last);
}

/* At scale 1 an overflow is an error on every rank and changes nothing; a clean step then
 * goes on. A byom with fp16 tensors that does not scale counts its skipped steps too. */
static void test_minimum(dt_context_t ctx, dt_comm_t world, int size) {
  uint16_t w16[NW], g16[NW], before[NW];
  float norm = 0;
  long steps = -1, skipped = -1;
  dt_byom_t b;
  start_values(w16, NULL);
  b = make_byom(ctx, world, w16, g16, 2.0f);
  memcpy(before, w16, sizeof before);
  for (int attempt = 0; attempt < 2; ++attempt) {
    scaled_words(w16, current_scale(ctx, b), g16);
    if (my_rank == size - 1) g16[0] = 0xFC00u; /* -inf */
    if (attempt == 0) {
      OK(ctx, dt_byom_step(b, 1e-3f, &norm));
      CHECK(isnan(norm) && current_scale(ctx, b) == 1.0f);
    } else {
      FAILS(DT_ERR_INVALID_CONFIG, ctx, "minimum loss scale", dt_byom_step(b, 1e-3f, &norm));
    }
  }
  OK(ctx, dt_byom_loss_scale(b, NULL, &skipped));
  CHECK(skipped == 1 && current_scale(ctx, b) == 1.0f);
  CHECK(memcmp(before, w16, sizeof w16) == 0);
  OK(ctx, dt_byom_steps(b, &steps));
  CHECK(steps == 0);
  clean_steps(ctx, b, w16, g16, 1);
  OK(ctx, dt_byom_steps(b, &steps));
  CHECK(steps == 1 && memcmp(before, w16, sizeof w16) == 0); /* at lr 0 */
  OK(ctx, dt_byom_destroy(b));

  start_values(w16, NULL);
  b = make_byom(ctx, world, w16, g16, -1);
  scaled_words(w16, 1.0f, g16);
  if (my_rank == 0) g16[1] = 0x7C00u;
  OK(ctx, dt_byom_step(b, 1e-3f, &norm));
  OK(ctx, dt_byom_loss_scale(b, NULL, &skipped));
  CHECK(isnan(norm) && skipped == 1 && current_scale(ctx, b) == 1.0f);
  OK(ctx, dt_byom_destroy(b));
}

/* A built-in fp16 model whose gradients overflow down to scale 1 fails that step on every
 * rank and drops its gradients (reduced already under ZeRO 1): once its inputs are good
 * again it steps as a fresh model with the same parameters does. */
static const float mlp_x[16] = {0.1f, -0.2f, 0.3f, 0.0f, -0.1f, 0.2f, 0.1f, 0.1f,
                                -0.3f, 0.2f, 0.0f, 0.1f, 0.2f, -0.1f, 0.1f, -0.2f};
static const int32_t mlp_y[4] = {0, 1, 2, 0};

static float model_step_norm(dt_context_t ctx, dt_model_t m, const float* bias) {
  float loss = 0, norm = 0;
  OK(ctx, dt_model_set_tensor(m, "layers.0.bias", bias, 8));
  OK(ctx, dt_mlp_forward_backward(m, mlp_x, mlp_y, 4, &loss));
  OK(ctx, dt_model_step(m, 0.0f, &norm));
  return norm;
}

static void test_model_minimum(dt_context_t ctx, dt_comm_t world) {
  static const int sizes[3] = {4, 8, 3};
  dt_mlp_config_t mc = DT_MLP_CONFIG_INIT;
  dt_optimizer_config_t oc = DT_OPTIMIZER_CONFIG_INIT;
  dt_model_t stuck = NULL, fresh = NULL;
  float good[8], huge[8], loss = 0, norm = 0, scale = 0;
  long skipped = 0;
  int step;
  mc.num_sizes = 3;
  mc.sizes = sizes;
  mc.max_batch = 4;
  mc.device = "cpu";
  mc.precision = "fp16";
  oc.zero_stage = 1;
  OK(ctx, dt_model_create_mlp(world, &mc, &oc, &stuck));
  OK(ctx, dt_model_create_mlp(world, &mc, &oc, &fresh));
  OK(ctx, dt_model_get_tensor(stuck, "layers.0.bias", good, 8));
  for (int i = 0; i < 8; ++i) huge[i] = 1e10f;
  OK(ctx, dt_model_set_tensor(stuck, "layers.0.bias", huge, 8));
  for (step = 0; step < 40; ++step) {
    OK(ctx, dt_mlp_forward_backward(stuck, mlp_x, mlp_y, 4, &loss));
    if (dt_model_step(stuck, 1e-3f, &norm) != DT_SUCCESS) break;
    CHECK(isnan(norm));
  }
  CHECK(step < 40 && strstr(dt_get_last_error(ctx), "minimum loss scale") != NULL);
  OK(ctx, dt_model_loss_scale(stuck, &scale, &skipped));
  CHECK(scale == 1.0f && skipped == step);
  {
    const float after = model_step_norm(ctx, stuck, good);
    const float expected = model_step_norm(ctx, fresh, good);
    CHECK(isfinite(after) && fabsf(after - expected) <= 1e-6f * expected);
    printf("rank %d: fp16 model after failing at scale 1 (%d skipped steps): norm %.9g, "
           "a fresh model's %.9g\n", my_rank, step, (double)after, (double)expected);
  }
  OK(ctx, dt_model_destroy(stuck));
  OK(ctx, dt_model_destroy(fresh));
}

/* Ranks that disagree on scaling fail together at the first step (they would unscale
 * differently); they agree and step after destroying it. */
static void test_disagreement(dt_context_t ctx, dt_comm_t world) {
  uint16_t w16[NW], g16[NW];
  dt_byom_t b;
  start_values(w16, NULL);
  b = make_byom(ctx, world, w16, g16, my_rank == 0 ? 1024.0f : -1.0f);
  scaled_words(w16, 1.0f, g16);
  FAILS(DT_ERR_INVALID_CONFIG, ctx, "loss scaling differ", dt_byom_step(b, 1e-3f, NULL));
  OK(ctx, dt_byom_destroy(b));
}

int main(int argc, char** argv) {
  dt_context_t ctx = NULL;
  dt_comm_t world = NULL;
  int size = 0, status;
  status = start_with_scratch("test_capi_loss_scale", &argc, &argv, &ctx, &world, &size);
  if (status != 0) return status;
  test_underflow(ctx, world);
  test_dynamics(ctx, world, size);
  test_minimum(ctx, world, size);
  test_model_minimum(ctx, world);
  if (size > 1) test_disagreement(ctx, world);
  status = finish("capi_loss_scale", ctx, world);
  OK(ctx, dt_finalize(ctx));
  return status;
}
