/* Checkpoints through the C ABI: registered (byom) tensors and built-in models are saved and
 * loaded; a run resumed from a checkpoint ends bit for bit where the uninterrupted run ends
 * (also across ZeRO stages, to rounding); pruning, finding the newest checkpoint, tensor
 * access by name, and the error paths (missing files, other models, unregistered names); a
 * load under other AdamW settings is said.
 *   mpiexec -n N test_capi_checkpoint SCRATCH_DIR */
#define _XOPEN_SOURCE 700 /* nftw, mkdir */
#include <fcntl.h>
#include <ftw.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "model_values.h"
#include "scratch_dir.h"

static int world_size = 1;

static int file_exists(const char* dir, const char* name) {
  char path[1200];
  FILE* f;
  snprintf(path, sizeof path, "%s/%s", dir, name);
  f = fopen(path, "rb");
  if (f) fclose(f);
  return f != NULL;
}

/* ---- a linear model the test owns (byom) ------------------------------------------------ */
enum { IN = 3, OUT = 2, NS = 8 };

typedef struct {
  float W[OUT * IN], b[OUT], gW[OUT * IN], gb[OUT];
  dt_byom_t h;
} linear_t;

static float xval(int step, int s, int i) { return sinf(0.3f * (float)((step * NS + s) * IN + i) + 0.2f); }
static float yval(int step, int s, int o) { return cosf(0.17f * (float)((step * NS + s) * OUT + o)); }

/* Gradient of the mean of 0.5*|Wx+b-y|^2 over this rank's share of the step's samples. */
static void linear_grads(linear_t* m, int step) {
  const int per = NS / world_size, first = my_rank * per;
  memset(m->gW, 0, sizeof m->gW);
  memset(m->gb, 0, sizeof m->gb);
  for (int s = first; s < first + per; ++s)
    for (int o = 0; o < OUT; ++o) {
      float e = m->b[o];
      for (int i = 0; i < IN; ++i) e += m->W[o * IN + i] * xval(step, s, i);
      e = (e - yval(step, s, o)) / (float)per;
      m->gb[o] += e;
      for (int i = 0; i < IN; ++i) m->gW[o * IN + i] += e * xval(step, s, i);
    }
}

static void linear_open(dt_context_t ctx, dt_comm_t world, int zero, float init, linear_t* m) {
  const int64_t wshape[2] = {OUT, IN}, bshape[1] = {OUT};
  dt_optimizer_config_t oc = DT_OPTIMIZER_CONFIG_INIT;
  oc.zero_stage = zero;
  oc.bucket_mb = 1e-5; /* several buckets */
  for (int i = 0; i < OUT * IN; ++i) m->W[i] = init + 0.1f * (float)(i % 4);
  for (int o = 0; o < OUT; ++o) m->b[o] = init;
  OK(ctx, dt_byom_create(world, &oc, &m->h));
  OK(ctx, dt_byom_register(m->h, "linear.weight", 2, wshape, DT_F32, m->W, m->gW, 0));
  OK(ctx, dt_byom_register(m->h, "linear.bias", 1, bshape, DT_F32, m->b, m->gb, DT_PARAM_NO_DECAY));
}

static void linear_train(dt_context_t ctx, linear_t* m, int from, int to) {
  for (int step = from; step < to; ++step) {
    linear_grads(m, step);
    OK(ctx, dt_byom_step(m->h, 0.05f, NULL));
  }
}

/* Save at step 4 with one ZeRO stage, resume in a fresh handle with another: the resumed run
 * ends where the uninterrupted one does (bit for bit with the same stage). */
static void test_byom_resume(dt_context_t ctx, dt_comm_t world, int zero_save, int zero_load) {
  char name[64], dir[1100];
  linear_t a, b;
  float W4[OUT * IN], b4[OUT];
  long steps = -1;
  snprintf(name, sizeof name, "byom_z%d_z%d", zero_save, zero_load);
  fresh_dir(ctx, world, name, dir, sizeof dir);

  linear_open(ctx, world, zero_save, 0.0f, &a);
  linear_train(ctx, &a, 0, 4);
  OK(ctx, dt_byom_save_checkpoint(a.h, dir, 0));
  memcpy(W4, a.W, sizeof W4);
  memcpy(b4, a.b, sizeof b4);
  linear_train(ctx, &a, 4, 8);

  linear_open(ctx, world, zero_load, 0.5f, &b);
  OK(ctx, dt_byom_load_checkpoint(b.h, dir)); /* a directory: its latest checkpoint */
  OK(ctx, dt_byom_steps(b.h, &steps));
  CHECK(steps == 4);
  CHECK(memcmp(b.W, W4, sizeof W4) == 0 && memcmp(b.b, b4, sizeof b4) == 0);
  linear_train(ctx, &b, 4, 8);
  if (zero_save == zero_load) {
    CHECK(memcmp(b.W, a.W, sizeof a.W) == 0 && memcmp(b.b, a.b, sizeof a.b) == 0);
  } else {
    CHECK(max_diff(b.W, a.W, OUT * IN) < 1e-6f && max_diff(b.b, a.b, OUT) < 1e-6f);
  }
  if (my_rank == 0)
    printf("byom: saved with ZeRO-%d, resumed with ZeRO-%d: max |resumed - uninterrupted| = %.3g\n",
           zero_save, zero_load, max_diff(b.W, a.W, OUT * IN));
  OK(ctx, dt_byom_destroy(a.h));
  OK(ctx, dt_byom_destroy(b.h));
}

/* keep prunes old checkpoints; dt_checkpoint_find names the newest. */
static void test_keep_and_find(dt_context_t ctx, dt_comm_t world) {
  char dir[1100], path[1200], tiny[8];
  size_t len = 99;
  linear_t m;
  fresh_dir(ctx, world, "keep", dir, sizeof dir);
  OK(ctx, dt_checkpoint_find(world, dir, path, sizeof path, &len));
  CHECK(len == 0 && path[0] == '\0');
  linear_open(ctx, world, 1, 0.0f, &m);
  for (int s = 0; s < 3; ++s) {
    linear_train(ctx, &m, s, s + 1);
    OK(ctx, dt_byom_save_checkpoint(m.h, dir, 2));
  }
  OK(ctx, dt_barrier(world));
  if (my_rank == 0) {
    CHECK(!file_exists(dir, "step_00000001.h5"));
    CHECK(file_exists(dir, "step_00000002.h5") && file_exists(dir, "step_00000003.h5"));
    CHECK(file_exists(dir, "latest"));
  }
  OK(ctx, dt_checkpoint_find(world, dir, NULL, 0, &len));
  CHECK(len == strlen(dir) + strlen("/step_00000003.h5"));
  OK(ctx, dt_checkpoint_find(world, dir, path, sizeof path, &len));
  CHECK(strstr(path, "step_00000003.h5") != NULL && strlen(path) == len);
  FAILS(DT_ERR_INVALID_ARGUMENT, ctx, "capacity is too small for the path",
        dt_checkpoint_find(world, dir, tiny, sizeof tiny, &len));
  CHECK(len == strlen(path));
  /* A short buffer on the last rank only fails every rank; a trailing '/' names the same
   * directory, existing or not. */
  FAILS(DT_ERR_INVALID_ARGUMENT, ctx, "capacity is too small for the path",
        dt_checkpoint_find(world, dir, my_rank == world_size - 1 ? tiny : path,
                           my_rank == world_size - 1 ? sizeof tiny : sizeof path, &len));
  {
    char slash[1200];
    snprintf(slash, sizeof slash, my_rank == 0 ? "%s/" : "%s", dir);
    OK(ctx, dt_checkpoint_find(world, slash, path, sizeof path, &len));
    CHECK(strstr(path, "step_00000003.h5") != NULL);
    snprintf(slash, sizeof slash, my_rank == 0 ? "%s/not_yet/" : "%s/not_yet", dir);
    OK(ctx, dt_checkpoint_find(world, slash, path, sizeof path, &len));
    CHECK(len == 0);
  }
  snprintf(path, sizeof path, "%s/no_such_dir", dir);
  OK(ctx, dt_checkpoint_find(world, path, tiny, sizeof tiny, &len));
  CHECK(len == 0 && tiny[0] == '\0');
  /* A file where the directory should be is a mistake, not a fresh start. */
  snprintf(path, sizeof path, "%s/step_00000003.h5", dir);
  FAILS(DT_ERR_IO, ctx, "not a directory", dt_checkpoint_find(world, path, tiny, sizeof tiny, &len));
  /* Names that only look like checkpoints are passed over, also by pruning. */
  if (my_rank == 0) {
    FILE* f;
    snprintf(path, sizeof path, "%s/step_99999999999999999999.h5", dir);
    f = fopen(path, "wb");
    fclose(f);
    snprintf(path, sizeof path, "%s/latest", dir);
    remove(path);
  }
  OK(ctx, dt_barrier(world));
  OK(ctx, dt_checkpoint_find(world, dir, path, sizeof path, &len));
  CHECK(strstr(path, "step_00000003.h5") != NULL);
  linear_train(ctx, &m, 3, 4);
  OK(ctx, dt_byom_save_checkpoint(m.h, dir, 2));
  OK(ctx, dt_checkpoint_find(world, dir, path, sizeof path, &len));
  CHECK(strstr(path, "step_00000004.h5") != NULL);
  /* A NaN in the parameters (here on the last rank only) refuses the save on every rank before
   * anything is written: the checkpoint that loads stays, not pruned, and `latest` names it. */
  {
    const float kept = m.b[OUT - 1];
    if (my_rank == world_size - 1) m.b[OUT - 1] = NAN;
    FAILS(DT_ERR_INVALID_ARGUMENT, ctx, "would hold nan", dt_byom_save_checkpoint(m.h, dir, 1));
    m.b[OUT - 1] = kept;
    OK(ctx, dt_barrier(world));
    if (my_rank == 0) {
      CHECK(file_exists(dir, "step_00000003.h5") && file_exists(dir, "step_00000004.h5"));
      CHECK(!file_exists(dir, "step_00000004.h5.tmp"));
    }
    OK(ctx, dt_checkpoint_find(world, dir, path, sizeof path, &len));
    CHECK(strstr(path, "step_00000004.h5") != NULL);
    OK(ctx, dt_byom_load_checkpoint(m.h, dir));
  }
  /* A directory the file system cannot resolve fails on every rank alike, with no hang. */
  snprintf(path, sizeof path, "%s/loop", dir);
  if (my_rank == 0) CHECK(symlink(path, path) == 0);
  OK(ctx, dt_barrier(world));
  FAILS(DT_ERR_IO, ctx, "loop", dt_checkpoint_find(world, path, tiny, sizeof tiny, &len));
  FAILS(DT_ERR_IO, ctx, "loop", dt_byom_load_checkpoint(m.h, path));
  OK(ctx, dt_byom_destroy(m.h));
}

static void test_byom_errors(dt_context_t ctx, dt_comm_t world) {
  char dir[1100], empty[1100], path[1200];
  linear_t m;
  dt_byom_t none = NULL, other = NULL;
  float extra[2] = {0, 0}, gextra[2] = {0, 0}, W[OUT * IN], gW[OUT * IN];
  const int64_t eshape[1] = {2}, transposed[2] = {IN, OUT};

  fresh_dir(ctx, world, "errors", dir, sizeof dir);
  fresh_dir(ctx, world, "empty", empty, sizeof empty);
  OK(ctx, dt_byom_create(world, NULL, &none));
  FAILS(DT_ERR_INVALID_STATE, ctx, "dt_byom_save_checkpoint: no tensors registered",
        dt_byom_save_checkpoint(none, dir, 0));
  FAILS(DT_ERR_INVALID_STATE, ctx, "dt_byom_load_checkpoint: no tensors registered",
        dt_byom_load_checkpoint(none, dir));
  OK(ctx, dt_byom_destroy(none));

  linear_open(ctx, world, 0, 0.0f, &m);
  linear_train(ctx, &m, 0, 1);
  OK(ctx, dt_byom_save_checkpoint(m.h, dir, 0));
  FAILS(DT_ERR_INVALID_STATE, ctx, "before the first step or checkpoint",
        dt_byom_register(m.h, "late", 1, eshape, DT_F32, extra, gextra, 0));
  FAILS(DT_ERR_IO, ctx, "dt_byom_load_checkpoint: no checkpoint in directory",
        dt_byom_load_checkpoint(m.h, empty));
  snprintf(path, sizeof path, "%s/missing.h5", dir);
  FAILS(DT_ERR_IO, ctx, "no checkpoint file or directory", dt_byom_load_checkpoint(m.h, path));
  snprintf(path, sizeof path, "%s/not_hdf5.h5", dir);
  if (my_rank == 0) {
    FILE* f = fopen(path, "wb");
    fputs("this is not an HDF5 file", f);
    fclose(f);
  }
  OK(ctx, dt_barrier(world));
  EXPECT(DT_ERR_IO, ctx, dt_byom_load_checkpoint(m.h, path));
  MESSAGE(ctx, "not_hdf5.h5");
  snprintf(path, sizeof path, "%s/not_hdf5.h5/sub", dir); /* a directory inside a file */
  EXPECT(DT_ERR_IO, ctx, dt_byom_save_checkpoint(m.h, path, 0));
  /* Rank 0 creates the directory and says why it cannot; the others say it with rank 0's words. */
  MESSAGE(ctx, "not_hdf5.h5/sub");
  if (my_rank != 0) MESSAGE(ctx, "checkpoint failed on world rank 0: ");

  /* Paths that differ between the ranks fail every rank (a collective open of two files
   * would wait forever); so does an empty dir on one rank of dt_checkpoint_find. */
  {
    int size = 1;
    size_t len = 0;
    OK(ctx, dt_comm_size(world, &size));
    if (size > 1) {
      snprintf(path, sizeof path, "%s/rank%d", dir, my_rank);
      FAILS(DT_ERR_INVALID_ARGUMENT, ctx, "different dir paths", dt_byom_save_checkpoint(m.h, path, 0));
      FAILS(DT_ERR_INVALID_ARGUMENT, ctx, "different source paths", dt_byom_load_checkpoint(m.h, path));
      FAILS(DT_ERR_INVALID_ARGUMENT, ctx, "different dir paths",
            dt_checkpoint_find(world, path, NULL, 0, &len));
      EXPECT(DT_ERR_INVALID_ARGUMENT, ctx, dt_checkpoint_find(world, my_rank == 1 ? "" : dir, NULL, 0, &len));
      if (my_rank == 1) MESSAGE(ctx, "dir must not be empty");
      /* The same place spelt two ways agrees; keep values that differ do not. */
      snprintf(path, sizeof path, my_rank == 1 ? "%s/." : "%s", dir);
      OK(ctx, dt_byom_save_checkpoint(m.h, path, 0));
      FAILS(DT_ERR_INVALID_ARGUMENT, ctx, "different dir paths or keep values",
            dt_byom_save_checkpoint(m.h, dir, my_rank));
    }
  }

  /* A tensor registered here but absent from the file, and one of another shape. */
  OK(ctx, dt_byom_create(world, NULL, &other));
  OK(ctx, dt_byom_register(other, "linear.weight", 2, (const int64_t[]){OUT, IN}, DT_F32, W, gW, 0));
  OK(ctx, dt_byom_register(other, "extra", 1, eshape, DT_F32, extra, gextra, 0));
  FAILS(DT_ERR_INVALID_CONFIG, ctx, "has no tensor 'extra'", dt_byom_load_checkpoint(other, dir));
  OK(ctx, dt_byom_destroy(other));
  OK(ctx, dt_byom_create(world, NULL, &other));
  OK(ctx, dt_byom_register(other, "linear.weight", 2, transposed, DT_F32, W, gW, 0));
  FAILS(DT_ERR_INVALID_CONFIG, ctx, "tensor 'linear.weight' has shape [2, 3] in checkpoint",
        dt_byom_load_checkpoint(other, dir));
  OK(ctx, dt_byom_destroy(other));
  OK(ctx, dt_byom_destroy(m.h));
}

/* ---- built-in models ------------------------------------------------------------------- */
enum { MIN = 4, MHID = 16, MCLASSES = 3, MBATCH = 8 };

static void mlp_train(dt_context_t ctx, dt_model_t model, int from, int to) {
  const int per = MBATCH / world_size;
  float x[MBATCH * MIN];
  int32_t y[MBATCH];
  for (int step = from; step < to; ++step) {
    for (int s = 0; s < per; ++s) {
      const int id = step * MBATCH + my_rank * per + s;
      float acc = 0;
      for (int i = 0; i < MIN; ++i) acc += (x[s * MIN + i] = sinf(0.7f * (float)(id * MIN + i)));
      y[s] = acc > 0.5f ? 2 : (acc > -0.5f ? 1 : 0);
    }
    OK(ctx, dt_mlp_forward_backward(model, x, y, per, NULL));
    OK(ctx, dt_model_step(model, 0.01f, NULL));
  }
}

/* An MLP under `oc` (ZeRO 1 and the defaults where NULL). */
static dt_model_t make_mlp_with(dt_context_t ctx, dt_comm_t world, uint64_t seed, int hidden,
                                const dt_optimizer_config_t* oc) {
  const int sizes[3] = {MIN, hidden, MCLASSES};
  dt_mlp_config_t mc = DT_MLP_CONFIG_INIT;
  dt_optimizer_config_t defaults = DT_OPTIMIZER_CONFIG_INIT;
  dt_model_t m = NULL;
  mc.num_sizes = 3;
  mc.sizes = sizes;
  mc.max_batch = MBATCH;
  mc.seed = seed;
  defaults.zero_stage = 1;
  OK(ctx, dt_model_create_mlp(world, &mc, oc ? oc : &defaults, &m));
  return m;
}

static dt_model_t make_mlp(dt_context_t ctx, dt_comm_t world, uint64_t seed, int hidden) {
  return make_mlp_with(ctx, world, seed, hidden, NULL);
}

static dt_model_t make_gpt(dt_context_t ctx, dt_comm_t world, uint64_t seed) {
  dt_gpt_config_t gc = DT_GPT_CONFIG_INIT;
  dt_model_t m = NULL;
  gc.layers = 1;
  gc.heads = 2;
  gc.d_model = 16;
  gc.seq_len = 8;
  gc.vocab = 24;
  gc.max_batch = 2;
  gc.seed = seed;
  OK(ctx, dt_model_create_gpt(world, &gc, NULL, &m));
  return m;
}

static void test_mlp_resume(dt_context_t ctx, dt_comm_t world, char* dir, size_t n_dir) {
  dt_model_t a = make_mlp(ctx, world, 1, MHID), b = make_mlp(ctx, world, 2, MHID);
  size_t n = 0;
  long steps = -1;
  float *p3, *pa, *pb;
  fresh_dir(ctx, world, "mlp", dir, n_dir);
  mlp_train(ctx, a, 0, 3);
  OK(ctx, dt_model_save_checkpoint(a, dir, 0));
  p3 = parameters(ctx, a, &n);
  mlp_train(ctx, a, 3, 6);
  pa = parameters(ctx, a, &n);

  pb = parameters(ctx, b, &n);
  CHECK(max_diff(pb, p3, n) > 0); /* another seed: other weights until loaded */
  free(pb);
  OK(ctx, dt_model_load_checkpoint(b, dir));
  OK(ctx, dt_model_steps(b, &steps));
  CHECK(steps == 3);
  pb = parameters(ctx, b, &n);
  CHECK(memcmp(pb, p3, n * sizeof *pb) == 0);
  free(pb);
  mlp_train(ctx, b, 3, 6);
  pb = parameters(ctx, b, &n);
  CHECK(memcmp(pb, pa, n * sizeof *pb) == 0);
  if (my_rank == 0) printf("mlp: resumed run max |diff| = %.3g over %zu parameters\n", max_diff(pb, pa, n), n);
  free(p3);
  free(pa);
  free(pb);
  OK(ctx, dt_model_destroy(a));
  OK(ctx, dt_model_destroy(b));
}

/* Loads copies of dir/name, each with one byte flipped (every 499th byte, and the first
 * bytes of the file), into model, whose parameters are `want` (n of them) at step 2 before
 * and must be after every load, refused or not. Rank 0 writes the copies. */
static void corrupt_loads_change_nothing(dt_context_t ctx, dt_comm_t world, dt_model_t model,
                                         const char* dir, const char* name, const float* want,
                                         size_t n) {
  char path[1200], bad[1200];
  unsigned char* bytes = NULL;
  long size = 0, refused = 0, tried = 0;
  FILE* f;
  snprintf(path, sizeof path, "%s/%s", dir, name);
  snprintf(bad, sizeof bad, "%s/flipped.h5", dir);
  f = fopen(path, "rb");
  CHECK(f != NULL);
  if (!f) return;
  fseek(f, 0, SEEK_END);
  size = ftell(f);
  fseek(f, 0, SEEK_SET);
  bytes = malloc((size_t)size);
  CHECK(fread(bytes, 1, (size_t)size, f) == (size_t)size);
  fclose(f);
  for (long at = 0; at < size; at += at < 64 ? 7 : 499) {
    dt_result_t rc;
    long steps = -1;
    size_t got = 0;
    float* now;
    if (my_rank == 0) {
      bytes[at] ^= 0xFF;
      f = fopen(bad, "wb");
      fwrite(bytes, 1, (size_t)size, f);
      fclose(f);
      bytes[at] ^= 0xFF;
    }
    OK(ctx, dt_barrier(world));
    rc = dt_model_load_checkpoint(model, bad);
    ++tried;
    if (rc != DT_SUCCESS) ++refused;
    CHECK(rc == DT_SUCCESS || rc == DT_ERR_CORRUPT_DATA || rc == DT_ERR_IO || rc == DT_ERR_INVALID_CONFIG);
    OK(ctx, dt_model_steps(model, &steps));
    now = parameters(ctx, model, &got);
    if (got != n || memcmp(now, want, n * sizeof *now) != 0 || steps != 2) {
      ++checks;
      ++failures;
      fprintf(stderr, "[rank %d] byte %ld flipped: load returned %d (%s) and changed the model\n",
              my_rank, at, (int)rc, dt_get_last_error(ctx));
    }
    free(now);
  }
  free(bytes);
  CHECK(refused > tried / 2); /* most bytes are data, checksummed, or metadata, checksummed */
  if (my_rank == 0) printf("corrupt loads: %ld of %ld flipped bytes refused, none changed the model\n", refused, tried);
}

/* Loads dir into model with this rank's stderr going to a file (then shown on stdout); 1
 * when the library said `text` there. */
static int load_says(dt_context_t ctx, dt_comm_t world, dt_model_t model, const char* dir, const char* text) {
  char path[1200], said[4096] = {0};
  int saved, fd;
  dt_result_t loaded;
  FILE* f;
  snprintf(path, sizeof path, "%s/stderr_rank%d.txt", scratch, my_rank);
  fflush(stderr);
  saved = dup(2);
  fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  CHECK(saved >= 0 && fd >= 0);
  if (saved < 0 || fd < 0) {
    if (saved >= 0) close(saved);
    if (fd >= 0) close(fd);
    return 0;
  }
  dup2(fd, 2);
  close(fd);
  loaded = dt_model_load_checkpoint(model, dir);
  fflush(stderr);
  dup2(saved, 2);
  close(saved);
  OK(ctx, loaded);
  OK(ctx, dt_barrier(world));
  f = fopen(path, "r");
  CHECK(f != NULL);
  if (!f) return 0;
  CHECK(fread(said, 1, sizeof said - 1, f) < sizeof said - 1); /* all of it read */
  fclose(f);
  if (said[0]) printf("rank %d's stderr during the load: %s", my_rank, said);
  return strstr(said, text) != NULL;
}

/* Moments loaded under other AdamW settings are allowed, and said (by rank 0, the one that
 * logs by default): the updates from here on differ from those of the model that wrote
 * them. The same settings say nothing. */
static void test_load_under_other_adamw(dt_context_t ctx, dt_comm_t world, const char* mlp_dir) {
  dt_optimizer_config_t oc = DT_OPTIMIZER_CONFIG_INIT;
  dt_model_t other, same;
  int said;
  oc.zero_stage = 1;
  oc.beta1 = 0.8f;
  oc.weight_decay = 0.05f;
  other = make_mlp_with(ctx, world, 1, MHID, &oc);
  same = make_mlp(ctx, world, 1, MHID);
  said = load_says(ctx, world, other, mlp_dir, "other AdamW settings (beta1 0.9 -> 0.8, weight_decay 0.1 -> 0.05)");
  CHECK(said || my_rank != 0);
  CHECK(!load_says(ctx, world, same, mlp_dir, "AdamW"));
  OK(ctx, dt_model_destroy(other));
  OK(ctx, dt_model_destroy(same));
}

static void test_gpt_checkpoint(dt_context_t ctx, dt_comm_t world, const char* mlp_dir) {
  enum { B = 2, T = 8 };
  char dir[1100];
  int32_t tokens[B * T], targets[B * T];
  dt_model_t a = make_gpt(ctx, world, 3), b = make_gpt(ctx, world, 4), mlp = make_mlp(ctx, world, 1, MHID);
  dt_model_t wider = make_mlp(ctx, world, 1, MHID + 1);
  float la = 0, lb = -1, *pa, *pb;
  size_t n = 0;
  long steps = 0;
  for (int i = 0; i < B * T; ++i) {
    tokens[i] = (i * 7) % 24;
    targets[i] = (i * 7 + 7) % 24;
  }
  fresh_dir(ctx, world, "gpt", dir, sizeof dir);
  for (int s = 0; s < 2; ++s) {
    OK(ctx, dt_gpt_forward_backward(a, tokens, targets, B, T, NULL));
    OK(ctx, dt_model_step(a, 1e-2f, NULL));
  }
  OK(ctx, dt_model_save_checkpoint(a, dir, 1));
  {
    char mine[1200];
    int size = 1;
    OK(ctx, dt_comm_size(world, &size));
    snprintf(mine, sizeof mine, "%s/rank%d", dir, size > 1 ? my_rank : 0);
    if (size > 1)
      FAILS(DT_ERR_INVALID_ARGUMENT, ctx, "different dir paths", dt_model_save_checkpoint(a, mine, 0));
  }
  OK(ctx, dt_model_load_checkpoint(b, dir));
  OK(ctx, dt_model_steps(b, &steps));
  CHECK(steps == 2);
  pa = parameters(ctx, a, &n);
  pb = parameters(ctx, b, &n);
  CHECK(memcmp(pa, pb, n * sizeof *pa) == 0);
  OK(ctx, dt_gpt_evaluate(a, tokens, targets, B, T, &la));
  OK(ctx, dt_gpt_evaluate(b, tokens, targets, B, T, &lb));
  CHECK(la == lb);

  /* Damaged copies of the file, one byte flipped at a time across it: whatever each load
   * returns, the model keeps exactly the parameters and step count of the good checkpoint
   * (a refused load changes nothing; a flip the load cannot see changed nothing it reads). */
  corrupt_loads_change_nothing(ctx, world, b, dir, "step_00000002.h5", pb, n);
  free(pa);
  free(pb);

  /* A checkpoint of another model is refused, naming what differs. */
  FAILS(DT_ERR_INVALID_CONFIG, ctx, "dt_model_load_checkpoint: checkpoint", dt_model_load_checkpoint(b, mlp_dir));
  MESSAGE(ctx, "written for");
  FAILS(DT_ERR_INVALID_CONFIG, ctx, "has no tensor 'layers.0.weight'", dt_model_load_checkpoint(mlp, dir));
  FAILS(DT_ERR_INVALID_CONFIG, ctx, "tensor 'layers.0.weight' has shape [16, 4] in checkpoint",
        dt_model_load_checkpoint(wider, mlp_dir));
  { /* An MLP of one layer, the file's first: every tensor it has is there, but the file's
     * second layer says it was written for another configuration. */
    const int sizes[2] = {MIN, MHID};
    dt_mlp_config_t mc = DT_MLP_CONFIG_INIT;
    dt_model_t shorter = NULL;
    long steps = -1;
    mc.num_sizes = 2;
    mc.sizes = sizes;
    mc.max_batch = MBATCH;
    OK(ctx, dt_model_create_mlp(world, &mc, NULL, &shorter));
    FAILS(DT_ERR_INVALID_CONFIG, ctx, "holds tensor 'layers.1.bias', which this model has not",
          dt_model_load_checkpoint(shorter, mlp_dir));
    OK(ctx, dt_model_steps(shorter, &steps));
    CHECK(steps == 0);
    OK(ctx, dt_model_destroy(shorter));
  }
  OK(ctx, dt_model_destroy(a));
  OK(ctx, dt_model_destroy(b));
  OK(ctx, dt_model_destroy(mlp));
  OK(ctx, dt_model_destroy(wider));
}

/* Separate models (one per DP group of a tp 2 grid, each a rank of its own) saving into one
 * dir: the first save claims it, so exactly one succeeds and the other gets DT_ERR_IO naming
 * the holder; once the holder is destroyed the dir is free. */
static void test_one_process_per_dir(dt_context_t ctx, dt_comm_t world) {
  dt_grid_config_t gc = DT_GRID_CONFIG_INIT;
  dt_grid_t grid = NULL;
  dt_comm_t mine = NULL;
  dt_model_t m;
  dt_result_t rc;
  char dir[1100];
  int32_t saved = 0, total = 0;
  if (world_size != 2) return;
  gc.tp = 2;
  OK(ctx, dt_grid_create(ctx, &gc, &grid));
  OK(ctx, dt_grid_comm(grid, DT_GROUP_DP, &mine));
  m = make_mlp(ctx, mine, 1, MHID);
  fresh_dir(ctx, world, "claimed", dir, sizeof dir);
  rc = dt_model_save_checkpoint(m, dir, 0);
  CHECK(rc == DT_SUCCESS || rc == DT_ERR_IO);
  if (rc == DT_ERR_IO) MESSAGE(ctx, "is in use by another run (process ");
  saved = rc == DT_SUCCESS;
  OK(ctx, dt_all_reduce(world, &saved, &total, 1, DT_I32, DT_SUM));
  CHECK(total == 1);
  if (saved) OK(ctx, dt_model_destroy(m));
  OK(ctx, dt_barrier(world));
  if (!saved) {
    OK(ctx, dt_model_save_checkpoint(m, dir, 0));
    OK(ctx, dt_model_destroy(m));
  }
  OK(ctx, dt_grid_destroy(grid));
}

/* Tensors by index and by name: names, shape, values, and overwriting them. */
static void test_tensor_access(dt_context_t ctx, dt_comm_t world) {
  dt_model_t m = make_mlp(ctx, world, 5, MHID);
  int64_t shape[4] = {0, 0, 0, 0};
  int ndim = 0;
  size_t n = 0;
  float w[MHID * MIN], bias[MCLASSES] = {1.5f, -2.0f, 0.25f}, back[MCLASSES] = {0, 0, 0};
  float* all = parameters(ctx, m, &n);
  OK(ctx, dt_model_tensor_shape(m, "layers.0.weight", NULL, 0, &ndim));
  CHECK(ndim == 2);
  OK(ctx, dt_model_tensor_shape(m, "layers.0.weight", shape, 4, &ndim));
  CHECK(ndim == 2 && shape[0] == MHID && shape[1] == MIN);
  OK(ctx, dt_model_get_tensor(m, "layers.0.weight", w, MHID * MIN));
  CHECK(memcmp(w, all, sizeof w) == 0); /* the first tensor in creation order */
  {
    /* Names by index, in creation order: layers.0.weight, layers.0.bias, layers.1.weight, ... */
    int count = 0;
    char name[32], tiny[4];
    size_t len = 0;
    OK(ctx, dt_model_num_tensors(m, &count));
    CHECK(count == 4);
    OK(ctx, dt_model_tensor_name(m, 3, NULL, 0, &len));
    CHECK(len == strlen("layers.1.bias"));
    OK(ctx, dt_model_tensor_name(m, 3, name, sizeof name, &len));
    CHECK(strcmp(name, "layers.1.bias") == 0);
    OK(ctx, dt_model_tensor_name(m, 0, name, sizeof name, &len));
    CHECK(strcmp(name, "layers.0.weight") == 0);
    FAILS(DT_ERR_INVALID_ARGUMENT, ctx, "capacity is too small for the name",
          dt_model_tensor_name(m, 0, tiny, sizeof tiny, &len));
    CHECK(len == strlen("layers.0.weight"));
  }
  OK(ctx, dt_model_set_tensor(m, "layers.1.bias", bias, MCLASSES));
  OK(ctx, dt_model_get_tensor(m, "layers.1.bias", back, MCLASSES));
  CHECK(memcmp(bias, back, sizeof bias) == 0);
  free(all);
  OK(ctx, dt_model_destroy(m));
}

int main(int argc, char** argv) {
  dt_context_t ctx = NULL;
  dt_comm_t world = NULL;
  char mlp_dir[1100];
  int status;
  status = start_with_scratch("test_capi_checkpoint", &argc, &argv, &ctx, &world, &world_size);
  if (status != 0) return status;
  if (NS % world_size != 0 || MBATCH % world_size != 0) {
    if (my_rank == 0) printf("capi_checkpoint: all 0 checks passed (needs 1, 2, 4 or 8 ranks)\n");
    dt_finalize(ctx);
    return 0;
  }
  test_byom_resume(ctx, world, 0, 0);
  test_byom_resume(ctx, world, 1, 1);
  test_byom_resume(ctx, world, 1, 0);
  test_byom_resume(ctx, world, 2, 0); /* byom ZeRO 2 (sharded like ZeRO 1) */
  test_keep_and_find(ctx, world);
  test_byom_errors(ctx, world);
  test_mlp_resume(ctx, world, mlp_dir, sizeof mlp_dir);
  test_load_under_other_adamw(ctx, world, mlp_dir);
  test_gpt_checkpoint(ctx, world, mlp_dir);
  test_tensor_access(ctx, world);
  test_one_process_per_dir(ctx, world);
  status = finish("capi_checkpoint", ctx, world);
  OK(ctx, dt_finalize(ctx));
  return status != 0 || failures != 0;
}
