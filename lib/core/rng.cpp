#include "dtrain/core/rng.hpp"

#include <cmath>

#include "dtrain/core/hash.hpp"

namespace dtrain::rng {
namespace {
constexpr std::uint32_t kMul0 = 0xD2511F53u;
constexpr std::uint32_t kMul1 = 0xCD9E8D57u;
constexpr std::uint32_t kWeyl0 = 0x9E3779B9u;
constexpr std::uint32_t kWeyl1 = 0xBB67AE85u;

inline void mulhilo(std::uint32_t a, std::uint32_t b, std::uint32_t& hi, std::uint32_t& lo) {
  const std::uint64_t p = static_cast<std::uint64_t>(a) * b;
  hi = static_cast<std::uint32_t>(p >> 32);
  lo = static_cast<std::uint32_t>(p);
}

inline float to_open_unit(std::uint32_t x) {
  // 24 random bits, centred in their bucket: never 0; 2^24 - 0.5 rounds to 2^24 in float, so
  // the top bucket gives 1 (rng.hpp). Kept: every initialisation and corpus is made of it.
  return (static_cast<float>(x >> 8) + 0.5f) * (1.0f / 16777216.0f);
}
}  // namespace

Block philox(std::uint64_t seed, std::uint64_t stream, std::uint64_t index) noexcept {
  Block c = {static_cast<std::uint32_t>(index), static_cast<std::uint32_t>(index >> 32),
             static_cast<std::uint32_t>(stream), static_cast<std::uint32_t>(stream >> 32)};
  std::uint32_t k0 = static_cast<std::uint32_t>(seed);
  std::uint32_t k1 = static_cast<std::uint32_t>(seed >> 32);
  for (int round = 0; round < 10; ++round) {
    std::uint32_t hi0, lo0, hi1, lo1;
    mulhilo(kMul0, c[0], hi0, lo0);
    mulhilo(kMul1, c[2], hi1, lo1);
    c = {hi1 ^ c[1] ^ k0, lo1, hi0 ^ c[3] ^ k1, lo0};
    k0 += kWeyl0;
    k1 += kWeyl1;
  }
  return c;
}

std::uint64_t stream_id(std::string_view name) noexcept { return fnv1a(name.data(), name.size()); }

float uniform(std::uint64_t seed, std::uint64_t stream, std::uint64_t index) noexcept {
  return to_open_unit(philox(seed, stream, index)[0]);
}

double uniform_open(std::uint64_t seed, std::uint64_t stream, std::uint64_t index) noexcept {
  const Block b = philox(seed, stream, index);
  // 52 bits centred in their bucket: below 2^52 a double holds every half, so the largest,
  // 2^52 - 0.5, stays below 2^52.
  const std::uint64_t bits = (static_cast<std::uint64_t>(b[0]) << 20) | (b[1] >> 12);
  return (static_cast<double>(bits) + 0.5) * 0x1p-52;
}

float normal(std::uint64_t seed, std::uint64_t stream, std::uint64_t index) noexcept {
  const Block b = philox(seed, stream, index);
  const double u1 = to_open_unit(b[0]);
  const double u2 = to_open_unit(b[1]);
  return static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2));
}

void fill_normal(float* out, std::size_t n, std::uint64_t seed, std::uint64_t stream,
                 std::uint64_t first_index, float mean, float std) noexcept {
  for (std::size_t i = 0; i < n; ++i) out[i] = mean + std * normal(seed, stream, first_index + i);
}

void fill_uniform(float* out, std::size_t n, std::uint64_t seed, std::uint64_t stream,
                  std::uint64_t first_index, float lo, float hi) noexcept {
  for (std::size_t i = 0; i < n; ++i) out[i] = lo + (hi - lo) * uniform(seed, stream, first_index + i);
}

}  // namespace dtrain::rng
