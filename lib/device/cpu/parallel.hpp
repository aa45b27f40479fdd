#pragma once
// Row loops go parallel with OpenMP only when there is enough work to pay for waking the
// team and more than one thread to share it; the others never enter OpenMP's runtime (a
// parallel region with a false `if` clause still sets up a one-thread team, with a heap
// block, on every call: hundreds a step).
#include <cstdint>

#if defined(_OPENMP)
#include <omp.h>
#endif

namespace dtrain::cpu {
// Elements below which a loop stays serial (a team wake-up costs a few microseconds).
constexpr std::int64_t kParallelMinWork = std::int64_t{1} << 16;

inline bool worth_a_team(std::int64_t work) {
#if defined(_OPENMP)
  return work >= kParallelMinWork && omp_get_max_threads() > 1;
#else
  (void)work;
  return false;
#endif
}

#define DTRAIN_STR_(x) #x
#if defined(_OPENMP)
#define DTRAIN_OMP_(x) _Pragma(DTRAIN_STR_(omp x))
#else
#define DTRAIN_OMP_(x)
#endif

template <class T> struct index_of { using type = T; };  // begin takes end's type

// body(i) for i in [begin, end), split statically over the team when `work` (the elements
// the loop touches) is worth it. Bodies capture by value ([=]: pointers and scalars), and
// each thread of the team takes its own copy. Not for a kernel built for several instruction
// sets: see DTRAIN_FOR_SIMD_IN_PLACE.
template <class Index, class Body>
__attribute__((always_inline)) inline void parallel_for(typename index_of<Index>::type begin, Index end,
                                                        std::int64_t work, Body body) {
  if (worth_a_team(work)) {
    DTRAIN_OMP_(parallel for schedule(static) firstprivate(body))
    for (Index i = begin; i < end; ++i) body(i);
  } else {
    for (Index i = begin; i < end; ++i) body(i);
  }
}

// As parallel_for over [0, n) with n elements of work, vectorised, for element-wise loops
// whose selects (clamps, signs) GCC would otherwise not if-convert without -ffast-math.
template <class Body>
__attribute__((always_inline)) inline void parallel_for_simd(std::int64_t n, Body body) {
  if (worth_a_team(n)) {
    DTRAIN_OMP_(parallel for simd schedule(static) firstprivate(body))
    for (std::int64_t i = 0; i < n; ++i) body(i);
  } else {
    DTRAIN_OMP_(simd)
    for (std::int64_t i = 0; i < n; ++i) body(i);
  }
}
}  // namespace dtrain::cpu

// parallel_for_simd written out in place, for a function built for several instruction sets
// (target_clones): OpenMP moves a region's body into a function of its own before anything
// is inlined, so a region inside the helper is built for the default set only (GELU ran 2x
// slower on the team). `statement` uses `i`, and holds no comma.
#define DTRAIN_FOR_SIMD_IN_PLACE(n, i, statement)                 \
  do {                                                            \
    if (::dtrain::cpu::worth_a_team(n)) {                         \
      DTRAIN_OMP_(parallel for simd schedule(static))             \
      for (std::int64_t i = 0; i < (n); ++i) statement;           \
    } else {                                                      \
      DTRAIN_OMP_(simd)                                           \
      for (std::int64_t i = 0; i < (n); ++i) statement;           \
    }                                                             \
  } while (0)

// A vectorised sum inside one row (the reduction order changes, so only where that is fine).
#if defined(_OPENMP)
#define DTRAIN_OMP_SIMD_SUM(var) _Pragma(DTRAIN_STR_(omp simd reduction(+ : var)))
#define DTRAIN_OMP_SIMD_MAX(var) _Pragma(DTRAIN_STR_(omp simd reduction(max : var)))
#else
#define DTRAIN_OMP_SIMD_SUM(var)
#define DTRAIN_OMP_SIMD_MAX(var)
#endif
