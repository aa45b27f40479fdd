#pragma once
// Gradient buckets over the flat gradient arena. Pure functions (no MPI), so the planning is
// unit-tested on its own.
#include <cstddef>
#include <utility>
#include <vector>

#include "dtrain/export.hpp"

namespace dtrain::parallel {

using Range = std::pair<std::size_t, std::size_t>;  // [first, last) elements of the arena

struct DTRAIN_API Bucket {
  std::size_t first = 0;          // arena elements [first, last)
  std::size_t last = 0;
  std::vector<int> ranges;        // indices of the ready-ranges it covers
  std::size_t numel() const { return last - first; }
};

// Groups ready-ranges (in the order backward completes them; each one contiguous, and
// consecutive ranges adjacent in the arena, as GptModel reports them) into buckets of at
// least bucket_bytes (the last one may be smaller). A bucket becomes ready when all of its
// ranges are. Throws Error(Errc::invalid_argument) if the ranges are not adjacent.
DTRAIN_API std::vector<Bucket> plan_buckets(const std::vector<Range>& ready_ranges,
                                            std::size_t bucket_bytes,
                                            std::size_t bytes_per_element = sizeof(float));

// Splits n elements into `parts` contiguous pieces whose sizes differ by at most one (the
// first n % parts pieces are one longer). The ZeRO owner of piece r is data-parallel rank r.
DTRAIN_API std::vector<std::size_t> split_evenly(std::size_t n, int parts);

// Like split_evenly, but every piece except the last non-empty one is a multiple of `align`
// elements: whole pages go to each rank, so what a rank does not own can be discarded page
// by page (ZeRO 2/3). Pieces are balanced in units of `align`; the one-unit-longer pieces
// start at part `rotate` (mod parts), so that splitting many buckets with rotate = bucket
// index spreads the extra pages over the ranks.
DTRAIN_API std::vector<std::size_t> split_aligned(std::size_t n, int parts, std::size_t align,
                                                  std::size_t rotate = 0);

// The piece of arena range `whole` that rank `rank` holds when it is split into `counts`
// (in rank order): [whole.first + counts before rank, + counts[rank]).
DTRAIN_API Range piece_of(const Range& whole, const std::vector<std::size_t>& counts, int rank);

// Throws Error(invalid_argument) naming `who` unless there is one count list per unit, each
// with one count per rank, adding up to the unit's size.
DTRAIN_API void check_split(const std::vector<Range>& units,
                            const std::vector<std::vector<std::size_t>>& counts, int ranks,
                            const char* who);

}  // namespace dtrain::parallel
