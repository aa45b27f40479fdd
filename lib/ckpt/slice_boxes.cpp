#include "ckpt/slice_boxes.hpp"

#include <algorithm>

#include "dtrain/ckpt/checksum.hpp"
#include "dtrain/core/error.hpp"

namespace dtrain::ckpt {
namespace {

using U = std::uint64_t;

// Splits local range [a, b) of the sub-box of dims d.. into boxes (local coordinates):
// a partial leading row, a block of whole rows, a partial trailing row.
void split_range(const std::vector<U>& local, std::size_t d, std::vector<U>& prefix, U a, U b,
                 std::vector<Box>& out) {
  if (a >= b) return;
  const std::size_t nd = local.size();
  U row = 1;
  for (std::size_t k = d + 1; k < nd; ++k) row *= local[k];
  auto emit = [&](U lo, U hi) {  // rows [lo, hi) of dim d, whole in dims after d
    Box box;
    box.start = prefix;
    box.count.assign(prefix.size(), 1);
    box.start.push_back(lo);
    box.count.push_back(hi - lo);
    for (std::size_t k = d + 1; k < nd; ++k) {
      box.start.push_back(0);
      box.count.push_back(local[k]);
    }
    out.push_back(std::move(box));
  };
  if (d + 1 == nd) return emit(a, b);
  if (a % row != 0) {
    const U r = a / row;
    const U end = std::min((r + 1) * row, b);
    prefix.push_back(r);
    split_range(local, d + 1, prefix, a - r * row, end - r * row, out);
    prefix.pop_back();
    a = end;
    if (a >= b) return;
  }
  const U full_end = b / row;
  if (full_end > a / row) emit(a / row, full_end);
  if (b % row != 0 && b > full_end * row) {
    prefix.push_back(full_end);
    split_range(local, d + 1, prefix, 0, b - full_end * row, out);
    prefix.pop_back();
  }
}

}  // namespace

std::uint64_t Box::numel() const {
  U n = 1;
  for (U c : count) n *= c;
  return n;
}

std::vector<Box> slice_boxes(const ParamInfo& p, std::size_t first, std::size_t count) {
  const std::size_t nd = p.shape.size();
  DTRAIN_CHECK(nd >= 1 && p.local_shape.size() == nd && p.slice_offset.size() == nd,
               Errc::internal, "parameter " << p.name << " has an inconsistent slice");
  DTRAIN_CHECK(first + count <= p.local_numel(), Errc::internal,
               "range beyond the slice of " << p.name);
  std::vector<U> local(p.local_shape.begin(), p.local_shape.end());
  std::vector<Box> boxes, out;
  std::vector<U> prefix;
  split_range(local, 0, prefix, first, first + count, boxes);
  // Local -> logical: shift every dim by the slice offset; dim 0 also jumps between the
  // fused parts (slice_blocks), which may cut a box in several.
  const U blocks = static_cast<U>(p.slice_blocks > 0 ? p.slice_blocks : 1);
  const U per = local[0] / blocks;
  const U part_rows = static_cast<U>(p.shape[0]) / blocks;
  for (Box& b : boxes) {
    for (std::size_t k = 1; k < nd; ++k) b.start[k] += static_cast<U>(p.slice_offset[k]);
    U row = b.start[0];
    const U end = b.start[0] + b.count[0];
    while (row < end) {
      const U part = row / per;
      const U stop = std::min(end, (part + 1) * per);
      Box piece = b;
      piece.start[0] = part * part_rows + static_cast<U>(p.slice_offset[0]) + row % per;
      piece.count[0] = stop - row;
      out.push_back(std::move(piece));
      row = stop;
    }
  }
  return out;
}

std::uint64_t checksum_boxes(const std::vector<Box>& boxes, const std::vector<std::int64_t>& shape,
                             const float* data) {
  const std::size_t nd = shape.size();
  std::vector<U> stride(nd, 1);
  for (std::size_t k = nd - 1; k-- > 0;) stride[k] = stride[k + 1] * static_cast<U>(shape[k + 1]);
  U sum = 0;
  std::vector<U> idx(nd);
  for (const Box& b : boxes) {
    const U inner = b.count[nd - 1];
    const U rows = b.numel() / (inner ? inner : 1);
    std::fill(idx.begin(), idx.end(), 0);
    for (U r = 0; r < rows; ++r) {
      U base = b.start[nd - 1];
      for (std::size_t k = 0; k + 1 < nd; ++k) base += (b.start[k] + idx[k]) * stride[k];
      sum += checksum_run(data, inner, base);
      data += inner;
      for (std::size_t k = nd - 1; k-- > 0;) {  // odometer over the outer dims
        if (++idx[k] < b.count[k]) break;
        idx[k] = 0;
      }
    }
  }
  return sum;
}

}  // namespace dtrain::ckpt
