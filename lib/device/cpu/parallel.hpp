#pragma once
// Row loops go parallel with OpenMP only when there is enough work to pay for waking the
// team; small calls (and every call under OMP_NUM_THREADS=1) stay on the calling thread.
#include <cstdint>

namespace dtrain::cpu {
// Elements below which a loop stays serial (a team wake-up costs a few microseconds).
constexpr std::int64_t kParallelMinWork = std::int64_t{1} << 16;
}  // namespace dtrain::cpu

#define DTRAIN_STR_(x) #x
#if defined(_OPENMP)
#define DTRAIN_OMP_FOR_IF(work) _Pragma(DTRAIN_STR_(omp parallel for schedule(static) if ((work) >= ::dtrain::cpu::kParallelMinWork)))
// ... and with simd, for element-wise loops whose selects (clamps, signs) GCC would
// otherwise not if-convert without -ffast-math.
#define DTRAIN_OMP_FOR_SIMD_IF(work) _Pragma(DTRAIN_STR_(omp parallel for simd schedule(static) if ((work) >= ::dtrain::cpu::kParallelMinWork)))
// A vectorised sum inside one row (the reduction order changes, so only where that is fine).
#define DTRAIN_OMP_SIMD_SUM(var) _Pragma(DTRAIN_STR_(omp simd reduction(+ : var)))
#define DTRAIN_OMP_SIMD_MAX(var) _Pragma(DTRAIN_STR_(omp simd reduction(max : var)))
#else
#define DTRAIN_OMP_SIMD_SUM(var)
#define DTRAIN_OMP_SIMD_MAX(var)
#define DTRAIN_OMP_FOR_IF(work)
#define DTRAIN_OMP_FOR_SIMD_IF(work)
#endif
