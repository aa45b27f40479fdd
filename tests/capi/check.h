/* Assertion helpers shared by the C tests of dtrain.h: every check counts, a failed one
 * prints where and why (with the library's last message), and finish() agrees on the verdict
 * over all ranks. Each test program is one translation unit, so static state is fine. */
#ifndef DTRAIN_TEST_CHECK_H
#define DTRAIN_TEST_CHECK_H

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "dtrain.h"

static int failures = 0;
static int checks = 0;
static int my_rank = 0;

#define CHECK(cond)                                                                        \
  do {                                                                                     \
    ++checks;                                                                              \
    if (!(cond)) {                                                                         \
      ++failures;                                                                          \
      fprintf(stderr, "[rank %d] %s:%d: check failed: %s\n", my_rank, __FILE__, __LINE__, \
              #cond);                                                                      \
    }                                                                                      \
  } while (0)

/* The larger of two errors, NaN if either is: fmaxf drops a NaN, which would let a NaN
 * result pass every "error < bound" check. */
static inline float worse(float a, float b) { return isnan(a) || isnan(b) ? NAN : fmaxf(a, b); }

/* Call must return `want`; on mismatch print the library's message. */
#define EXPECT(want, ctx, call)                                                             \
  do {                                                                                      \
    dt_result_t got_ = (call);                                                              \
    ++checks;                                                                               \
    if (got_ != (want)) {                                                                   \
      ++failures;                                                                           \
      fprintf(stderr, "[rank %d] %s:%d: %s returned %d (%s), wanted %d: %s\n", my_rank,     \
              __FILE__, __LINE__, #call, (int)got_, dt_get_error_string(got_), (int)(want), \
              dt_get_last_error(ctx));                                                      \
    }                                                                                       \
  } while (0)

#define OK(ctx, call) EXPECT(DT_SUCCESS, ctx, call)

/* The last error (of ctx, or of this thread with NULL) mentions `text`. */
static inline void expect_message(dt_context_t ctx, const char* text, int line) {
  const char* msg = dt_get_last_error(ctx);
  ++checks;
  if (!msg || !strstr(msg, text)) {
    ++failures;
    fprintf(stderr, "[rank %d] line %d: last error \"%s\" does not mention \"%s\"\n", my_rank,
            line, msg ? msg : "(null)", text);
  }
}
#define MESSAGE(ctx, text) expect_message(ctx, text, __LINE__)

/* Call fails with `want` and the last message mentions `text`: the documented pair. */
#define FAILS(want, ctx, text, call) \
  do {                               \
    EXPECT(want, ctx, call);         \
    MESSAGE(ctx, text);              \
  } while (0)

/* Sums the failures over world (before the context goes), prints the verdict on rank 0 as
 * "<name>: all N checks passed", and returns the exit status. */
static int finish(const char* name, dt_context_t ctx, dt_comm_t world) {
  int total = failures;
  if (ctx && world) OK(ctx, dt_all_reduce(world, &failures, &total, 1, DT_I32, DT_SUM));
  if (total > 0 || failures > 0) {
    fprintf(stderr, "[rank %d] %s: %d of %d checks failed here\n", my_rank, name, failures, checks);
    return 1;
  }
  if (my_rank == 0) printf("%s: all %d checks passed\n", name, checks);
  return 0;
}

#endif /* DTRAIN_TEST_CHECK_H */
