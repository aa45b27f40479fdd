#pragma once
// FNV-1a, the 64-bit hash behind the fingerprints that ranks compare before a collective step
// (settings, file contents, names) and behind rng::stream_id. Not for security: it only has to
// tell apart what differs by accident.
#include <cstddef>
#include <cstdint>

namespace dtrain {

inline constexpr std::uint64_t kFnvOffset = 14695981039346656037ull;
inline constexpr std::uint64_t kFnvPrime = 1099511628211ull;

// FNV-1a over `bytes` bytes, continuing from h.
inline std::uint64_t fnv1a(const void* data, std::size_t bytes, std::uint64_t h = kFnvOffset) noexcept {
  const auto* p = static_cast<const unsigned char*>(data);
  for (std::size_t i = 0; i < bytes; ++i) h = (h ^ p[i]) * kFnvPrime;
  return h;
}

}  // namespace dtrain
