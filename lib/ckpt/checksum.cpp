#include "dtrain/ckpt/checksum.hpp"

#include <cstring>

namespace dtrain::ckpt {

std::uint64_t checksum_run(const float* data, std::size_t n, std::uint64_t first) {
  std::uint64_t sum = 0;
  for (std::size_t i = 0; i < n; ++i) {
    std::uint32_t bits;
    std::memcpy(&bits, data + i, sizeof bits);
    sum += element_hash(first + i, bits);
  }
  return sum;
}

}  // namespace dtrain::ckpt
