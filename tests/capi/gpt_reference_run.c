/* Two AdamW steps of the built-in GPT through the C ABI, written out for an independent
 * reference (check_gpt_reference.py: GPT-2 forward, backward and AdamW in NumPy float64,
 * from docs/model.md and the header's optimiser settings, not from dtrain's code).
 *
 * The initial parameters are made livelier first (liven_parameters). Checkpoints before the first step and after each of two
 * (OUT/npN/ckpt/step_0000000{0,1,2}.h5) and OUT/npN/values.txt: the model and optimiser settings, the batch, each step's loss and
 * gradient norm, the loss dt_gpt_evaluate() gives after them and dt_gpt_decode()'s logits
 * for a prompt. With N ranks the batch is cut over them (data parallelism, ZeRO `zero`); the
 * losses written are the global batch's.
 *   mpiexec -n N gpt_reference_run OUT_DIR [tied 0|1] [zero 0..3] [device cpu|cuda]
 * (N divides 4; with cuda and no GPU it exits 77, skipped) */
#define _XOPEN_SOURCE 700 /* nftw, mkdir */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "scratch_dir.h"

enum { LAYERS = 2, HEADS = 2, D_MODEL = 32, SEQ = 16, VOCAB = 75, BATCH = 4, PROMPT = 5, STEPS = 2 };
static const float LR[STEPS] = {1e-2f, 5e-3f};

/* Token t of sequence b, a fixed pattern reaching most of the vocabulary. */
static int32_t token(int b, int t) { return (int32_t)((b * 31 + t * t * 7 + 3) % VOCAB); }

/* Livelier values than the initialisation's: matrices ten times larger (so GELU's inputs,
 * the attention scores and the logits reach the order of one, where their curvature shows)
 * and vectors off their 1 and 0 (so every LayerNorm gain and bias matters). The same on
 * every rank. */
static void liven_parameters(dt_context_t ctx, dt_model_t model) {
  static float values[VOCAB * D_MODEL * 4];
  int count = 0, i, ndim = 0;
  int64_t shape[2] = {0, 0}, n, j;
  char name[128];
  size_t length = 0;
  OK(ctx, dt_model_num_tensors(model, &count));
  for (i = 0; i < count; ++i) {
    OK(ctx, dt_model_tensor_name(model, i, name, sizeof name, &length));
    OK(ctx, dt_model_tensor_shape(model, name, shape, 2, &ndim));
    n = ndim == 2 ? shape[0] * shape[1] : shape[0];
    CHECK(n <= (int64_t)(sizeof values / sizeof values[0]));
    if (failures) return;
    OK(ctx, dt_model_get_tensor(model, name, values, (size_t)n));
    for (j = 0; j < n; ++j)
      values[j] = ndim == 2 ? 10.0f * values[j] : values[j] + 0.1f * (float)sin(1.3 * (double)j + i);
    OK(ctx, dt_model_set_tensor(model, name, values, (size_t)n));
  }
}

static float mean_over_ranks(dt_context_t ctx, dt_comm_t world, float mine) {
  float mean = 0.0f;
  OK(ctx, dt_all_reduce(world, &mine, &mean, 1, DT_F32, DT_AVG));
  return mean;
}

int main(int argc, char** argv) {
  dt_context_t ctx = NULL;
  dt_comm_t world = NULL;
  dt_model_t model = NULL;
  int size = 0, status, b, t, s;
  const int tied = argc > 2 ? atoi(argv[2]) : 1, zero = argc > 3 ? atoi(argv[3]) : 0;
  const char* device = argc > 4 ? argv[4] : "cpu";
  dt_result_t created;
  char dir[1100], path[1200];
  int32_t tokens[BATCH][SEQ], targets[BATCH][SEQ], prompt[PROMPT];
  float loss[STEPS + 1], norm[STEPS], logits[VOCAB];
  dt_gpt_config_t gc = DT_GPT_CONFIG_INIT;
  dt_optimizer_config_t oc = DT_OPTIMIZER_CONFIG_INIT;
  FILE* out;

  status = start_with_scratch("gpt_reference_run", &argc, &argv, &ctx, &world, &size);
  if (status != 0) return status;
  if (BATCH % size != 0) {
    fprintf(stderr, "gpt_reference_run: %d ranks do not divide the batch of %d\n", size, BATCH);
    return 2;
  }
  gc.layers = LAYERS;
  gc.heads = HEADS;
  gc.d_model = D_MODEL;
  gc.seq_len = SEQ;
  gc.vocab = VOCAB; /* not a multiple of 64: the padded rows must stay out of everything */
  gc.tie_embeddings = tied;
  gc.max_batch = BATCH;
  gc.device = device;
  oc.clip_grad = 0.0f; /* the reference's moments take the raw gradient */
  oc.zero_stage = zero;
  created = dt_model_create_gpt(world, &gc, &oc, &model);
  if (created == DT_ERR_UNAVAILABLE) {
    if (my_rank == 0) printf("gpt_reference_run: skipped: %s\n", dt_get_last_error(ctx));
    OK(ctx, dt_finalize(ctx));
    return 77;
  }
  OK(ctx, created);
  if (failures) return 1;
  {
    char where[256];
    size_t length = 0;
    OK(ctx, dt_model_device(model, where, sizeof where, &length));
    CHECK(strncmp(where, device, strlen(device)) == 0); /* "cpu ..." or "cuda ..." */
    if (my_rank == 0) printf("gpt_reference_run: the model runs on %s\n", where);
  }

  for (b = 0; b < BATCH; ++b)
    for (t = 0; t < SEQ; ++t) {
      tokens[b][t] = token(b, t);
      targets[b][t] = token(b, t + 1);
    }
  for (t = 0; t < PROMPT; ++t) prompt[t] = token(5, t);

  /* This rank's share of the batch: rows [rank * share, (rank + 1) * share). */
  {
    const int share = BATCH / size;
    liven_parameters(ctx, model);
    fresh_dir(ctx, world, "ckpt", dir, sizeof dir);
    OK(ctx, dt_model_save_checkpoint(model, dir, 0));
    for (s = 0; s < STEPS; ++s) {
      float mine = 0.0f;
      OK(ctx, dt_gpt_forward_backward(model, tokens[my_rank * share], targets[my_rank * share], share,
                                      SEQ, &mine));
      loss[s] = mean_over_ranks(ctx, world, mine);
      OK(ctx, dt_model_step(model, LR[s], &norm[s]));
      OK(ctx, dt_model_save_checkpoint(model, dir, 0));
    }
    {
      float mine = 0.0f;
      OK(ctx, dt_gpt_evaluate(model, tokens[my_rank * share], targets[my_rank * share], share, SEQ, &mine));
      loss[STEPS] = mean_over_ranks(ctx, world, mine);
    }
    OK(ctx, dt_gpt_decode(model, prompt, PROMPT, 1, logits));
  }

  if (my_rank == 0 && failures == 0) {
    snprintf(path, sizeof path, "%s/values.txt", scratch);
    out = fopen(path, "w");
    CHECK(out != NULL);
    if (out) {
      fprintf(out, "layers %d\nheads %d\nd_model %d\nseq_len %d\nvocab %d\ntied %d\n", LAYERS, HEADS,
              D_MODEL, SEQ, VOCAB, tied);
      fprintf(out, "beta1 %.9g\nbeta2 %.9g\neps %.9g\nweight_decay %.9g\n", oc.beta1, oc.beta2, oc.eps,
              oc.weight_decay);
      fprintf(out, "lr");
      for (s = 0; s < STEPS; ++s) fprintf(out, " %.9g", LR[s]);
      fprintf(out, "\nloss");
      for (s = 0; s <= STEPS; ++s) fprintf(out, " %.9g", loss[s]);
      fprintf(out, "\ngrad_norm");
      for (s = 0; s < STEPS; ++s) fprintf(out, " %.9g", norm[s]);
      fprintf(out, "\ntokens");
      for (b = 0; b < BATCH; ++b)
        for (t = 0; t < SEQ; ++t) fprintf(out, " %d", tokens[b][t]);
      fprintf(out, "\ntargets");
      for (b = 0; b < BATCH; ++b)
        for (t = 0; t < SEQ; ++t) fprintf(out, " %d", targets[b][t]);
      fprintf(out, "\nprompt");
      for (t = 0; t < PROMPT; ++t) fprintf(out, " %d", prompt[t]);
      fprintf(out, "\nlogits");
      for (t = 0; t < VOCAB; ++t) fprintf(out, " %.9g", logits[t]);
      fprintf(out, "\n");
      CHECK(fclose(out) == 0);
    }
  }
  OK(ctx, dt_model_destroy(model));
  status = finish("gpt_reference_run", ctx, world);
  OK(ctx, dt_finalize(ctx));
  return status;
}
