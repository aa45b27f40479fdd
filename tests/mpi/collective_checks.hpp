#pragma once
// Element-wise comparison of a result buffer with a closed-form expectation; reports the
// number of mismatches and the first one instead of one failure per element.
#include <gtest/gtest.h>

#include <string>

#include "comm/mpi_util.hpp"
#include "test_support.hpp"

namespace dtrain::test {

template <class Expected>
void expect_elements(const void* got, DType type, std::size_t count, Expected expected,
                     const std::string& what) {
  std::size_t bad = 0, first = 0;
  for (std::size_t i = 0; i < count; ++i) {
    if (load(got, type, i) != expected(i)) {
      if (bad == 0) first = i;
      ++bad;
    }
  }
  EXPECT_EQ(bad, 0u) << what << " (rank " << world().rank() << "/" << world().size()
                     << "): first mismatch at element " << first << ": got "
                     << (bad ? load(got, type, first) : 0.0) << ", expected "
                     << (bad ? expected(first) : 0.0);
}

// How a test places the result relative to the input.
enum class Placement { separate, in_place_nccl, in_place_start };
inline const char* placement_name(Placement p) {
  switch (p) {
    case Placement::separate: return "out-of-place";
    case Placement::in_place_nccl: return "in-place(offset)";
    case Placement::in_place_start: return "in-place(start)";
  }
  return "?";
}
inline const Placement kPlacements[] = {Placement::separate, Placement::in_place_nccl,
                                        Placement::in_place_start};

// Zero, one, odd, and more than one MPI call's worth under the chunked limit (5): 23 elements
// then take five calls; 1023 would take hundreds and only slow the test down.
inline std::vector<std::size_t> test_counts() {
  if (comm::max_elements_per_call() < 1023) return {0, 1, 7, 23};
  return {0, 1, 7, 1023};
}

// Runs each collective test twice: with MPI's own count limit, and with a tiny limit that
// forces the paths for counts beyond INT_MAX (chunking, derived types, per-root fallbacks).
class CollectiveTest : public testing::TestWithParam<std::size_t> {
 protected:
  void SetUp() override;
  void TearDown() override;
};

}  // namespace dtrain::test
