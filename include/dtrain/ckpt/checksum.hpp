#pragma once
// The per-dataset checksum of a checkpoint, independent of the layout that wrote it.
//
// For the element at row-major index i of a tensor's LOGICAL shape, with IEEE-754 float32
// bit pattern b (as an unsigned 32-bit integer), all arithmetic modulo 2^64:
//   x = i * 0x9E3779B97F4A7C15 + b
//   x ^= x >> 30;  x *= 0xBF58476D1CE4E5B9
//   x ^= x >> 27;  x *= 0x94D049BB133111EB
//   x ^= x >> 31
//   h(i, b) = x >> 32                      (the high 32 bits)
// checksum = sum of h(i, b) over every element, modulo 2^64.
// A sum does not depend on the order of its terms, so each writer adds up the elements it
// owns and one all-reduce combines them; keying by the logical index makes moved or swapped
// elements count. docs/checkpoint-format.md shows the same computation with numpy.
#include <cstddef>
#include <cstdint>

#include "dtrain/export.hpp"

namespace dtrain::ckpt {

inline constexpr const char* kChecksumAlgorithm = "sum-splitmix64-hi32-v1";

inline std::uint64_t element_hash(std::uint64_t logical_index, std::uint32_t bits) noexcept {
  std::uint64_t x = logical_index * 0x9E3779B97F4A7C15ull + bits;
  x ^= x >> 30;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 27;
  x *= 0x94D049BB133111EBull;
  x ^= x >> 31;
  return x >> 32;
}

// Checksum of n floats that sit at logical indices first, first+1, ... (one row-major run).
DTRAIN_API std::uint64_t checksum_run(const float* data, std::size_t n, std::uint64_t first);

}  // namespace dtrain::ckpt
