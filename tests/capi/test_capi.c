/* Exercises the functions of dtrain.h from C and checks that the data-parallel
 * bring-your-own-model step equals a single-rank reference computed here (plain C:
 * full-batch gradient, clipping, AdamW). Every error class of every entry point is in
 * test_capi_errors.c, checkpoints in test_capi_checkpoint.c. Runs at any rank count. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "dtrain.h"

static void test_errors_without_context(void) {
  int v = 0;
  CHECK(dt_get_version() == DT_VERSION_CODE);
  CHECK(strcmp(dt_get_error_string(DT_SUCCESS), "success") == 0);
  CHECK(strcmp(dt_get_error_string(DT_ERR_INVALID_HANDLE), "invalid handle") == 0);
  CHECK(strcmp(dt_get_error_string((dt_result_t)12345), "unknown result code") == 0);
  EXPECT(DT_ERR_INVALID_HANDLE, NULL, dt_context_rank(NULL, &v));
  MESSAGE(NULL, "dt_context_rank: ctx is not a live dt_context_t (NULL)");
  EXPECT(DT_ERR_INVALID_HANDLE, NULL, dt_all_reduce(NULL, &v, &v, 1, DT_I32, DT_SUM));
  EXPECT(DT_ERR_INVALID_HANDLE, NULL, dt_model_step(NULL, 0.1f, NULL));
  EXPECT(DT_ERR_INVALID_HANDLE, NULL, dt_finalize(NULL));
  EXPECT(DT_ERR_INVALID_ARGUMENT, NULL, dt_init(NULL, NULL, NULL));
  MESSAGE(NULL, "ctx must not be NULL");
}

static void test_context(dt_context_t ctx, int size) {
  int r = -1, s = -1, count = 0, threads = 0;
  dt_comm_t world = NULL;
  OK(ctx, dt_context_rank(ctx, &r));
  OK(ctx, dt_context_size(ctx, &s));
  CHECK(r == my_rank && s == size);
  OK(ctx, dt_context_cpu_threads(ctx, &threads));  /* its rule: test_capi_threads.c */
  CHECK(threads >= 1);
  OK(ctx, dt_context_world(ctx, &world));
  EXPECT(DT_ERR_INVALID_ARGUMENT, ctx, dt_context_rank(ctx, NULL));
  MESSAGE(ctx, "rank must not be NULL");
  /* A handle of another kind is refused, not misread. */
  EXPECT(DT_ERR_INVALID_HANDLE, ctx, dt_comm_rank((dt_comm_t)ctx, &r));
  MESSAGE(NULL, "comm is not a live dt_comm_t (destroyed, finalized, or another kind");
  EXPECT(DT_ERR_INVALID_HANDLE, ctx, dt_context_size((dt_context_t)world, &s));

  OK(ctx, dt_comm_world_ranks(world, NULL, 0, &count));
  CHECK(count == size);
  {
    int ranks[64];
    int small[1];
    OK(ctx, dt_comm_world_ranks(world, ranks, 64, &count));
    for (int i = 0; i < count; ++i) CHECK(ranks[i] == i);
    if (size > 1) EXPECT(DT_ERR_INVALID_ARGUMENT, ctx, dt_comm_world_ranks(world, small, 1, &count));
  }
}

static void test_collectives(dt_context_t ctx, dt_comm_t world, int size) {
  int rank = my_rank;
  int ival = rank + 1, isum = 0;
  OK(ctx, dt_all_reduce(world, &ival, &isum, 1, DT_I32, DT_SUM));
  CHECK(isum == size * (size + 1) / 2);
  {
    float f[3] = {(float)rank, 1.0f, -(float)rank};
    OK(ctx, dt_all_reduce(world, f, f, 3, DT_F32, DT_AVG)); /* in place */
    CHECK(fabsf(f[0] - (size - 1) / 2.0f) < 1e-6f && f[1] == 1.0f);
    double d = rank, dmax = -1;
    OK(ctx, dt_all_reduce(world, &d, &dmax, 1, DT_F64, DT_MAX));
    CHECK(dmax == size - 1);
  }
  {
    long long mine[2] = {rank, 10 * rank};
    long long* all = calloc((size_t)(2 * size), sizeof *all);
    OK(ctx, dt_all_gather(world, mine, all, 2, DT_I64));
    for (int r = 0; r < size; ++r) CHECK(all[2 * r] == r && all[2 * r + 1] == 10 * r);
    free(all);
  }
  {
    float* send = malloc(sizeof(float) * (size_t)(2 * size));
    float recv[2] = {0, 0};
    for (int i = 0; i < 2 * size; ++i) send[i] = (float)i;
    OK(ctx, dt_reduce_scatter(world, send, recv, 2, DT_F32, DT_SUM));
    CHECK(recv[0] == (float)(2 * rank * size) && recv[1] == (float)((2 * rank + 1) * size));
    free(send);
  }
  {
    int root = size - 1, value = rank == root ? 42 : -1;
    OK(ctx, dt_broadcast(world, &value, &value, 1, DT_I32, root));
    CHECK(value == 42);
    EXPECT(DT_ERR_INVALID_ARGUMENT, ctx, dt_broadcast(world, &value, &value, 1, DT_I32, size));
    MESSAGE(ctx, "root is not a rank");
  }
  OK(ctx, dt_barrier(world));
  OK(ctx, dt_all_reduce(world, NULL, NULL, 0, DT_F32, DT_SUM)); /* count 0: nothing */
  EXPECT(DT_ERR_INVALID_ARGUMENT, ctx, dt_all_reduce(world, &ival, &isum, 1, (dt_dtype_t)99, DT_SUM));
  MESSAGE(ctx, "unknown dtype 99");
  EXPECT(DT_ERR_INVALID_ARGUMENT, ctx, dt_all_reduce(world, &ival, &isum, 1, DT_I32, (dt_reduce_op_t)7));
  EXPECT(DT_ERR_INVALID_ARGUMENT, ctx, dt_all_reduce(world, NULL, &isum, 1, DT_I32, DT_SUM));
  MESSAGE(ctx, "dt_all_reduce: send must not be NULL");
}

static void test_grid(dt_context_t ctx, int size) {
  dt_grid_config_t cfg = DT_GRID_CONFIG_INIT;
  dt_grid_t grid = NULL;
  dt_comm_t dp = NULL, tp = NULL;
  int t = 0, p = 0, d = 0, tr = -1, pr = -1, dr = -1, n = 0;
  OK(ctx, dt_grid_create(ctx, &cfg, &grid));
  OK(ctx, dt_grid_shape(grid, &t, &p, &d));
  CHECK(t == 1 && p == 1 && d == size);
  OK(ctx, dt_grid_coords(grid, &tr, &pr, &dr));
  CHECK(tr == 0 && pr == 0 && dr == my_rank);
  OK(ctx, dt_grid_comm(grid, DT_GROUP_DP, &dp));
  OK(ctx, dt_grid_comm(grid, DT_GROUP_TP, &tp));
  OK(ctx, dt_comm_size(dp, &n));
  CHECK(n == size);
  OK(ctx, dt_comm_size(tp, &n));
  CHECK(n == 1);
  {
    /* The ranks of each group: dp is the whole world in order, tp this rank alone. */
    int members[64], count = 0;
    OK(ctx, dt_comm_world_ranks(dp, members, 64, &count));
    CHECK(count == size);
    for (int i = 0; i < count && i < 64; ++i) CHECK(members[i] == i);
    OK(ctx, dt_comm_world_ranks(tp, members, 64, &count));
    CHECK(count == 1 && members[0] == my_rank);
  }
  {
    dt_comm_t none = dp;
    EXPECT(DT_ERR_INVALID_ARGUMENT, ctx, dt_grid_comm(grid, (dt_group_t)9, &none));
    CHECK(none == NULL); /* a failed call sets its handle output to NULL */
  }
  {
    /* A grid in use cannot go away under its user. */
    dt_byom_t byom = NULL;
    OK(ctx, dt_byom_create(dp, NULL, &byom));
    EXPECT(DT_ERR_INVALID_STATE, ctx, dt_grid_destroy(grid));
    MESSAGE(ctx, "still used by 1");
    OK(ctx, dt_byom_destroy(byom));
    EXPECT(DT_ERR_INVALID_HANDLE, ctx, dt_byom_destroy(byom));
  }
  OK(ctx, dt_grid_destroy(grid));
  EXPECT(DT_ERR_INVALID_HANDLE, ctx, dt_grid_shape(grid, &t, &p, &d));
  EXPECT(DT_ERR_INVALID_HANDLE, ctx, dt_comm_size(dp, &n)); /* its groups went with it */

  cfg.tp = size + 1; /* cannot divide the world */
  EXPECT(DT_ERR_INVALID_CONFIG, ctx, dt_grid_create(ctx, &cfg, &grid));
  CHECK(grid == NULL);
  cfg.tp = 1;
  cfg.struct_size = 4;
  EXPECT(DT_ERR_INVALID_ARGUMENT, ctx, dt_grid_create(ctx, &cfg, &grid));
  MESSAGE(ctx, "DT_GRID_CONFIG_INIT");
}

/* ---- bring your own model: linear regression y = W x + b ------------------------------ */
enum { IN = 5, OUT = 3, NSAMPLES = 12, STEPS = 6 };

static float sample_x(int s, int i) { return sinf(0.37f * (float)(s * IN + i) + 0.1f); }
static float sample_y(int s, int o) { return cosf(0.21f * (float)(s * OUT + o)); }

/* Gradient of the mean squared error over samples [first, first+count) (0.5 * |Wx+b-y|^2). */
static void linear_grad(const float* W, const float* b, int first, int count, float* gW, float* gb) {
  memset(gW, 0, sizeof(float) * OUT * IN);
  memset(gb, 0, sizeof(float) * OUT);
  for (int s = first; s < first + count; ++s) {
    for (int o = 0; o < OUT; ++o) {
      float y = b[o];
      for (int i = 0; i < IN; ++i) y += W[o * IN + i] * sample_x(s, i);
      const float e = (y - sample_y(s, o)) / (float)count;
      gb[o] += e;
      for (int i = 0; i < IN; ++i) gW[o * IN + i] += e * sample_x(s, i);
    }
  }
}

static void init_params(float* W, float* b) {
  for (int i = 0; i < OUT * IN; ++i) W[i] = 0.1f * (float)((i * 7) % 5) - 0.2f;
  for (int o = 0; o < OUT; ++o) b[o] = 0.05f * (float)o;
}

/* The documented step, written out: clip by global norm, then AdamW (decay on W only). */
static void reference_adamw(float* p, const float* g, float* m, float* v, int n, float lr,
                            float scale, float wd, int step, const dt_optimizer_config_t* c) {
  const float c1 = (float)(1.0 / (1.0 - pow(c->beta1, step)));
  const float c2 = (float)(1.0 / (1.0 - pow(c->beta2, step)));
  for (int i = 0; i < n; ++i) {
    const float gi = g[i] * scale;
    m[i] = c->beta1 * m[i] + (1 - c->beta1) * gi;
    v[i] = c->beta2 * v[i] + (1 - c->beta2) * gi * gi;
    p[i] -= lr * (m[i] * c1 / (sqrtf(v[i] * c2) + c->eps) + wd * p[i]);
  }
}

static void test_byom(dt_context_t ctx, dt_comm_t world, int size, int zero_stage) {
  dt_optimizer_config_t oc = DT_OPTIMIZER_CONFIG_INIT;
  oc.clip_grad = 0.3f; /* small enough to clip the first steps */
  oc.zero_stage = zero_stage;
  oc.bucket_mb = 1e-5; /* several buckets even for this tiny model */
  float W[OUT * IN], b[OUT], gW[OUT * IN], gb[OUT];
  float rW[OUT * IN], rb[OUT], rgW[OUT * IN], rgb[OUT];
  float mW[OUT * IN] = {0}, vW[OUT * IN] = {0}, mb[OUT] = {0}, vb[OUT] = {0};
  int64_t wshape[2] = {OUT, IN}, bshape[1] = {OUT};
  dt_byom_t byom = NULL;
  const float lr = 0.05f;
  const int per_rank = NSAMPLES / size, first = my_rank * per_rank;
  float max_diff = 0;
  long steps = -1;

  if (NSAMPLES % size != 0) return; /* equal shards make the DP average the global mean */
  init_params(W, b);
  init_params(rW, rb);
  OK(ctx, dt_byom_create(world, &oc, &byom));
  EXPECT(DT_ERR_INVALID_STATE, ctx, dt_byom_step(byom, lr, NULL));
  MESSAGE(ctx, "no tensors registered");
  OK(ctx, dt_byom_register(byom, "linear.weight", 2, wshape, DT_F32, W, gW, 0));
  OK(ctx, dt_byom_register(byom, "linear.bias", 1, bshape, DT_F32, b, gb, DT_PARAM_NO_DECAY));
  EXPECT(DT_ERR_INVALID_ARGUMENT, ctx, dt_byom_register(byom, "linear.bias", 1, bshape, DT_F32, b, gb, 0));
  MESSAGE(ctx, "linear.bias");
  EXPECT(DT_ERR_NOT_IMPLEMENTED, ctx, dt_byom_register(byom, "x", 1, bshape, DT_F64, b, gb, 0));
  EXPECT(DT_ERR_INVALID_ARGUMENT, ctx, dt_byom_register(byom, "x", 0, bshape, DT_F32, b, gb, 0));
  EXPECT(DT_ERR_INVALID_ARGUMENT, ctx, dt_byom_register(byom, "x", 1, bshape, DT_F32, NULL, gb, 0));
  EXPECT(DT_ERR_INVALID_ARGUMENT, ctx, dt_byom_register(byom, NULL, 1, bshape, DT_F32, b, gb, 0));
  EXPECT(DT_ERR_INVALID_ARGUMENT, ctx, dt_byom_register(byom, "x", 1, bshape, DT_F32, b, gb, 8u));

  for (int step = 1; step <= STEPS; ++step) {
    float norm = -1;
    linear_grad(W, b, first, per_rank, gW, gb);
    OK(ctx, dt_byom_step(byom, lr, &norm));
    /* The single-rank reference on the whole batch. */
    linear_grad(rW, rb, 0, NSAMPLES, rgW, rgb);
    double sq = 0;
    for (int i = 0; i < OUT * IN; ++i) sq += (double)rgW[i] * rgW[i];
    for (int o = 0; o < OUT; ++o) sq += (double)rgb[o] * rgb[o];
    const double rnorm = sqrt(sq);
    const float scale = rnorm > oc.clip_grad ? (float)(oc.clip_grad / (rnorm + 1e-6)) : 1.0f;
    CHECK(fabs(norm - rnorm) < 1e-5 * (1 + rnorm));
    reference_adamw(rW, rgW, mW, vW, OUT * IN, lr, scale, oc.weight_decay, step, &oc);
    reference_adamw(rb, rgb, mb, vb, OUT, lr, scale, 0.0f, step, &oc);
  }
  for (int i = 0; i < OUT * IN; ++i) max_diff = worse(max_diff, fabsf(W[i] - rW[i]));
  for (int o = 0; o < OUT; ++o) max_diff = worse(max_diff, fabsf(b[o] - rb[o]));
  if (my_rank == 0)
    printf("byom zero=%d: max |dtrain - single-rank reference| = %.3g after %d steps\n",
           zero_stage, max_diff, STEPS);
  CHECK(max_diff < 2e-6f);
  OK(ctx, dt_byom_steps(byom, &steps));
  CHECK(steps == STEPS);
  /* A NaN gradient on the last rank only: every rank refuses the step, and nothing changes
   * (AdamW would have written NaNs into every parameter and moment). */
  {
    float keptW[OUT * IN], norm = 0;
    memcpy(keptW, W, sizeof W);
    linear_grad(W, b, first, per_rank, gW, gb);
    if (my_rank == size - 1) gW[0] = NAN;
    EXPECT(DT_ERR_INVALID_ARGUMENT, ctx, dt_byom_step(byom, lr, &norm));
    MESSAGE(ctx, "the gradients hold an inf or NaN");
    CHECK(memcmp(keptW, W, sizeof W) == 0);
    OK(ctx, dt_byom_steps(byom, &steps));
    CHECK(steps == STEPS);
    linear_grad(W, b, first, per_rank, gW, gb); /* the program's next gradients: on it goes */
    OK(ctx, dt_byom_step(byom, lr, &norm));
    CHECK(isfinite(norm) && memcmp(keptW, W, sizeof W) != 0);
  }
  EXPECT(DT_ERR_INVALID_STATE, ctx, dt_byom_register(byom, "late", 1, bshape, DT_F32, b, gb, 0));
  MESSAGE(ctx, "before the first step");
  OK(ctx, dt_byom_destroy(byom));
}

static void test_byom_config_errors(dt_context_t ctx, dt_comm_t world) {
  dt_optimizer_config_t oc = DT_OPTIMIZER_CONFIG_INIT;
  dt_byom_t byom = NULL;
  oc.zero_stage = 3; /* the parameters live in the program's buffers */
  EXPECT(DT_ERR_NOT_IMPLEMENTED, ctx, dt_byom_create(world, &oc, &byom));
  MESSAGE(ctx, "zero_stage 3 shards the parameters, but a byom's parameters live in the program's buffers");
  CHECK(byom == NULL);
  oc.zero_stage = -1;
  EXPECT(DT_ERR_INVALID_CONFIG, ctx, dt_byom_create(world, &oc, &byom));
  MESSAGE(ctx, "zero_stage must be 0, 1, 2 or 3");
  oc.zero_stage = 0;
  oc.beta1 = 1.5f;
  EXPECT(DT_ERR_INVALID_CONFIG, ctx, dt_byom_create(world, &oc, &byom));
  MESSAGE(ctx, "beta1");
  oc = (dt_optimizer_config_t)DT_OPTIMIZER_CONFIG_INIT;
  oc.struct_size = 8;
  EXPECT(DT_ERR_INVALID_ARGUMENT, ctx, dt_byom_create(world, &oc, &byom));
  CHECK(byom == NULL);
}

/* ---- built-in MLP: data parallel over the world == one rank on the whole batch ---------- */
enum { MIN = 4, MCLASSES = 3, MBATCH = 8 };

static void mlp_batch(int step, int first, int count, float* x, int32_t* y) {
  for (int s = 0; s < count; ++s) {
    const int id = step * MBATCH + first + s;
    float acc = 0;
    for (int i = 0; i < MIN; ++i) {
      x[s * MIN + i] = sinf(0.7f * (float)(id * MIN + i));
      acc += x[s * MIN + i] * (float)(i + 1);
    }
    y[s] = acc > 1.0f ? 2 : (acc > -1.0f ? 1 : 0);
  }
}

static void test_mlp(dt_context_t ctx, dt_comm_t world, int size) {
  const int sizes[3] = {MIN, 16, MCLASSES};
  dt_mlp_config_t mc = DT_MLP_CONFIG_INIT;
  dt_grid_config_t gc = DT_GRID_CONFIG_INIT;
  dt_grid_t solo_grid = NULL;
  dt_comm_t solo = NULL;
  dt_model_t dp_model = NULL, ref_model = NULL;
  float x[MBATCH * MIN], logits[MBATCH * MCLASSES];
  int32_t y[MBATCH];
  float first_loss = 0, last_loss = 0;
  size_t n = 0;
  mc.num_sizes = 3;
  mc.sizes = sizes;
  mc.max_batch = MBATCH;
  if (MBATCH % size != 0) return;
  const int per_rank = MBATCH / size;

  /* pp = world size leaves a dp group of one on every rank: the single-rank reference. */
  gc.pp = size;
  OK(ctx, dt_grid_create(ctx, &gc, &solo_grid));
  OK(ctx, dt_grid_comm(solo_grid, DT_GROUP_DP, &solo));
  OK(ctx, dt_model_create_mlp(world, &mc, NULL, &dp_model));
  OK(ctx, dt_model_create_mlp(solo, &mc, NULL, &ref_model));
  OK(ctx, dt_model_num_parameters(dp_model, &n));
  CHECK(n == (size_t)(MIN * 16 + 16 + 16 * MCLASSES + MCLASSES));

  for (int step = 0; step < 30; ++step) {
    float loss = 0, ref_loss = 0;
    mlp_batch(step % 4, my_rank * per_rank, per_rank, x, y);
    OK(ctx, dt_mlp_forward_backward(dp_model, x, y, per_rank, &loss));
    OK(ctx, dt_model_step(dp_model, 0.01f, NULL));
    mlp_batch(step % 4, 0, MBATCH, x, y);
    OK(ctx, dt_mlp_forward_backward(ref_model, x, y, MBATCH, &ref_loss));
    OK(ctx, dt_model_step(ref_model, 0.01f, NULL));
    if (step == 0) first_loss = ref_loss;
    last_loss = ref_loss;
  }
  CHECK(last_loss < 0.8f * first_loss);
  {
    float* a = malloc(n * sizeof *a);
    float* r = malloc(n * sizeof *r);
    float diff = 0;
    OK(ctx, dt_model_get_parameters(dp_model, a, n));
    OK(ctx, dt_model_get_parameters(ref_model, r, n));
    for (size_t i = 0; i < n; ++i) diff = worse(diff, fabsf(a[i] - r[i]));
    if (my_rank == 0)
      printf("mlp: loss %.4f -> %.4f; max |dp - single rank| = %.3g\n", first_loss, last_loss, diff);
    CHECK(diff < 1e-4f);
    EXPECT(DT_ERR_INVALID_ARGUMENT, ctx, dt_model_get_parameters(dp_model, a, n - 1));
    free(a);
    free(r);
  }
  {
    float eval = -1;
    mlp_batch(0, 0, MBATCH, x, y);
    OK(ctx, dt_mlp_evaluate(ref_model, x, y, MBATCH, &eval));
    CHECK(eval > 0 && eval < first_loss);
    OK(ctx, dt_mlp_predict(ref_model, x, MBATCH, logits));
    CHECK(isfinite(logits[MBATCH * MCLASSES - 1]));
    y[0] = MCLASSES; /* out of range */
    EXPECT(DT_ERR_INVALID_ARGUMENT, ctx, dt_mlp_forward_backward(ref_model, x, y, MBATCH, NULL));
    EXPECT(DT_ERR_INVALID_ARGUMENT, ctx, dt_mlp_forward_backward(ref_model, x, y, MBATCH + 1, NULL));
    EXPECT(DT_ERR_INVALID_ARGUMENT, ctx, dt_mlp_evaluate(ref_model, x, NULL, MBATCH, &eval));
    EXPECT(DT_ERR_INVALID_ARGUMENT, ctx, dt_gpt_evaluate(ref_model, y, y, 1, 1, &eval));
    MESSAGE(ctx, "model is not a GPT");
    EXPECT(DT_ERR_INVALID_ARGUMENT, ctx, dt_gpt_decode(ref_model, y, 1, 1, logits));
    MESSAGE(ctx, "model is not a GPT");
  }
  EXPECT(DT_ERR_INVALID_STATE, ctx, dt_grid_destroy(solo_grid));
  OK(ctx, dt_model_destroy(ref_model));
  OK(ctx, dt_grid_destroy(solo_grid));
  EXPECT(DT_ERR_INVALID_HANDLE, ctx, dt_model_step(ref_model, 0.1f, NULL));

  {
    const int bad_sizes[2] = {MIN, 0};
    dt_model_t m = NULL;
    mc.sizes = bad_sizes;
    mc.num_sizes = 2;
    EXPECT(DT_ERR_INVALID_CONFIG, ctx, dt_model_create_mlp(world, &mc, NULL, &m));
    mc.num_sizes = 1;
    EXPECT(DT_ERR_INVALID_ARGUMENT, ctx, dt_model_create_mlp(world, &mc, NULL, &m));
    EXPECT(DT_ERR_INVALID_ARGUMENT, ctx, dt_model_create_mlp(world, NULL, NULL, &m));
    CHECK(m == NULL);
  }
  /* dp_model stays alive: dt_finalize must release it. */
}

/* -log softmax(logits)[target], in double */
static double next_token_loss(const float* logits, int vocab, int target) {
  double max = logits[0], sum = 0;
  for (int v = 1; v < vocab; ++v) max = logits[v] > max ? logits[v] : max;
  for (int v = 0; v < vocab; ++v) sum += exp(logits[v] - max);
  return max + log(sum) - logits[target];
}

/* Generation's logits, fed one token at a time, give at each position the cross-entropy
 * that dt_gpt_evaluate averages over the sequence; all tokens at once give the last one's. */
static void test_gpt_decode(dt_context_t ctx, dt_model_t gpt, const int32_t* tokens,
                            const int32_t* targets, int T, int vocab) {
  float logits[64], eval = 0;
  double sum = 0;
  CHECK(vocab <= 64);
  for (int t = 0; t < T; ++t) {
    OK(ctx, dt_gpt_decode(gpt, tokens + t, 1, t == 0, logits));
    sum += next_token_loss(logits, vocab, targets[t]);
  }
  OK(ctx, dt_gpt_evaluate(gpt, tokens, targets, 1, T, &eval));
  CHECK(fabs(sum / T - eval) < 1e-5 * eval);
  EXPECT(DT_ERR_INVALID_ARGUMENT, ctx, dt_gpt_decode(gpt, tokens, 1, 0, logits));
  MESSAGE(ctx, "longer than seq_len");
  OK(ctx, dt_gpt_decode(gpt, tokens, T, 1, logits));
  {
    float one_by_one[64];
    OK(ctx, dt_gpt_decode(gpt, tokens, T - 1, 1, one_by_one));
    OK(ctx, dt_gpt_decode(gpt, tokens + T - 1, 1, 0, one_by_one));
    CHECK(fabs(next_token_loss(one_by_one, vocab, targets[T - 1]) -
               next_token_loss(logits, vocab, targets[T - 1])) < 1e-5);
  }
  { /* A tensor set (or a step, or a load) after the text began: its keys and values are of
     * the parameters before, so only a new text may follow (appending mixed the two). A
     * refused set changes nothing and the text goes on. The values set are wpe's own. */
    enum { WPE = 8 * 16 };
    float wpe[WPE];
    CHECK(T == 8);
    OK(ctx, dt_model_get_tensor(gpt, "wpe", wpe, WPE));
    OK(ctx, dt_gpt_decode(gpt, tokens, 2, 1, logits));
    EXPECT(DT_ERR_INVALID_ARGUMENT, ctx, dt_model_set_tensor(gpt, "wpe", wpe, WPE - 1));
    OK(ctx, dt_gpt_decode(gpt, tokens + 2, 1, 0, logits));
    OK(ctx, dt_model_set_tensor(gpt, "wpe", wpe, WPE));
    FAILS(DT_ERR_INVALID_STATE, ctx, "the parameters changed", dt_gpt_decode(gpt, tokens + 3, 1, 0, logits));
    OK(ctx, dt_gpt_decode(gpt, tokens, 4, 1, logits));
    OK(ctx, dt_gpt_decode(gpt, tokens + 4, 1, 0, logits));
  }
  EXPECT(DT_ERR_INVALID_ARGUMENT, ctx, dt_gpt_decode(gpt, tokens, 0, 1, logits));
  MESSAGE(ctx, "count must be at least 1");
  EXPECT(DT_ERR_INVALID_ARGUMENT, ctx, dt_gpt_decode(gpt, tokens, 1, 1, NULL));
  MESSAGE(ctx, "logits must not be NULL");
  {
    const int32_t bad = vocab;
    EXPECT(DT_ERR_INVALID_ARGUMENT, ctx, dt_gpt_decode(gpt, &bad, 1, 1, logits));
    MESSAGE(ctx, "is outside [0, vocab)");
  }
}

static void test_gpt(dt_context_t ctx, dt_comm_t world) {
  dt_gpt_config_t gc = DT_GPT_CONFIG_INIT;
  dt_model_t gpt = NULL;
  enum { B = 2, T = 8 };
  int32_t tokens[B * T], targets[B * T];
  float loss = 0, loss2 = 0, norm = 0;
  gc.layers = 1;
  gc.heads = 2;
  gc.d_model = 16;
  gc.seq_len = T;
  gc.vocab = 32;
  gc.max_batch = B;
  for (int i = 0; i < B * T; ++i) {
    tokens[i] = (i * 5) % 32;
    targets[i] = (i * 5 + 5) % 32;
  }
  OK(ctx, dt_model_create_gpt(world, &gc, NULL, &gpt));
  OK(ctx, dt_gpt_forward_backward(gpt, tokens, targets, B, T, &loss));
  CHECK(fabsf(loss - logf(32.0f)) < 0.5f);
  OK(ctx, dt_model_step(gpt, 1e-2f, &norm));
  CHECK(norm > 0);
  for (int s = 0; s < 10; ++s) {
    OK(ctx, dt_gpt_forward_backward(gpt, tokens, targets, B, T, NULL));
    OK(ctx, dt_model_step(gpt, 1e-2f, NULL));
  }
  OK(ctx, dt_gpt_evaluate(gpt, tokens, targets, B, T, &loss2));
  CHECK(loss2 < loss);
  test_gpt_decode(ctx, gpt, tokens, targets, T, gc.vocab);
  {
    /* Activation recomputation trains the same model bit for bit (the same 11 steps). */
    dt_gpt_config_t rc = gc;
    dt_model_t again = NULL;
    float loss3 = 0;
    rc.recompute = 1;
    OK(ctx, dt_model_create_gpt(world, &rc, NULL, &again));
    for (int s = 0; s < 11; ++s) {
      OK(ctx, dt_gpt_forward_backward(again, tokens, targets, B, T, NULL));
      OK(ctx, dt_model_step(again, 1e-2f, NULL));
    }
    OK(ctx, dt_gpt_evaluate(again, tokens, targets, B, T, &loss3));
    CHECK(loss3 == loss2);
    {
      /* Steps before its first text: a text begun by appending to none (new_text 0) is of
       * these parameters, and goes on. */
      float logits[32];
      OK(ctx, dt_gpt_decode(again, tokens, 2, 0, logits));
      OK(ctx, dt_gpt_decode(again, tokens + 2, 1, 0, logits));
    }
    OK(ctx, dt_model_destroy(again));
  }
  tokens[3] = 32;
  EXPECT(DT_ERR_INVALID_ARGUMENT, ctx, dt_gpt_forward_backward(gpt, tokens, targets, B, T, NULL));
  MESSAGE(ctx, "tokens[3] = 32 is outside [0, vocab)");
  EXPECT(DT_ERR_INVALID_ARGUMENT, ctx, dt_gpt_evaluate(gpt, targets, targets, B, T + 1, &loss));
  EXPECT(DT_ERR_INVALID_ARGUMENT, ctx, dt_mlp_predict(gpt, NULL, 1, NULL));
  OK(ctx, dt_model_destroy(gpt));
  gc.heads = 3; /* does not divide d_model */
  EXPECT(DT_ERR_INVALID_CONFIG, ctx, dt_model_create_gpt(world, &gc, NULL, &gpt));
  MESSAGE(ctx, "must divide");
  CHECK(gpt == NULL);
}

/* dt_sample_token: softmax([0, ln 3]) = [1/4, 3/4]; walking from the most likely token, a
 * draw below 3/4 gives token 1, one above gives token 0; temperature 0, top_k 1 and top_p 1/2
 * always give token 1; bad settings are refused. */
static void test_sampling(void) {
  const float logits[2] = {0.0f, 1.0986123f};
  dt_sampling_config_t sc = DT_SAMPLING_CONFIG_INIT;
  int32_t t = -1;
  OK(NULL, dt_sample_token(logits, 2, NULL, 0.5, &t));
  CHECK(t == 1);
  OK(NULL, dt_sample_token(logits, 2, NULL, 0.8, &t));
  CHECK(t == 0);
  sc.temperature = 0;
  OK(NULL, dt_sample_token(logits, 2, &sc, 0.99, &t));
  CHECK(t == 1);
  sc = (dt_sampling_config_t)DT_SAMPLING_CONFIG_INIT;
  sc.top_k = 1;
  OK(NULL, dt_sample_token(logits, 2, &sc, 0.99, &t));
  CHECK(t == 1);
  sc = (dt_sampling_config_t)DT_SAMPLING_CONFIG_INIT;
  sc.top_p = 0.5;
  OK(NULL, dt_sample_token(logits, 2, &sc, 0.99, &t));
  CHECK(t == 1);
  sc.temperature = 2.0; /* [0.366, 0.634]: a draw of 0.7 now passes token 1 */
  sc.top_p = 1.0;
  OK(NULL, dt_sample_token(logits, 2, &sc, 0.7, &t));
  CHECK(t == 0);
}

int main(int argc, char** argv) {
  dt_context_t ctx = NULL;
  dt_comm_t world = NULL;
  int size = 0;
  test_errors_without_context();
  OK(NULL, dt_init(&argc, &argv, &ctx));
  OK(ctx, dt_context_rank(ctx, &my_rank));
  OK(ctx, dt_context_size(ctx, &size));
  OK(ctx, dt_context_world(ctx, &world));

  test_context(ctx, size);
  test_collectives(ctx, world, size);
  test_grid(ctx, size);
  test_byom(ctx, world, size, 0);
  test_byom(ctx, world, size, 1);
  test_byom(ctx, world, size, 2); /* byom: ZeRO 2 shards what ZeRO 1 does */
  test_byom_config_errors(ctx, world);
  test_mlp(ctx, world, size);
  test_gpt(ctx, world);
  test_sampling();

  {
    /* Everything still alive goes with the context; later calls are refused, not crashes. */
    int r = 0;
    const int status = finish("capi", ctx, world);
    OK(ctx, dt_finalize(ctx));
    EXPECT(DT_ERR_INVALID_HANDLE, NULL, dt_context_rank(ctx, &r));
    MESSAGE(ctx, "finalized");
    EXPECT(DT_ERR_INVALID_HANDLE, NULL, dt_barrier(world));
    EXPECT(DT_ERR_INVALID_HANDLE, NULL, dt_finalize(ctx));
    if (status != 0 || failures != 0) {
      fprintf(stderr, "[rank %d] capi: %d of %d checks failed\n", my_rank, failures, checks);
      return 1;
    }
  }
  return 0;
}
