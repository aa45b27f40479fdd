// The checkpoint's mapping of local element runs to logical hyperslabs agrees with
// ParamInfo::logical_index for whole tensors, tensor-parallel slices and fused q|k|v slices,
// and the checksum does not depend on how a tensor is cut into runs.
#include <gtest/gtest.h>

#include <vector>

#include "ckpt/slice_boxes.hpp"
#include "dtrain/ckpt/checksum.hpp"

using namespace dtrain;

namespace {

ParamInfo slice(std::vector<std::int64_t> shape, std::vector<std::int64_t> local,
                std::vector<std::int64_t> offset, std::int64_t blocks = 1) {
  ParamInfo p;
  p.name = "t";
  p.shape = shape;
  p.local_shape = local;
  p.slice_offset = offset;
  p.slice_blocks = blocks;
  return p;
}

// Logical indices of the run [first, first+count), walking the boxes row-major.
std::vector<std::size_t> walk(const ParamInfo& p, std::size_t first, std::size_t count) {
  std::vector<std::size_t> out;
  for (const ckpt::Box& b : ckpt::slice_boxes(p, first, count)) {
    const std::size_t nd = p.shape.size();
    std::vector<std::uint64_t> idx(nd, 0);
    for (std::uint64_t k = 0; k < b.numel(); ++k) {
      std::size_t logical = 0;
      for (std::size_t d = 0; d < nd; ++d) logical = logical * p.shape[d] + b.start[d] + idx[d];
      out.push_back(logical);
      for (std::size_t d = nd; d-- > 0;) {
        if (++idx[d] < b.count[d]) break;
        idx[d] = 0;
      }
    }
  }
  return out;
}

}  // namespace

TEST(CheckpointSlices, EveryRunMapsToTheLogicalIndices) {
  const std::vector<ParamInfo> cases = {
      slice({7}, {7}, {0}),
      slice({5, 6}, {5, 6}, {0, 0}),
      slice({5, 6}, {5, 3}, {0, 3}),            // column slice
      slice({8, 6}, {4, 6}, {4, 0}),            // row slice
      slice({12, 4}, {6, 4}, {2, 0}, 3),        // fused q|k|v: rows 2-3 of each part of 4
      slice({3, 4, 5}, {3, 2, 5}, {0, 2, 0}),
  };
  for (const ParamInfo& p : cases) {
    const std::size_t n = p.local_numel();
    for (std::size_t a = 0; a <= n; ++a) {
      for (std::size_t b = a; b <= n; ++b) {
        const std::vector<std::size_t> got = walk(p, a, b - a);
        ASSERT_EQ(got.size(), b - a);
        for (std::size_t i = a; i < b; ++i) ASSERT_EQ(got[i - a], p.logical_index(i)) << "run " << a << ".." << b;
      }
    }
  }
}

TEST(CheckpointSlices, ChecksumIsIndependentOfTheCut) {
  const ParamInfo p = slice({5, 6}, {5, 6}, {0, 0});
  std::vector<float> data(30);
  for (std::size_t i = 0; i < data.size(); ++i) data[i] = 0.25f * static_cast<float>(i) - 3.0f;
  const std::uint64_t whole = ckpt::checksum_run(data.data(), data.size(), 0);
  for (std::size_t cut = 0; cut <= 30; ++cut) {
    const std::uint64_t parts = ckpt::checksum_boxes(ckpt::slice_boxes(p, 0, cut), p.shape, data.data()) +
                                ckpt::checksum_boxes(ckpt::slice_boxes(p, cut, 30 - cut), p.shape, data.data() + cut);
    EXPECT_EQ(parts, whole) << "cut at " << cut;
  }
  std::vector<float> flipped = data;
  flipped[7] = -flipped[7];
  EXPECT_NE(ckpt::checksum_run(flipped.data(), 30, 0), whole);
  std::swap(flipped[7], flipped[8]);  // moved elements count too
  flipped[8] = -flipped[8];
  EXPECT_NE(ckpt::checksum_run(flipped.data(), 30, 0), whole);
}
