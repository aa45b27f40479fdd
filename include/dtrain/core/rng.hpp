#pragma once
// Counter-based random numbers (Philox 4x32-10, Salmon et al., SC'11). A value is a pure
// function of (seed, stream, index): a tensor initialised element by element gives the same
// numbers however it is split across ranks.
#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "dtrain/export.hpp"

namespace dtrain::rng {

using Block = std::array<std::uint32_t, 4>;

// Ten Philox rounds over counter (index, stream) under key = seed.
DTRAIN_API Block philox(std::uint64_t seed, std::uint64_t stream, std::uint64_t index) noexcept;

// Stable 64-bit id of a name (FNV-1a), e.g. a parameter's global name.
DTRAIN_API std::uint64_t stream_id(std::string_view name) noexcept;

// Uniform in (0, 1]: 24 bits centred in their bucket, never 0; the top bucket's centre rounds
// to 1 in float (once in 2^24). Initialisation and the synthetic corpus take it as it is.
DTRAIN_API float uniform(std::uint64_t seed, std::uint64_t stream, std::uint64_t index) noexcept;
// Uniform in the open interval (0, 1), 52 bits, every value exact: where a 1 would matter
// (sampling a token: u < the cumulative probabilities). Its top 24 bits are uniform()'s.
DTRAIN_API double uniform_open(std::uint64_t seed, std::uint64_t stream, std::uint64_t index) noexcept;
// Standard normal (Box-Muller over the first two words of the block).
DTRAIN_API float normal(std::uint64_t seed, std::uint64_t stream, std::uint64_t index) noexcept;

// out[i] = mean + std * normal(seed, stream, first_index + i), i in [0, n).
DTRAIN_API void fill_normal(float* out, std::size_t n, std::uint64_t seed, std::uint64_t stream,
                            std::uint64_t first_index, float mean, float std) noexcept;
DTRAIN_API void fill_uniform(float* out, std::size_t n, std::uint64_t seed, std::uint64_t stream,
                             std::uint64_t first_index, float lo, float hi) noexcept;

}  // namespace dtrain::rng
