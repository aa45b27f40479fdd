#include "dtrain/parallel/buckets.hpp"

#include <algorithm>
#include <numeric>

#include "dtrain/core/error.hpp"

namespace dtrain::parallel {

std::vector<Bucket> plan_buckets(const std::vector<Range>& ready_ranges, std::size_t bucket_bytes,
                                 std::size_t bytes_per_element) {
  std::vector<Bucket> buckets;
  Bucket current;
  bool open = false;
  for (std::size_t i = 0; i < ready_ranges.size(); ++i) {
    const Range r = ready_ranges[i];
    DTRAIN_CHECK(r.first <= r.second, Errc::invalid_argument, "reversed gradient range");
    if (i > 0) {  // each range must touch the one before it, so buckets are contiguous
      const Range prev = ready_ranges[i - 1];
      DTRAIN_CHECK(r.second == prev.first || r.first == prev.second, Errc::invalid_argument,
                   "gradient ranges are not adjacent in the arena");
    }
    if (!open) {
      current = Bucket{r.first, r.second, {}};
      open = true;
    } else {
      current.first = std::min(current.first, r.first);
      current.last = std::max(current.last, r.second);
    }
    current.ranges.push_back(static_cast<int>(i));
    if (current.numel() * bytes_per_element >= bucket_bytes) {
      buckets.push_back(current);
      open = false;
    }
  }
  if (open) buckets.push_back(current);
  return buckets;
}

std::vector<std::size_t> split_evenly(std::size_t n, int parts) {
  DTRAIN_CHECK(parts > 0, Errc::invalid_argument, "cannot split into " << parts << " parts");
  std::vector<std::size_t> sizes(static_cast<std::size_t>(parts), n / parts);
  for (std::size_t i = 0; i < n % static_cast<std::size_t>(parts); ++i) ++sizes[i];
  return sizes;
}

Range piece_of(const Range& whole, const std::vector<std::size_t>& counts, int rank) {
  std::size_t first = whole.first;
  for (int r = 0; r < rank; ++r) first += counts[static_cast<std::size_t>(r)];
  return {first, first + counts[static_cast<std::size_t>(rank)]};
}

void check_split(const std::vector<Range>& units,
                 const std::vector<std::vector<std::size_t>>& counts, int ranks, const char* who) {
  DTRAIN_CHECK(units.size() == counts.size(), Errc::invalid_argument,
               who << ": " << units.size() << " units but " << counts.size() << " splits");
  for (std::size_t u = 0; u < units.size(); ++u) {
    const auto& c = counts[u];
    DTRAIN_CHECK(c.size() == static_cast<std::size_t>(ranks) &&
                     std::accumulate(c.begin(), c.end(), std::size_t{0}) ==
                         units[u].second - units[u].first,
                 Errc::invalid_argument, who << ": unit " << u << " is split wrongly");
  }
}

std::vector<std::size_t> split_aligned(std::size_t n, int parts, std::size_t align,
                                       std::size_t rotate) {
  DTRAIN_CHECK(align > 0, Errc::invalid_argument, "alignment must be positive");
  const std::vector<std::size_t> units = split_evenly((n + align - 1) / align, parts);
  const std::size_t p = units.size();
  std::vector<std::size_t> sizes(p);
  std::size_t left = n;
  for (std::size_t r = 0; r < p; ++r) {
    sizes[r] = std::min(units[(r + p - rotate % p) % p] * align, left);
    left -= sizes[r];
  }
  return sizes;
}

}  // namespace dtrain::parallel
