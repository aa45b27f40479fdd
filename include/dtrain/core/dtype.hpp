#pragma once
// Element types and exact round-to-nearest-even conversions between them.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "dtrain/export.hpp"

namespace dtrain {

// Values are part of the C ABI and the checkpoint format: append only.
enum class DType : int { f32 = 0, bf16 = 1, f16 = 2, f64 = 3, i32 = 4, i64 = 5, u8 = 6 };

DTRAIN_API std::size_t dtype_size(DType t) noexcept;
DTRAIN_API const char* dtype_name(DType t) noexcept;
DTRAIN_API DType parse_dtype(const std::string& name);  // "f32", "bf16", ... ; throws on unknown

inline std::uint32_t float_bits(float f) noexcept {
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}
inline float bits_float(std::uint32_t u) noexcept {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// bfloat16: the top 16 bits of an IEEE f32, rounded to nearest even; NaN stays NaN.
inline std::uint16_t f32_to_bf16_bits(float f) noexcept {
  std::uint32_t x = float_bits(f);
  if ((x & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<std::uint16_t>((x >> 16) | 0x0040u);
  std::uint32_t bias = 0x7FFFu + ((x >> 16) & 1u);
  return static_cast<std::uint16_t>((x + bias) >> 16);
}
inline float bf16_bits_to_f32(std::uint16_t h) noexcept {
  return bits_float(static_cast<std::uint32_t>(h) << 16);
}

// IEEE binary16, round to nearest even, with subnormals, overflow to infinity and NaN kept.
DTRAIN_API std::uint16_t f32_to_f16_bits(float f) noexcept;
DTRAIN_API float f16_bits_to_f32(std::uint16_t h) noexcept;

struct bf16 {
  std::uint16_t bits = 0;
  bf16() = default;
  explicit bf16(float f) noexcept : bits(f32_to_bf16_bits(f)) {}
  explicit operator float() const noexcept { return bf16_bits_to_f32(bits); }
};

struct f16 {
  std::uint16_t bits = 0;
  f16() = default;
  explicit f16(float f) noexcept : bits(f32_to_f16_bits(f)) {}
  explicit operator float() const noexcept { return f16_bits_to_f32(bits); }
};

// Bulk conversions (n elements); src and dst must not overlap.
DTRAIN_API void convert(const void* src, DType src_type, void* dst, DType dst_type, std::size_t n);

}  // namespace dtrain
