// Thread counts for the CPU kernels (OpenMP) and for OpenBLAS, set together so that one
// rank never runs more threads than it was given.
#include <cblas.h>

#if defined(_OPENMP)
#include <omp.h>
#endif

#include "device/cpu/kernels.hpp"

namespace dtrain::cpu {

void set_num_threads(int n) {
  if (n <= 0) return;
#if defined(_OPENMP)
  omp_set_num_threads(n);
#endif
  openblas_set_num_threads(n);
}

bool blas_threads_compete() {
#if defined(_OPENMP)
  return openblas_get_parallel() == OPENBLAS_THREAD;
#else
  return false;
#endif
}

int num_threads() {
#if defined(_OPENMP)
  return omp_get_max_threads();
#else
  return openblas_get_num_threads();
#endif
}

}  // namespace dtrain::cpu
