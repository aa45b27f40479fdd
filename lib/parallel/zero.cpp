#include "dtrain/parallel/zero.hpp"

#include <algorithm>

namespace dtrain::parallel {

std::vector<optim::Segment> parameter_segments(const ParameterStore& params) {
  std::vector<optim::Segment> segs;
  for (const ParamInfo& p : params) segs.push_back({p.offset, p.numel, p.decay});
  return segs;
}

std::vector<optim::Segment> owned_segments(const ParameterStore& params,
                                           const std::vector<Range>& owned) {
  std::vector<optim::Segment> segs;
  for (const Range& r : owned) {
    for (const ParamInfo& p : params) {
      const std::size_t lo = std::max(r.first, p.offset);
      const std::size_t hi = std::min(r.second, p.offset + p.numel);
      if (lo < hi) segs.push_back({lo, hi - lo, p.decay});
    }
  }
  return segs;
}

std::vector<std::size_t> shard_piece_counts(std::size_t numel, int parts, std::size_t index) {
  return split_aligned(numel, parts, ParameterStore::kUnitAlignFloats, index);
}

}  // namespace dtrain::parallel
