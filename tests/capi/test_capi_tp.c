/* Tensor parallelism of the built-in GPT through the C ABI (dt_model_create_gpt_grid): a GPT
 * split over the TP group of a grid (tp 2, and tp 4 at 4 ranks; with and without sequence
 * parallelism; tied and untied; ZeRO 0 to 3 over the DP group) trains as one rank does
 * on the whole batch: every step's loss (averaged over dp) and gradient norm within TOL
 * relative, evaluation within TOL, the whole parameters (gathered by dt_model_get_parameters)
 * and generation logits within PARAM_TOL. A tensor set whole on the split model reads back whole, bit for bit;
 * checkpoints load across the layouts bit for bit, and so do a checkpoint's weights alone
 * (dt_model_load_weights); different tokens or tensor values on the
 * ranks of a TP group fail every rank; sequence_parallel without tp and impossible splits are
 * refused.
 *   mpiexec -n N test_capi_tp SCRATCH_DIR       (N = 2 or 4) */
#define _XOPEN_SOURCE 700 /* nftw, mkdir */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "against_one_rank.h"
#include "check.h"
#include "model_values.h"
#include "scratch_dir.h"

enum { STEPS = 6, B = 2, T = 8, VOCAB = 61 };
static const float TOL = 1e-5f;
/* Parameters and the logits computed from them, after STEPS AdamW steps: Adam's normalised
 * update turns rounding-level gradient differences of near-zero gradients into differences
 * of a good part of lr (3e-3) in the update, so these get the bound test_capi_zero uses. */
static const float PARAM_TOL = 1e-4f;

static int relative_ok(float got, float want) { return within(got, want, TOL); }

static dt_gpt_config_t config(int max_batch, int tied, int sp) {
  dt_gpt_config_t gc = DT_GPT_CONFIG_INIT;
  gc.layers = 2;
  gc.heads = 4;
  gc.d_model = 32;
  gc.seq_len = T;
  gc.vocab = VOCAB; /* not a multiple of tp: uneven vocabulary shards */
  gc.tie_embeddings = tied;
  gc.max_batch = max_batch;
  gc.sequence_parallel = sp;
  return gc;
}

/* Sequence s of a step's whole batch. */
static void sequence(int step, int s, int32_t* tokens, int32_t* targets) {
  learnable_sequence(step, s, T, VOCAB, tokens, targets);
}

typedef struct {
  dt_grid_t grid;
  dt_grid_t solo; /* tp 1, pp = world: DP groups of one rank, for the reference */
  pair_t pair;    /* the split model and the reference */
} layout_t;

static layout_t make_layout(dt_context_t ctx, int tp, int tied, int sp, int zero) {
  layout_t l;
  dt_grid_config_t g = DT_GRID_CONFIG_INIT, s = DT_GRID_CONFIG_INIT;
  dt_gpt_config_t gc;
  dt_optimizer_config_t oc = clipping_optimizer(zero);
  dt_comm_t one = NULL;
  int t = 0, p = 0;
  memset(&l, 0, sizeof l);
  g.tp = tp;
  OK(ctx, dt_grid_create(ctx, &g, &l.grid));
  OK(ctx, dt_grid_comm(l.grid, DT_GROUP_DP, &l.pair.dp));
  OK(ctx, dt_comm_size(l.pair.dp, &l.pair.dp_size));
  OK(ctx, dt_grid_coords(l.grid, &t, &p, &l.pair.dp_rank));
  l.pair.batch = B;
  l.pair.seq = T;
  l.pair.vocab = VOCAB;
  l.pair.tol = TOL;
  gc = config(B, tied, sp);
  OK(ctx, dt_model_create_gpt_grid(l.grid, &gc, &oc, &l.pair.split));
  OK(ctx, dt_context_size(ctx, &s.pp));
  OK(ctx, dt_grid_create(ctx, &s, &l.solo));
  OK(ctx, dt_grid_comm(l.solo, DT_GROUP_DP, &one));
  gc = config(B * l.pair.dp_size, tied, 0);
  OK(ctx, dt_model_create_gpt(one, &gc, &oc, &l.pair.ref));
  return l;
}

static void free_layout(dt_context_t ctx, layout_t* l) {
  OK(ctx, dt_model_destroy(l->pair.split));
  OK(ctx, dt_model_destroy(l->pair.ref));
  OK(ctx, dt_grid_destroy(l->solo));
  OK(ctx, dt_grid_destroy(l->grid));
}

static void test_layout(dt_context_t ctx, dt_comm_t world, int tp, int tied, int sp, int zero) {
  layout_t l = make_layout(ctx, tp, tied, sp, zero);
  int32_t tokens[B * T], targets[B * T];
  const int32_t prompt[5] = {3, 14, 15, 9, 26}, next = 5;
  float worst, pd, ld, es = 0, er = 0, ds[2][VOCAB], dr[2][VOCAB], *ps, *pr;
  size_t n = 0, nr = 0;
  char dir[1200], name[96];

  worst = train_pair(ctx, &l.pair, 0, STEPS);
  ps = parameters(ctx, l.pair.split, &n);
  pr = parameters(ctx, l.pair.ref, &nr);
  CHECK(n == nr);
  pd = max_diff(ps, pr, n < nr ? n : nr);
  CHECK(pd < PARAM_TOL);
  sequence(STEPS, 0, tokens, targets);
  sequence(STEPS, 1, tokens + T, targets + T);
  OK(ctx, dt_gpt_evaluate(l.pair.split, tokens, targets, B, T, &es));
  OK(ctx, dt_gpt_evaluate(l.pair.ref, tokens, targets, B, T, &er));
  CHECK(relative_ok(es, er));
  OK(ctx, dt_gpt_decode(l.pair.split, prompt, 5, 1, ds[0]));
  OK(ctx, dt_gpt_decode(l.pair.split, &next, 1, 0, ds[1]));
  OK(ctx, dt_gpt_decode(l.pair.ref, prompt, 5, 1, dr[0]));
  OK(ctx, dt_gpt_decode(l.pair.ref, &next, 1, 0, dr[1]));
  ld = max_diff(&ds[0][0], &dr[0][0], 2 * VOCAB) / max_abs(&dr[0][0], 2 * VOCAB);
  CHECK(ld <= PARAM_TOL);
  if (my_rank == 0)
    printf("tp=%d dp=%d sp=%d tied=%d zero=%d: max relative loss/norm gap to one rank over %d "
           "steps %.3g, max |param diff| %.3g, eval %.6f vs %.6f, logits within %.3g of the largest\n",
           tp, l.pair.dp_size, sp, tied, zero, STEPS, worst, pd, es, er, ld);
  free(ps);
  free(pr);

  /* A split tensor (q|k|v blocks sliced alike) set whole on both models reads back whole;
   * both train on alike. */
  {
    enum { N = 3 * 32 * 32 };
    static float v[N], back[N];
    for (int i = 0; i < N; ++i) v[i] = 0.001f * (float)(i % 97) - 0.05f;
    v[N - 5] = -0.0f; /* its sign survives the gather */
    OK(ctx, dt_model_set_tensor(l.pair.split, "h.1.attn.c_attn.weight", v, N));
    OK(ctx, dt_model_set_tensor(l.pair.ref, "h.1.attn.c_attn.weight", v, N));
    OK(ctx, dt_model_get_tensor(l.pair.split, "h.1.attn.c_attn.weight", back, N));
    CHECK(memcmp(v, back, sizeof v) == 0);
    train_pair(ctx, &l.pair, STEPS, STEPS + 2);
  }

  /* The split model's checkpoint loads into the one-rank model, and one written by a
   * one-rank model into the split one, bit for bit. */
  snprintf(name, sizeof name, "tp%d_sp%d_tied%d_zero%d", tp, sp, tied, zero);
  fresh_dir(ctx, world, name, dir, sizeof dir);
  OK(ctx, dt_model_save_checkpoint(l.pair.split, dir, 0));
  OK(ctx, dt_model_load_checkpoint(l.pair.ref, dir));
  CHECK(same_parameters(ctx, l.pair.split, l.pair.ref));
  train_pair(ctx, &l.pair, STEPS + 2, STEPS + 3);
  snprintf(name, sizeof name, "ref_tp%d_sp%d_tied%d_zero%d_rank%d", tp, sp, tied, zero, my_rank);
  fresh_dir(ctx, world, name, dir, sizeof dir);
  OK(ctx, dt_model_save_checkpoint(l.pair.ref, dir, 0));
  OK(ctx, dt_barrier(world));
  snprintf(name, sizeof name, "/ref_tp%d_sp%d_tied%d_zero%d_rank0", tp, sp, tied, zero);
  snprintf(dir, sizeof dir, "%s%s", scratch, name);
  OK(ctx, dt_model_load_checkpoint(l.pair.split, dir));
  CHECK(same_parameters(ctx, l.pair.split, l.pair.ref));

  /* Pretrained weights (dt_model_load_weights) from the one-rank model's checkpoint file: the
   * split model, every tensor of it overwritten first, takes them bit for bit and keeps its
   * step count; a file that cannot be read changes nothing. */
  {
    /* As large as the largest tensor: mlp.c_fc.weight, 4 d_model x d_model, or wte, vocab x
     * d_model (d_model 32). */
    static float filler[(VOCAB > 4 * 32 ? VOCAB : 4 * 32) * 32];
    char file[4096], tensor_name[128], dir_nan[1100];
    size_t length = 0, n_before, n_after;
    long steps = 0, steps_after = 0;
    int count = 0;
    float *before, *after;
    for (size_t i = 0; i < sizeof filler / sizeof *filler; ++i) filler[i] = 0.25f;
    /* The same values as a safetensors file of [out, in] weights, with a NaN in its last
     * tensor: refused only once every other tensor has been read. */
    char nan_file[1200], header[8192] = "{";
    size_t offset = 0;
    snprintf(name, sizeof name, "weights_tp%d_sp%d_tied%d_zero%d", tp, sp, tied, zero);
    fresh_dir(ctx, world, name, dir_nan, sizeof dir_nan);
    snprintf(nan_file, sizeof nan_file, "%s/nan.safetensors", dir_nan);
    OK(ctx, dt_model_num_tensors(l.pair.split, &count));
    for (int t = 0; t < count; ++t) {
      int64_t shape[4];
      int ndim = 0;
      size_t numel = 1;
      OK(ctx, dt_model_tensor_name(l.pair.split, t, tensor_name, sizeof tensor_name, &length));
      OK(ctx, dt_model_tensor_shape(l.pair.split, tensor_name, shape, 4, &ndim));
      for (int d = 0; d < ndim; ++d) numel *= (size_t)shape[d];
      OK(ctx, dt_model_set_tensor(l.pair.split, tensor_name, filler, numel));
      snprintf(header + strlen(header), sizeof header - strlen(header), "%s\"%s\":{\"dtype\":\"F32\",\"shape\":[%lld",
               t ? "," : "", tensor_name, (long long)shape[0]);
      for (int d = 1; d < ndim; ++d)
        snprintf(header + strlen(header), sizeof header - strlen(header), ",%lld", (long long)shape[d]);
      snprintf(header + strlen(header), sizeof header - strlen(header), "],\"data_offsets\":[%zu,%zu]}", offset,
               offset + 4 * numel);
      offset += 4 * numel;
    }
    strcat(header, "}");
    if (my_rank == 0) {
      FILE* f = fopen(nan_file, "wb");
      const uint64_t header_bytes = strlen(header);
      const float nan_value = NAN;
      unsigned char len[8];
      for (int i = 0; i < 8; ++i) len[i] = (unsigned char)(header_bytes >> (8 * i));
      fwrite(len, 1, 8, f);
      fwrite(header, 1, header_bytes, f);
      for (size_t i = 0; i + 1 < offset / 4; ++i) fwrite(&filler[0], 4, 1, f); /* little-endian hosts */
      fwrite(&nan_value, 4, 1, f);
      fclose(f);
    }
    OK(ctx, dt_barrier(world));
    CHECK(!same_parameters(ctx, l.pair.split, l.pair.ref));
    OK(ctx, dt_checkpoint_find(world, dir, file, sizeof file, &length));
    OK(ctx, dt_model_steps(l.pair.split, &steps));
    before = parameters(ctx, l.pair.split, &n_before);
    EXPECT(DT_ERR_IO, ctx, dt_model_load_weights(l.pair.split, "no_such_weights.safetensors"));
    EXPECT(DT_ERR_INVALID_CONFIG, ctx, dt_model_load_weights(l.pair.split, nan_file));
    CHECK(strstr(dt_get_last_error(ctx), "holds nan") != NULL);
    after = parameters(ctx, l.pair.split, &n_after);
    CHECK(n_before == n_after && memcmp(before, after, n_after * sizeof *after) == 0);
    free(before);
    free(after);
    OK(ctx, dt_model_load_weights(l.pair.split, file));
    CHECK(same_parameters(ctx, l.pair.split, l.pair.ref));
    OK(ctx, dt_model_steps(l.pair.split, &steps_after));
    CHECK(steps_after == steps);
  }
  free_layout(ctx, &l);
}

static void test_refusals(dt_context_t ctx) {
  dt_grid_t grid = NULL;
  dt_grid_config_t g = DT_GRID_CONFIG_INIT;
  dt_gpt_config_t gc = config(B, 1, 0);
  dt_model_t m = NULL;
  dt_comm_t world = NULL;
  int32_t tokens[B * T], targets[B * T];

  g.tp = 2;
  OK(ctx, dt_grid_create(ctx, &g, &grid));
  gc.heads = 3;
  gc.d_model = 30;
  FAILS(DT_ERR_INVALID_CONFIG, ctx, "heads (3) must be divisible", dt_model_create_gpt_grid(grid, &gc, NULL, &m));
  gc = config(B, 1, 1);
  OK(ctx, dt_context_world(ctx, &world));
  FAILS(DT_ERR_INVALID_CONFIG, ctx, "config->sequence_parallel needs tensor parallelism",
        dt_model_create_gpt(world, &gc, NULL, &m));
  CHECK(m == NULL);

  /* Different tokens on the ranks of one TP group: every rank refuses, the model unchanged. */
  gc = config(B, 1, 1);
  OK(ctx, dt_model_create_gpt_grid(grid, &gc, NULL, &m));
  for (int s = 0; s < B; ++s) sequence(0, s + my_rank, tokens + s * T, targets + s * T);
  EXPECT(DT_ERR_INVALID_ARGUMENT, ctx, dt_gpt_forward_backward(m, tokens, targets, B, T, NULL));
  MESSAGE(ctx, "different tokens");
  /* The same for a tensor set whole with different values. */
  {
    float bias[32];
    for (int i = 0; i < 32; ++i) bias[i] = (float)(i + my_rank);
    EXPECT(DT_ERR_INVALID_ARGUMENT, ctx, dt_model_set_tensor(m, "h.0.ln_1.bias", bias, 32));
    MESSAGE(ctx, "different tensor names or values");
  }
  /* Sequence parallelism splits batch * seq rows over tp. */
  FAILS(DT_ERR_INVALID_ARGUMENT, ctx, "batch * seq must be divisible by the grid's tp",
        dt_gpt_forward_backward(m, tokens, targets, 1, 3, NULL));
  OK(ctx, dt_model_destroy(m));
  OK(ctx, dt_grid_destroy(grid));
}

/* Without ZeRO 3 a call is collective over the TP group only: one DP replica evaluates and
 * decodes while the other does not (they used to wait for it), and a bad token fails that
 * replica's TP group alone. */
static void test_one_replica_alone(dt_context_t ctx, dt_comm_t world) {
  dt_grid_t grid = NULL;
  dt_grid_config_t g = DT_GRID_CONFIG_INIT;
  dt_gpt_config_t gc = config(B, 1, 0);
  dt_model_t m = NULL;
  int t = 0, p = 0, dp_rank = 0;
  int32_t tokens[B * T], targets[B * T];
  const int32_t prompt[3] = {3, 14, 15}, bad = VOCAB;
  float loss = 0, logits[VOCAB];
  g.tp = 2;
  OK(ctx, dt_grid_create(ctx, &g, &grid));
  OK(ctx, dt_grid_coords(grid, &t, &p, &dp_rank));
  OK(ctx, dt_model_create_gpt_grid(grid, &gc, NULL, &m));
  if (dp_rank == 0) {
    for (int s = 0; s < B; ++s) sequence(0, s, tokens + s * T, targets + s * T);
    OK(ctx, dt_gpt_evaluate(m, tokens, targets, B, T, &loss));
    CHECK(loss > 0);
    OK(ctx, dt_gpt_decode(m, prompt, 3, 1, logits));
    EXPECT(DT_ERR_INVALID_ARGUMENT, ctx, dt_gpt_decode(m, &bad, 1, 0, logits));
    MESSAGE(ctx, "outside [0, vocab)");
  }
  OK(ctx, dt_barrier(world));
  OK(ctx, dt_model_destroy(m));
  OK(ctx, dt_grid_destroy(grid));
}

int main(int argc, char** argv) {
  dt_context_t ctx = NULL;
  dt_comm_t world = NULL;
  int size = 0, status;
  status = start_with_scratch("test_capi_tp", &argc, &argv, &ctx, &world, &size);
  if (status != 0) return status;

  test_layout(ctx, world, 2, 1, 0, 0);
  test_layout(ctx, world, 2, 0, 1, 1);
  test_layout(ctx, world, 2, 1, 1, 3);
  if (size == 4) {
    test_layout(ctx, world, 2, 1, 0, 2);
    test_layout(ctx, world, 4, 1, 1, 0);
    test_one_replica_alone(ctx, world);
  }
  test_refusals(ctx);

  status = finish("capi_tp", ctx, world);
  OK(ctx, dt_finalize(ctx));
  return status;
}
