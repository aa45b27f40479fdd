/* The threads of a built-in model on the CPU: the rank's share of its node's CPUs, counted
 * at dt_init* (docs/c-api.md), whatever OpenMP's own count was. The test sets each rank's
 * affinity itself (every rank of a test job shares one node), makes a context and a model
 * per case, and reads the OpenMP count the process's kernels then run. */
#define _GNU_SOURCE
#include <mpi.h>
#include <omp.h>
#include <sched.h>
#include <stdlib.h>

#include "check.h"
#include "dtrain_mpi.h"

static int allowed_cpus(void) {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) != 0) return 0;
  return CPU_COUNT(&set);
}

/* The n-th CPU this process may run on now, or -1. */
static int nth_allowed_cpu(int n) {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) != 0) return -1;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set) && n-- == 0) return c;
  return -1;
}

/* Makes a context and a CPU model over the world, and returns the OpenMP count after, which
 * dt_context_cpu_threads must tell beforehand (a count one off it stands before, so that the
 * model has to set it). */
static int threads_of_a_new_model(void) {
  dt_context_t ctx = NULL;
  dt_comm_t world = NULL;
  dt_model_t model = NULL;
  int told = 0;
  const int sizes[] = {4, 8, 3};
  dt_mlp_config_t mc = DT_MLP_CONFIG_INIT;
  mc.num_sizes = 3;
  mc.sizes = sizes;
  mc.device = "cpu";
  OK(NULL, dt_init_mpi_comm(MPI_COMM_WORLD, &ctx));
  OK(ctx, dt_context_world(ctx, &world));
  OK(ctx, dt_context_cpu_threads(ctx, &told));
  omp_set_num_threads(told + 1);
  OK(ctx, dt_model_create_mlp(world, &mc, NULL, &model));
  const int threads = omp_get_max_threads();
  CHECK(threads == told);
  OK(ctx, dt_model_destroy(model));
  OK(ctx, dt_finalize(ctx));
  return threads;
}

int main(int argc, char** argv) {
  int provided = 0, size = 1;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &my_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const char* fixed = getenv("DTRAIN_NUM_THREADS");
  if (fixed && atoi(fixed) > 0) {
    if (my_rank == 0) printf("capi_threads: skipped, DTRAIN_NUM_THREADS decides\n");
    MPI_Finalize();
    return 77;
  }
  unsetenv("OMP_NUM_THREADS");
  cpu_set_t before;
  CPU_ZERO(&before);
  CHECK(sched_getaffinity(0, sizeof before, &before) == 0);

  /* Every rank on every CPU of the job: they share them out (fewer where the job's cgroup
   * limits its CPU time; test_cpu_threads.cpp checks the count itself). */
  cpu_set_t every;
  CPU_ZERO(&every);
  for (int c = 0; c < CPU_SETSIZE; ++c) CPU_SET(c, &every);  /* the kernel keeps the job's */
  CHECK(sched_setaffinity(0, sizeof every, &every) == 0);
  int n = allowed_cpus(), lo = n, hi = n;
  MPI_Allreduce(&n, &lo, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(&n, &hi, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  CHECK(lo == hi && n >= 1);
  const int share = n / size > 1 ? n / size : 1;
  int got = threads_of_a_new_model();
  CHECK(got >= 1 && got <= share);
  if (got < 1 || got > share)
    fprintf(stderr, "[rank %d] %d threads on %d CPUs of %d ranks\n", my_rank, got, n, size);

  /* A rank on one CPU runs one thread. */
  cpu_set_t one;
  CPU_ZERO(&one);
  const int cpu = nth_allowed_cpu(my_rank % n);
  CHECK(cpu >= 0);
  if (cpu >= 0) CPU_SET(cpu, &one);
  CHECK(sched_setaffinity(0, sizeof one, &one) == 0);
  got = threads_of_a_new_model();
  CHECK(got == 1);

  /* OMP_NUM_THREADS, where set, decides, as for dtrain-gpt. */
  setenv("OMP_NUM_THREADS", "3", 1);
  got = threads_of_a_new_model();
  CHECK(got == 3);
  unsetenv("OMP_NUM_THREADS");

  sched_setaffinity(0, sizeof before, &before);
  int rc = finish("capi_threads", NULL, NULL);
  MPI_Allreduce(MPI_IN_PLACE, &rc, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return rc;
}
