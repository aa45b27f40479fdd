/* A rank that runs out of memory while a model is made fails every rank of the model with
 * DT_ERR_OUT_OF_MEMORY and its message ("rank r: ..."), instead of leaving the others waiting
 * for it in the model's first collective; with the memory back, the same model is made and
 * trains. The last rank's address space is capped (RLIMIT_AS, a little above what it maps)
 * while a GPT, an MLP in bf16 under ZeRO 1 (whose engine used to share its rounded parameters
 * while it was made) and a byom's first step allocate a few hundred MB, and while a GPT under
 * ZeRO 3 (whose decode is collective) allocates its key/value cache.
 *   mpiexec -n N test_capi_memory */
#define _XOPEN_SOURCE 700 /* getrlimit, sysconf */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "check.h"

enum { VOCAB = 65536, T = 16 };

static dt_gpt_config_t big_gpt(void) {
  dt_gpt_config_t gc = DT_GPT_CONFIG_INIT;
  gc.layers = 2;
  gc.heads = 4;
  gc.d_model = 256; /* a 65536 x 256 embedding: 64 MiB, with its gradient and moments 256 */
  gc.seq_len = T;
  gc.vocab = VOCAB;
  gc.max_batch = 1;
  gc.device = "cpu";
  return gc;
}

/* This process's mapped bytes (Linux: the first field of /proc/self/statm, in pages). */
static size_t mapped_bytes(void) {
  unsigned long pages = 0;
  FILE* f = fopen("/proc/self/statm", "r");
  if (!f) return 0;
  if (fscanf(f, "%lu", &pages) != 1) pages = 0;
  fclose(f);
  return (size_t)pages * (size_t)sysconf(_SC_PAGESIZE);
}

/* On the limited rank, caps the address space at what it maps plus 32 MiB; returns the old
 * limit to restore. */
static struct rlimit cap_memory(int limited) {
  struct rlimit old, capped;
  getrlimit(RLIMIT_AS, &old);
  capped = old;
  if (limited) {
    capped.rlim_cur = (rlim_t)(mapped_bytes() + ((size_t)32 << 20));
    CHECK(mapped_bytes() > 0 && setrlimit(RLIMIT_AS, &capped) == 0);
  }
  return old;
}

/* The call's result on every rank is the out-of-memory failure of the limited rank. */
static void expect_agreed_failure(dt_context_t ctx, dt_result_t got, int size) {
  char rank_text[32];
  CHECK(got == DT_ERR_OUT_OF_MEMORY);
  MESSAGE(ctx, "memory");
  if (size > 1) {
    snprintf(rank_text, sizeof rank_text, "rank %d: ", size - 1);
    MESSAGE(ctx, rank_text);
  }
}

static void gpt_step(dt_context_t ctx, dt_model_t m) {
  int32_t tokens[T], targets[T];
  float loss = 0;
  for (int i = 0; i < T; ++i) {
    tokens[i] = (i * 977) % VOCAB;
    targets[i] = (i * 331 + 7) % VOCAB;
  }
  OK(ctx, dt_gpt_forward_backward(m, tokens, targets, 1, T, &loss));
  OK(ctx, dt_model_step(m, 1e-3f, NULL));
  CHECK(loss > 0);
}

int main(int argc, char** argv) {
  dt_context_t ctx = NULL;
  dt_comm_t world = NULL;
  dt_model_t m = NULL;
  int size = 0, status, limited;
  struct rlimit old;
  if (dt_init(&argc, &argv, &ctx) != DT_SUCCESS) {
    fprintf(stderr, "test_capi_memory: dt_init failed: %s\n", dt_get_last_error(NULL));
    return 1;
  }
  OK(ctx, dt_context_rank(ctx, &my_rank));
  OK(ctx, dt_context_size(ctx, &size));
  OK(ctx, dt_context_world(ctx, &world));
  limited = my_rank == size - 1;

  { /* A small model first: the threads and buffers a first model starts are in place. */
    dt_gpt_config_t gc = big_gpt();
    gc.vocab = 64;
    OK(ctx, dt_model_create_gpt(world, &gc, NULL, &m));
    OK(ctx, dt_model_destroy(m));
  }
  {
    const dt_gpt_config_t gc = big_gpt();
    old = cap_memory(limited);
    expect_agreed_failure(ctx, dt_model_create_gpt(world, &gc, NULL, &m), size);
    CHECK(m == NULL);
    if (m) OK(ctx, dt_model_destroy(m));
    if (limited) setrlimit(RLIMIT_AS, &old);
    OK(ctx, dt_model_create_gpt(world, &gc, NULL, &m));
    gpt_step(ctx, m);
    OK(ctx, dt_model_destroy(m));
  }
  {
    static const int sizes[3] = {4096, 4096, 10}; /* 16.8M parameters */
    dt_mlp_config_t mc = DT_MLP_CONFIG_INIT;
    dt_optimizer_config_t oc = DT_OPTIMIZER_CONFIG_INIT;
    oc.zero_stage = 1; /* the rounded parameter pieces were shared while it was made */
    mc.sizes = sizes;
    mc.num_sizes = 3;
    mc.device = "cpu";
    mc.precision = "bf16";
    old = cap_memory(limited);
    expect_agreed_failure(ctx, dt_model_create_mlp(world, &mc, &oc, &m), size);
    CHECK(m == NULL);
    if (m) OK(ctx, dt_model_destroy(m));
    if (limited) setrlimit(RLIMIT_AS, &old);
    OK(ctx, dt_model_create_mlp(world, &mc, &oc, &m));
    OK(ctx, dt_model_destroy(m));
  }
  { /* a byom allocates its arena and AdamW state at the first step */
    const size_t n = (size_t)1 << 24;
    const int64_t shape[1] = {(int64_t)n};
    float* w = calloc(n, sizeof *w);
    float* g = calloc(n, sizeof *g);
    dt_byom_t b = NULL;
    float norm = 0;
    OK(ctx, dt_byom_create(world, NULL, &b));
    OK(ctx, dt_byom_register(b, "w", 1, shape, DT_F32, w, g, 0));
    old = cap_memory(limited);
    expect_agreed_failure(ctx, dt_byom_step(b, 1e-3f, &norm), size);
    if (limited) setrlimit(RLIMIT_AS, &old);
    OK(ctx, dt_byom_step(b, 1e-3f, &norm));
    OK(ctx, dt_byom_destroy(b));
    free(g);
    free(w);
  }
  { /* ZeRO 3 makes a GPT's decode collective; its key/value cache (about 42 MB at seq_len
     * 2048) is allocated at the first call */
    dt_gpt_config_t gc = big_gpt();
    dt_optimizer_config_t oc = DT_OPTIMIZER_CONFIG_INIT;
    int32_t tokens[2] = {1, 2};
    float* logits = NULL;
    gc.vocab = 64;
    gc.seq_len = 2048;
    oc.zero_stage = 3;
    logits = calloc((size_t)gc.vocab, sizeof *logits);
    OK(ctx, dt_model_create_gpt(world, &gc, &oc, &m));
    old = cap_memory(limited);
    expect_agreed_failure(ctx, dt_gpt_decode(m, tokens, 2, 1, logits), size);
    if (limited) setrlimit(RLIMIT_AS, &old);
    OK(ctx, dt_gpt_decode(m, tokens, 2, 1, logits));
    OK(ctx, dt_model_destroy(m));
    free(logits);
  }
  if (my_rank == 0) printf("out of memory on rank %d while a GPT, an MLP, a byom and a decode allocated: every rank failed alike\n", size - 1);

  status = finish("capi_memory", ctx, world);
  OK(ctx, dt_finalize(ctx));
  return status;
}
