/* Helpers of the C tests that train a GPT split over ranks (tensor or pipeline parallel)
 * next to the same GPT on each rank alone, trained on the whole batch of every step: the
 * optimiser settings, the batches, and the training loop that compares the two models.
 * Include after check.h. */
#ifndef DTRAIN_TEST_AGAINST_ONE_RANK_H
#define DTRAIN_TEST_AGAINST_ONE_RANK_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "check.h"

/* The split model and its reference, and what a step gives them. */
typedef struct {
  dt_model_t split; /* over the grid: one DP replica takes `batch` sequences of a step */
  dt_model_t ref;   /* on this rank alone, over the whole batch (dp_size x batch) */
  dt_comm_t dp;     /* the grid's DP group */
  int dp_size, dp_rank;
  int batch, seq, vocab;
  float tol; /* relative bound of each step's loss (averaged over dp) and gradient norm */
} pair_t;

/* AdamW with clipping active: the norm must be the whole model's. */
static inline dt_optimizer_config_t clipping_optimizer(int zero) {
  dt_optimizer_config_t oc = DT_OPTIMIZER_CONFIG_INIT;
  oc.zero_stage = zero;
  oc.clip_grad = 0.5f;
  return oc;
}

/* Sequence s (0-based over the whole batch of a step): a learnable next-token pattern. */
static inline void learnable_sequence(int step, int s, int seq, int vocab, int32_t* tokens,
                                      int32_t* targets) {
  for (int i = 0; i < seq; ++i) {
    tokens[i] = (step * 7 + s * 13 + i * 5) % vocab;
    targets[i] = (tokens[i] * 3 + 1) % vocab;
  }
}

static inline int within(float got, float want, float tol) {
  return fabsf(got - want) <= tol * fabsf(want);
}

/* Steps [from, to) of both models, each step's loss and norm checked within p->tol; returns
 * the worst relative gap. */
static inline float train_pair(dt_context_t ctx, const pair_t* p, int from, int to) {
  const int all = p->dp_size * p->batch, mine = p->dp_rank * p->batch * p->seq;
  int32_t* tokens = malloc(sizeof(int32_t) * (size_t)(all * p->seq));
  int32_t* targets = malloc(sizeof(int32_t) * (size_t)(all * p->seq));
  float worst = 0;
  for (int step = from; step < to; ++step) {
    float ls = 0, lr = 0, ns = 0, nr = 0, mean = 0;
    for (int s = 0; s < all; ++s)
      learnable_sequence(step, s, p->seq, p->vocab, tokens + s * p->seq, targets + s * p->seq);
    OK(ctx, dt_gpt_forward_backward(p->split, tokens + mine, targets + mine, p->batch, p->seq, &ls));
    OK(ctx, dt_gpt_forward_backward(p->ref, tokens, targets, all, p->seq, &lr));
    OK(ctx, dt_model_step(p->split, 3e-3f, &ns));
    OK(ctx, dt_model_step(p->ref, 3e-3f, &nr));
    OK(ctx, dt_all_reduce(p->dp, &ls, &mean, 1, DT_F32, DT_AVG));
    CHECK(within(mean, lr, p->tol));
    CHECK(within(ns, nr, p->tol));
    worst = worse(worst, worse(fabsf(mean - lr) / lr, fabsf(ns - nr) / nr));
  }
  free(tokens);
  free(targets);
  return worst;
}

#endif /* DTRAIN_TEST_AGAINST_ONE_RANK_H */
