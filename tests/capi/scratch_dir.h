/* Scratch directories of the C tests that write checkpoints: SCRATCH_DIR/np<N> for the
 * program (set_scratch), and empty subdirectories of it per case (fresh_dir). Include after
 * check.h, with _XOPEN_SOURCE 700 defined before any system header (nftw). */
#ifndef DTRAIN_TEST_SCRATCH_DIR_H
#define DTRAIN_TEST_SCRATCH_DIR_H

#include <ftw.h>
#include <stdio.h>
#include <sys/stat.h>

#include "check.h"

static char scratch[1024];

static int remove_entry(const char* path, const struct stat* st, int flag, struct FTW* ftw) {
  (void)st;
  (void)flag;
  (void)ftw;
  return remove(path);
}

/* root/np<world_size>, made by rank 0 (the runs at several rank counts may overlap). */
static void set_scratch(const char* root, int world_size) {
  snprintf(scratch, sizeof scratch, "%s/np%d", root, world_size);
  if (my_rank == 0) {
    mkdir(root, 0755);
    mkdir(scratch, 0755);
  }
}

/* scratch/name, made empty by rank 0 (every rank waits for it). */
static const char* fresh_dir(dt_context_t ctx, dt_comm_t world, const char* name, char* out, size_t n) {
  snprintf(out, n, "%s/%s", scratch, name);
  if (my_rank == 0) {
    nftw(out, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
    mkdir(out, 0755);
  }
  OK(ctx, dt_barrier(world));
  return out;
}

/* The start of a test program run as `PROGRAM SCRATCH_DIR`: dt_init, this rank's my_rank, the
 * world and its size, the scratch directory. 0, or the exit status when it cannot start. */
static int start_with_scratch(const char* program, int* argc, char*** argv, dt_context_t* ctx,
                              dt_comm_t* world, int* size) {
  if (*argc < 2) {
    fprintf(stderr, "usage: %s SCRATCH_DIR\n", program);
    return 2;
  }
  if (dt_init(argc, argv, ctx) != DT_SUCCESS) {
    fprintf(stderr, "%s: dt_init failed: %s\n", program, dt_get_last_error(NULL));
    return 1;
  }
  OK(*ctx, dt_context_rank(*ctx, &my_rank));
  OK(*ctx, dt_context_size(*ctx, size));
  OK(*ctx, dt_context_world(*ctx, world));
  set_scratch((*argv)[1], *size);
  return 0;
}

#endif
