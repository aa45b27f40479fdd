/* Handles over their lifetime: a destroyed handle stays refused after the allocator hands its
 * memory to a new object (a second destroy must not delete the newer one), and two threads
 * may create and destroy handles of one context at once (docs/c-api.md, Handles). */
#include <pthread.h>
#include <stdlib.h>

#include "check.h"

enum { kPerThread = 2000 };

typedef struct {
  dt_comm_t world;
  dt_grid_t grid;
  int failed; /* calls that did not succeed, counted by the thread itself */
} worker_t;

/* Byoms made and destroyed in batches, over the world and over the grid (which counts them). */
static void* make_and_destroy(void* arg) {
  worker_t* w = (worker_t*)arg;
  static const int kBatch = 50;
  dt_byom_t made[50];
  for (int done = 0; done < kPerThread; done += kBatch) {
    for (int i = 0; i < kBatch; ++i) {
      const dt_result_t rc = i % 2 ? dt_byom_create(w->world, NULL, &made[i])
                                   : dt_byom_create_grid(w->grid, NULL, &made[i]);
      if (rc != DT_SUCCESS) ++w->failed;
    }
    for (int i = 0; i < kBatch; ++i)
      if (dt_byom_destroy(made[i]) != DT_SUCCESS) ++w->failed;
  }
  return NULL;
}

static void stale_handles_stay_refused(dt_context_t ctx, dt_comm_t world) {
  dt_grid_config_t gc = DT_GRID_CONFIG_INIT;
  for (int round = 0; round < 100; ++round) {
    dt_byom_t old = NULL, newer = NULL;
    dt_grid_t old_grid = NULL, newer_grid = NULL;
    dt_comm_t old_dp = NULL;
    long steps = -1;
    OK(ctx, dt_byom_create(world, NULL, &old));
    OK(ctx, dt_byom_destroy(old));
    OK(ctx, dt_byom_create(world, NULL, &newer));
    CHECK(newer != old);
    EXPECT(DT_ERR_INVALID_HANDLE, ctx, dt_byom_destroy(old));
    OK(ctx, dt_byom_steps(newer, &steps)); /* the double destroy left it alone */
    OK(ctx, dt_byom_destroy(newer));

    OK(ctx, dt_grid_create(ctx, &gc, &old_grid));
    OK(ctx, dt_grid_comm(old_grid, DT_GROUP_DP, &old_dp));
    OK(ctx, dt_grid_destroy(old_grid));
    OK(ctx, dt_grid_create(ctx, &gc, &newer_grid));
    EXPECT(DT_ERR_INVALID_HANDLE, ctx, dt_barrier(old_dp));
    EXPECT(DT_ERR_INVALID_HANDLE, ctx, dt_grid_destroy(old_grid));
    OK(ctx, dt_grid_destroy(newer_grid));
  }
}

static void threads_share_a_context(dt_context_t ctx, dt_comm_t world) {
  dt_grid_config_t gc = DT_GRID_CONFIG_INIT;
  dt_grid_t grid = NULL;
  dt_byom_t pin = NULL;
  worker_t w[2] = {{world, NULL, 0}, {world, NULL, 0}};
  pthread_t t[2];
  OK(ctx, dt_grid_create(ctx, &gc, &grid));
  w[0].grid = w[1].grid = grid;
  for (int i = 0; i < 2; ++i) CHECK(pthread_create(&t[i], NULL, make_and_destroy, &w[i]) == 0);
  for (int i = 0; i < 2; ++i) CHECK(pthread_join(t[i], NULL) == 0);
  CHECK(w[0].failed == 0 && w[1].failed == 0);
  /* The grid's count of users came back to zero: one more pins it, none lets it go. */
  OK(ctx, dt_byom_create_grid(grid, NULL, &pin));
  EXPECT(DT_ERR_INVALID_STATE, ctx, dt_grid_destroy(grid));
  OK(ctx, dt_byom_destroy(pin));
  OK(ctx, dt_grid_destroy(grid));
}

int main(int argc, char** argv) {
  dt_context_t ctx = NULL;
  dt_comm_t world = NULL;
  OK(NULL, dt_init(&argc, &argv, &ctx));
  OK(ctx, dt_context_rank(ctx, &my_rank));
  OK(ctx, dt_context_world(ctx, &world));
  stale_handles_stay_refused(ctx, world);
  threads_share_a_context(ctx, world);
  const int status = finish("capi_handles", ctx, world);
  {
    /* A second context keeps MPI up after the first, which initialised it, is finalized. */
    dt_context_t second = NULL;
    dt_comm_t second_world = NULL;
    OK(NULL, dt_init(&argc, &argv, &second));
    OK(second, dt_context_world(second, &second_world));
    OK(NULL, dt_finalize(ctx));
    OK(second, dt_barrier(second_world));
    OK(NULL, dt_finalize(second));
  }
  return status != 0 || failures > 0;
}
