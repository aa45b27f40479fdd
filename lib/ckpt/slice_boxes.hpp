#pragma once
// Where a run of a parameter's local elements lies in its logical tensor, as boxes
// (hyperslabs) in row-major order. No HDF5 here, so the mapping is unit-testable.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "dtrain/nn/parameters.hpp"

namespace dtrain::ckpt {

struct Box {
  std::vector<std::uint64_t> start;  // in the logical tensor
  std::vector<std::uint64_t> count;
  std::uint64_t numel() const;
};

// Boxes covering local elements [first, first + count) of p's slice (row-major over
// local_shape, fused parts of dim 0 mapped per slice_blocks). Their elements, taken box
// after box and row-major inside each, are the run's elements in order, and the boxes are
// in increasing logical order, so one contiguous buffer matches their union.
std::vector<Box> slice_boxes(const ParamInfo& p, std::size_t first, std::size_t count);

// Adds the checksum terms (checksum.hpp) of data laid out as the boxes of `boxes`.
std::uint64_t checksum_boxes(const std::vector<Box>& boxes, const std::vector<std::int64_t>& shape,
                             const float* data);

}  // namespace dtrain::ckpt
