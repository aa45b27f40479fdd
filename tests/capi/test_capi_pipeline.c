/* Pipeline parallelism of the built-in GPT through the C ABI (dt_model_create_gpt_grid on a
 * grid with pp > 1): a GPT cut into stages (1F1B, GPipe and interleaved schedules; tied and
 * untied embeddings; an uneven layer split; fp16 with its loss scaling; at 4 ranks with data
 * parallelism, ZeRO 1 (also interleaved) and tensor parallelism (also in fp16), and PP 4 with
 * 1F1B, GPipe and, on 8 layers, interleaved) trains as one rank does on the whole batch: every step's loss
 * (averaged over dp) and gradient norm within TOL relative (fp16: TOL16), evaluation within TOL, every tensor a stage holds and the
 * generation logits within PARAM_TOL (PARAM_TOL16). A tied wte set on one end of the pipeline
 * only reaches the other end (the first stage's values where both ends set it), and a
 * checkpoint saved next. Checkpoints load across the layouts bit for bit;
 * different tokens on the stages, a batch that does not cut into the micro-batches, a bad
 * token on one stage and impossible pipeline settings fail every rank.
 *   mpiexec -n N test_capi_pipeline SCRATCH_DIR       (N = 2 or 4) */
#define _XOPEN_SOURCE 700 /* nftw, mkdir */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "against_one_rank.h"
#include "check.h"
#include "model_values.h"
#include "scratch_dir.h"

enum { STEPS = 5, T = 8, VOCAB = 53, LAYERS = 4, MAXSEQS = 16 }; /* MAXSEQS: a replica's batch */
static const float TOL = 1e-5f;
/* After several AdamW steps rounding-level gradient differences grow into a part of lr in
 * the update (test_capi_tp.c): the parameters and logits get this bound. */
static const float PARAM_TOL = 1e-4f;

/* fp16: gradients (and on a GPU the GEMM operands) are rounded to 11 significant bits
 * (unit roundoff 4.9e-4), where a sum in another order (over dp, or over the micro-batches
 * instead of the whole batch) can round the other way; Adam turns that into a part of lr. */
static const float TOL16 = 1e-3f, PARAM_TOL16 = 5e-3f;
static float tol, param_tol; /* the layout's */

static int relative_ok(float got, float want) { return within(got, want, tol); }

typedef struct {
  int tp, pp, micro_batches, micro_batch, virtual_stages, tied, sp, zero;
  const char* schedule;
  const char* precision; /* NULL: fp32 */
  const char* layers;    /* config->pipeline_layers; NULL: an even split */
} pipeline_t;

/* LAYERS, or one for each chunk where the pipeline has more chunks (PP 4 interleaved). */
static int model_layers(const pipeline_t* p) {
  const int chunks = p->pp * p->virtual_stages;
  return chunks > LAYERS ? chunks : LAYERS;
}

static dt_gpt_config_t config(const pipeline_t* p, int max_batch, int staged) {
  dt_gpt_config_t gc = DT_GPT_CONFIG_INIT;
  gc.layers = model_layers(p);
  gc.heads = 4;
  gc.d_model = 32;
  gc.seq_len = T;
  gc.vocab = VOCAB;
  gc.tie_embeddings = p->tied;
  gc.max_batch = max_batch;
  gc.precision = p->precision;
  if (staged) {
    gc.sequence_parallel = p->sp;
    gc.schedule = p->schedule;
    gc.micro_batches = p->micro_batches;
    gc.virtual_stages = p->virtual_stages;
    gc.pipeline_layers = p->layers;
  }
  return gc;
}

/* Sequence s of a step's whole batch. */
static void sequence(int step, int s, int32_t* tokens, int32_t* targets) {
  learnable_sequence(step, s, T, VOCAB, tokens, targets);
}

typedef struct {
  dt_grid_t grid, solo; /* solo: DP groups of one rank, for the reference */
  int pp_rank;
  pair_t pair; /* the staged model (pair.split) and the reference */
} layout_t;

static layout_t make_layout(dt_context_t ctx, const pipeline_t* p) {
  layout_t l;
  dt_grid_config_t g = DT_GRID_CONFIG_INIT, s = DT_GRID_CONFIG_INIT;
  dt_gpt_config_t gc;
  dt_optimizer_config_t oc = clipping_optimizer(p->zero);
  dt_comm_t one = NULL;
  int t = 0;
  memset(&l, 0, sizeof l);
  g.tp = p->tp;
  g.pp = p->pp;
  OK(ctx, dt_grid_create(ctx, &g, &l.grid));
  OK(ctx, dt_grid_comm(l.grid, DT_GROUP_DP, &l.pair.dp));
  OK(ctx, dt_comm_size(l.pair.dp, &l.pair.dp_size));
  OK(ctx, dt_grid_coords(l.grid, &t, &l.pp_rank, &l.pair.dp_rank));
  l.pair.batch = p->micro_batches * p->micro_batch;
  l.pair.seq = T;
  l.pair.vocab = VOCAB;
  l.pair.tol = tol;
  gc = config(p, p->micro_batch, 1);
  OK(ctx, dt_model_create_gpt_grid(l.grid, &gc, &oc, &l.pair.split));
  OK(ctx, dt_context_size(ctx, &s.pp));
  OK(ctx, dt_grid_create(ctx, &s, &l.solo));
  OK(ctx, dt_grid_comm(l.solo, DT_GROUP_DP, &one));
  gc = config(p, l.pair.batch * l.pair.dp_size, 0);
  OK(ctx, dt_model_create_gpt(one, &gc, &oc, &l.pair.ref));
  return l;
}

static void free_layout(dt_context_t ctx, layout_t* l) {
  OK(ctx, dt_model_destroy(l->pair.split));
  OK(ctx, dt_model_destroy(l->pair.ref));
  OK(ctx, dt_grid_destroy(l->solo));
  OK(ctx, dt_grid_destroy(l->grid));
}

/* Over every tensor this stage holds: the largest |difference| to the same tensor of ref
 * (bits: whether all are identical). */
static float stage_tensor_gap(dt_context_t ctx, dt_model_t staged, dt_model_t ref, int* bits) {
  int n = 0;
  float worst = 0;
  *bits = 1;
  OK(ctx, dt_model_num_tensors(staged, &n));
  for (int i = 0; i < n; ++i) {
    char name[96];
    size_t len = 0;
    int64_t shape[4];
    int ndim = 0;
    size_t count = 1;
    float *a, *b;
    OK(ctx, dt_model_tensor_name(staged, i, name, sizeof name, &len));
    OK(ctx, dt_model_tensor_shape(staged, name, shape, 4, &ndim));
    for (int d = 0; d < ndim; ++d) count *= (size_t)shape[d];
    a = malloc(count * sizeof *a);
    b = malloc(count * sizeof *b);
    OK(ctx, dt_model_get_tensor(staged, name, a, count));
    OK(ctx, dt_model_get_tensor(ref, name, b, count));
    worst = worse(worst, max_diff(a, b, count));
    if (memcmp(a, b, count * sizeof *a) != 0) *bits = 0;
    free(a);
    free(b);
  }
  return worst;
}

/* Values for wte (count of them), a pattern of its own for each `which`. */
static float* wte_values(size_t count, int which) {
  float* w = malloc(count * sizeof *w);
  for (size_t i = 0; i < count; ++i) w[i] = 0.05f * sinf(0.37f * (float)i + (float)which);
  return w;
}

static size_t wte_count(dt_context_t ctx, dt_model_t m) {
  int64_t shape[2] = {0, 0};
  int ndim = 0;
  OK(ctx, dt_model_tensor_shape(m, "wte", shape, 2, &ndim));
  return (size_t)(shape[0] * shape[1]);
}

/* Tied embeddings: wte set on one end of the pipeline only (stage; -1: on both ends, other
 * values on the last, where the first stage's win), and on the reference, is the head's
 * too: two steps train as the reference does. */
static void set_wte_on_one_end(dt_context_t ctx, layout_t* l, int stage, int last) {
  const size_t count = wte_count(ctx, l->pair.ref);
  float* w = wte_values(count, stage);
  float* other = wte_values(count, 7);
  int bits = 0;
  OK(ctx, dt_model_set_tensor(l->pair.ref, "wte", w, count));
  if (l->pp_rank == stage || (stage < 0 && l->pp_rank == 0))
    OK(ctx, dt_model_set_tensor(l->pair.split, "wte", w, count));
  if (stage < 0 && l->pp_rank == last) OK(ctx, dt_model_set_tensor(l->pair.split, "wte", other, count));
  train_pair(ctx, &l->pair, STEPS + 1, STEPS + 3);
  CHECK(stage_tensor_gap(ctx, l->pair.split, l->pair.ref, &bits) < param_tol);
  free(other);
  free(w);
}

/* wte set on the last stage only, then a checkpoint: the file holds the new values. */
static void set_wte_then_save(dt_context_t ctx, dt_comm_t world, layout_t* l, int last, const char* name) {
  const size_t count = wte_count(ctx, l->pair.ref);
  float* w = wte_values(count, 11);
  float* back = malloc(count * sizeof *back);
  char dir[1200];
  if (l->pp_rank == last) OK(ctx, dt_model_set_tensor(l->pair.split, "wte", w, count));
  fresh_dir(ctx, world, name, dir, sizeof dir);
  OK(ctx, dt_model_save_checkpoint(l->pair.split, dir, 0));
  OK(ctx, dt_model_load_checkpoint(l->pair.ref, dir));
  OK(ctx, dt_model_get_tensor(l->pair.ref, "wte", back, count));
  CHECK(max_diff(back, w, count) < param_tol);
  free(back);
  free(w);
}

static void test_layout(dt_context_t ctx, dt_comm_t world, const pipeline_t* p) {
  layout_t l;
  tol = p->precision ? TOL16 : TOL;
  param_tol = p->precision ? PARAM_TOL16 : PARAM_TOL;
  l = make_layout(ctx, p);
  int32_t tokens[MAXSEQS * T], targets[MAXSEQS * T];
  const int32_t prompt[5] = {3, 14, 15, 9, 26}, next = 5;
  float worst, pd, ld, es = 0, er = 0, ss = 0, sr = 0, ds[2][VOCAB], dr[2][VOCAB];
  int bits = 0;
  char dir[1200], name[128];

  if (p->layers) { /* "3,1": layer 2 on the first stage */
    float w[32];
    EXPECT(l.pp_rank == 0 ? DT_SUCCESS : DT_ERR_INVALID_ARGUMENT, ctx,
           dt_model_get_tensor(l.pair.split, "h.2.ln_1.weight", w, 32));
  }
  worst = train_pair(ctx, &l.pair, 0, STEPS);
  pd = stage_tensor_gap(ctx, l.pair.split, l.pair.ref, &bits);
  CHECK(pd < param_tol);
  for (int s = 0; s < l.pair.batch; ++s) sequence(STEPS, s, tokens + s * T, targets + s * T);
  OK(ctx, dt_gpt_evaluate(l.pair.split, tokens, targets, l.pair.batch, T, &es));
  OK(ctx, dt_gpt_evaluate(l.pair.ref, tokens, targets, l.pair.batch, T, &er));
  CHECK(relative_ok(es, er));
  /* A smaller shape than the model was made for: one sequence of 6 tokens per micro-batch,
   * through both the evaluation and a training step. */
  {
    const int few = p->micro_batches;
    float ns = 0, nr = 0;
    OK(ctx, dt_gpt_evaluate(l.pair.split, tokens, targets, few, 6, &ss));
    OK(ctx, dt_gpt_evaluate(l.pair.ref, tokens, targets, few, 6, &sr));
    CHECK(relative_ok(ss, sr));
    OK(ctx, dt_gpt_forward_backward(l.pair.split, tokens, targets, few, 6, &ss));
    OK(ctx, dt_gpt_forward_backward(l.pair.ref, tokens, targets, few, 6, &sr));
    CHECK(relative_ok(ss, sr));
    OK(ctx, dt_model_step(l.pair.split, 0.0f, &ns));
    OK(ctx, dt_model_step(l.pair.ref, 0.0f, &nr));
    CHECK(relative_ok(ns, nr)); /* every replica had the same batch: its average is it */
  }
  {
    int n_logits = 0; /* every stage knows the vocabulary, to size its buffer */
    OK(ctx, dt_model_num_logits(l.pair.split, &n_logits));
    CHECK(n_logits == VOCAB);
  }
  OK(ctx, dt_gpt_decode(l.pair.split, prompt, 5, 1, ds[0]));
  OK(ctx, dt_gpt_decode(l.pair.split, &next, 1, 0, ds[1]));
  OK(ctx, dt_gpt_decode(l.pair.ref, prompt, 5, 1, dr[0]));
  OK(ctx, dt_gpt_decode(l.pair.ref, &next, 1, 0, dr[1]));
  ld = max_diff(&ds[0][0], &dr[0][0], 2 * VOCAB) / max_abs(&dr[0][0], 2 * VOCAB);
  CHECK(ld <= param_tol);
  if (my_rank == 0)
    printf("%s pp=%d tp=%d dp=%d %s x%d micro-batches of %d, virtual stages %d, %d layers split %s, tied=%d "
           "sp=%d zero=%d: max relative loss/norm gap to one rank over %d steps %.3g, max |param "
           "diff| %.3g, eval %.6f vs %.6f, logits within %.3g of the largest\n",
           p->precision ? p->precision : "fp32", p->pp, p->tp, l.pair.dp_size, p->schedule ? p->schedule : "1f1b", p->micro_batches,
           p->micro_batch, p->virtual_stages, model_layers(p),
           p->layers ? p->layers : "evenly", p->tied, p->sp, p->zero, STEPS, worst, pd, es, er, ld);

  /* The staged model's checkpoint loads into the one-rank model, and one written by a
   * one-rank model into the staged one, bit for bit. */
  snprintf(name, sizeof name, "pp%d_tp%d_%s_v%d_tied%d_zero%d_%s", p->pp, p->tp,
           p->schedule ? p->schedule : "1f1b", p->virtual_stages, p->tied, p->zero,
           p->precision ? p->precision : "fp32");
  fresh_dir(ctx, world, name, dir, sizeof dir);
  OK(ctx, dt_model_save_checkpoint(l.pair.split, dir, 0));
  OK(ctx, dt_model_load_checkpoint(l.pair.ref, dir));
  stage_tensor_gap(ctx, l.pair.split, l.pair.ref, &bits);
  CHECK(bits);
  train_pair(ctx, &l.pair, STEPS, STEPS + 1);
  snprintf(name, sizeof name, "ref_pp%d_tp%d_%s_v%d_tied%d_zero%d_rank%d", p->pp, p->tp,
           p->schedule ? p->schedule : "1f1b", p->virtual_stages, p->tied, p->zero, my_rank);
  fresh_dir(ctx, world, name, dir, sizeof dir);
  OK(ctx, dt_model_save_checkpoint(l.pair.ref, dir, 0));
  OK(ctx, dt_barrier(world));
  snprintf(name, sizeof name, "/ref_pp%d_tp%d_%s_v%d_tied%d_zero%d_rank0", p->pp, p->tp,
           p->schedule ? p->schedule : "1f1b", p->virtual_stages, p->tied, p->zero);
  snprintf(dir, sizeof dir, "%s%s", scratch, name);
  OK(ctx, dt_model_load_checkpoint(l.pair.split, dir));
  stage_tensor_gap(ctx, l.pair.split, l.pair.ref, &bits);
  CHECK(bits);
  if (p->tied) {
    set_wte_on_one_end(ctx, &l, 0, p->pp - 1);
    set_wte_on_one_end(ctx, &l, p->pp - 1, p->pp - 1);
    set_wte_on_one_end(ctx, &l, -1, p->pp - 1);
    snprintf(name, sizeof name, "wte_pp%d_tp%d_%s_v%d_zero%d_%s", p->pp, p->tp,
             p->schedule ? p->schedule : "1f1b", p->virtual_stages, p->zero,
             p->precision ? p->precision : "fp32");
    set_wte_then_save(ctx, world, &l, p->pp - 1, name);
  }
  free_layout(ctx, &l);
}

/* Impossible pipeline settings are refused on every rank; so are passes whose inputs the
 * stages do not agree on, before any stage waits for another. */
static void test_refusals(dt_context_t ctx) {
  const pipeline_t p = {1, 2, 2, 2, 1, 1, 0, 0, NULL, NULL, NULL};
  dt_grid_t grid = NULL;
  dt_grid_config_t g = DT_GRID_CONFIG_INIT;
  dt_gpt_config_t gc = config(&p, 2, 1);
  dt_optimizer_config_t oc = clipping_optimizer(2);
  dt_model_t m = NULL;
  dt_comm_t world = NULL;
  int t = 0, stage = 0, d = 0;
  int32_t tokens[6 * T], targets[6 * T];
  float loss = 0;

  g.pp = 2;
  OK(ctx, dt_grid_create(ctx, &g, &grid));
  OK(ctx, dt_grid_coords(grid, &t, &stage, &d));
  FAILS(DT_ERR_NOT_IMPLEMENTED, ctx, "zero_stage 2 with pipeline parallelism",
        dt_model_create_gpt_grid(grid, &gc, &oc, &m));
  gc.schedule = "zigzag";
  FAILS(DT_ERR_INVALID_CONFIG, ctx, "config->schedule must be 1f1b, gpipe or interleaved",
        dt_model_create_gpt_grid(grid, &gc, NULL, &m));
  gc.schedule = NULL;
  gc.virtual_stages = 2;
  FAILS(DT_ERR_INVALID_CONFIG, ctx, "virtual_stages > 1 needs", dt_model_create_gpt_grid(grid, &gc, NULL, &m));
  gc.schedule = "interleaved";
  gc.micro_batches = 3;
  FAILS(DT_ERR_INVALID_CONFIG, ctx, "multiple of the grid's pp", dt_model_create_gpt_grid(grid, &gc, NULL, &m));
  gc.micro_batches = 2;
  gc.layers = 3;
  FAILS(DT_ERR_INVALID_CONFIG, ctx, "is fewer than the pipeline's stages",
        dt_model_create_gpt_grid(grid, &gc, NULL, &m));
  gc.micro_batches = -1;
  FAILS(DT_ERR_INVALID_CONFIG, ctx, "micro_batches must be >= 0", dt_model_create_gpt_grid(grid, &gc, NULL, &m));
  gc = config(&p, 2, 1);
  gc.pipeline_layers = "3,2";
  FAILS(DT_ERR_INVALID_CONFIG, ctx, "pipeline_layers adds up to 5 layers, the model has 4",
        dt_model_create_gpt_grid(grid, &gc, NULL, &m));
  gc.pipeline_layers = "4";
  FAILS(DT_ERR_INVALID_CONFIG, ctx, "pipeline_layers lists 1 chunks, the pipeline has pp x virtual_stages = 2",
        dt_model_create_gpt_grid(grid, &gc, NULL, &m));
  gc.pipeline_layers = "4,0";
  FAILS(DT_ERR_INVALID_CONFIG, ctx, "every chunk needs at least one layer", dt_model_create_gpt_grid(grid, &gc, NULL, &m));
  gc.pipeline_layers = "2;2";
  FAILS(DT_ERR_INVALID_CONFIG, ctx, "pipeline_layers must be a comma-separated list of layer counts, got '2;2'",
        dt_model_create_gpt_grid(grid, &gc, NULL, &m));
  /* Settings that differ between the ranks (the stages would wait for each other's
   * messages), or one refused on one rank only: every rank fails. */
  gc = config(&p, 2, 1);
  gc.micro_batches = stage == 0 ? 2 : 4;
  FAILS(DT_ERR_INVALID_CONFIG, ctx, "settings (config or optimizer) differ between its ranks",
        dt_model_create_gpt_grid(grid, &gc, NULL, &m));
  gc = config(&p, 2, 1);
  FAILS(DT_ERR_NOT_IMPLEMENTED, ctx, "rank 0: optimizer zero_stage 2",
        dt_model_create_gpt_grid(grid, &gc, stage == 0 ? &oc : NULL, &m));
  gc = config(&p, 2, 1);
  OK(ctx, dt_context_world(ctx, &world));
  FAILS(DT_ERR_INVALID_CONFIG, ctx, "need pipeline parallelism", dt_model_create_gpt(world, &gc, NULL, &m));
  CHECK(m == NULL);

  OK(ctx, dt_model_create_gpt_grid(grid, &gc, NULL, &m));
  for (int s = 0; s < 6; ++s) sequence(0, s, tokens + s * T, targets + s * T);
  /* 3 sequences do not cut into 2 micro-batches; 6 make micro-batches above max_batch. */
  FAILS(DT_ERR_INVALID_ARGUMENT, ctx, "micro_batches (2) x 1..max_batch (2)",
        dt_gpt_forward_backward(m, tokens, targets, 3, T, &loss));
  FAILS(DT_ERR_INVALID_ARGUMENT, ctx, "got 6", dt_gpt_evaluate(m, tokens, targets, 6, T, &loss));
  /* A token out of range on the last stage only: the first stage, which would wait for its
   * gradients, fails too. */
  if (stage == 1) tokens[T + 2] = VOCAB;
  FAILS(DT_ERR_INVALID_ARGUMENT, ctx, "tokens[10] = 53 is outside [0, vocab)",
        dt_gpt_forward_backward(m, tokens, targets, 4, T, &loss));
  tokens[T + 2] = 0;
  /* The same tokens as another shape on one stage: every rank refuses. */
  FAILS(DT_ERR_INVALID_ARGUMENT, ctx, "were given different tokens",
        dt_gpt_evaluate(m, tokens, targets, stage == 0 ? 2 : 4, stage == 0 ? T : T / 2, &loss));
  /* Different tokens on the stages: every rank refuses. */
  if (stage == 1) tokens[3] = (tokens[3] + 1) % VOCAB;
  FAILS(DT_ERR_INVALID_ARGUMENT, ctx, "were given different tokens",
        dt_gpt_forward_backward(m, tokens, targets, 4, T, &loss));
  {
    float logits[VOCAB];
    FAILS(DT_ERR_INVALID_ARGUMENT, ctx, "were given different tokens", dt_gpt_decode(m, tokens, 4, 1, logits));
  }
  /* The tensor calls are the stage's: the head is not on stage 0, the embedding's position
   * table not on stage 1. */
  {
    float w[T * 32];
    FAILS(DT_ERR_INVALID_ARGUMENT, ctx, "on this pipeline stage",
          dt_model_get_tensor(m, stage == 0 ? "ln_f.weight" : "wpe", w, T * 32));
  }
  OK(ctx, dt_model_destroy(m));
  OK(ctx, dt_grid_destroy(grid));
}

int main(int argc, char** argv) {
  dt_context_t ctx = NULL;
  dt_comm_t world = NULL;
  int size = 0, status;
  status = start_with_scratch("test_capi_pipeline", &argc, &argv, &ctx, &world, &size);
  if (status != 0) return status;
  /* tp, pp, micro-batches, sequences each, virtual stages, tied, sp, zero, schedule, precision,
   * pipeline_layers */
  {
    const pipeline_t one_f_one_b = {1, 2, 2, 2, 1, 1, 0, 0, NULL, NULL, NULL};
    const pipeline_t gpipe = {1, 2, 3, 1, 1, 0, 0, 0, "gpipe", NULL, NULL};
    const pipeline_t interleaved = {1, 2, 4, 1, 2, 1, 0, 0, "interleaved", NULL, NULL};
    const pipeline_t fp16 = {1, 2, 2, 2, 1, 1, 0, 0, NULL, "fp16", NULL};
    const pipeline_t uneven = {1, 2, 2, 2, 1, 0, 0, 0, "gpipe", NULL, "3,1"};
    test_layout(ctx, world, &one_f_one_b);
    test_layout(ctx, world, &gpipe);
    test_layout(ctx, world, &interleaved);
    test_layout(ctx, world, &fp16);
    test_layout(ctx, world, &uneven);
  }
  if (size == 4) {
    const pipeline_t with_dp = {1, 2, 2, 2, 1, 1, 0, 1, NULL, NULL, NULL};
    const pipeline_t with_tp = {2, 2, 2, 2, 1, 1, 1, 0, NULL, NULL, NULL};
    const pipeline_t four = {1, 4, 4, 1, 1, 1, 0, 0, NULL, NULL, NULL};
    const pipeline_t four_gpipe = {1, 4, 4, 1, 1, 0, 0, 0, "gpipe", NULL, NULL};
    const pipeline_t interleaved_with_dp = {1, 2, 4, 1, 2, 1, 0, 1, "interleaved", NULL, NULL};
    const pipeline_t fp16_with_tp = {2, 2, 2, 2, 1, 1, 1, 0, NULL, "fp16", NULL};
    const pipeline_t four_interleaved = {1, 4, 4, 1, 2, 1, 0, 0, "interleaved", NULL, NULL};
    test_layout(ctx, world, &with_dp);
    test_layout(ctx, world, &with_tp);
    test_layout(ctx, world, &four);
    test_layout(ctx, world, &four_gpipe);
    test_layout(ctx, world, &interleaved_with_dp);
    test_layout(ctx, world, &fp16_with_tp);
    test_layout(ctx, world, &four_interleaved);
  }
  test_refusals(ctx);

  status = finish("capi_pipeline", ctx, world);
  OK(ctx, dt_finalize(ctx));
  return status;
}
