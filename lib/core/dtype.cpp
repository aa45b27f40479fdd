#include "dtrain/core/dtype.hpp"

#include "dtrain/core/error.hpp"

namespace dtrain {

std::size_t dtype_size(DType t) noexcept {
  switch (t) {
    case DType::f32: return 4;
    case DType::bf16: return 2;
    case DType::f16: return 2;
    case DType::f64: return 8;
    case DType::i32: return 4;
    case DType::i64: return 8;
    case DType::u8: return 1;
  }
  return 0;
}

const char* dtype_name(DType t) noexcept {
  switch (t) {
    case DType::f32: return "f32";
    case DType::bf16: return "bf16";
    case DType::f16: return "f16";
    case DType::f64: return "f64";
    case DType::i32: return "i32";
    case DType::i64: return "i64";
    case DType::u8: return "u8";
  }
  return "unknown";
}

DType parse_dtype(const std::string& name) {
  for (DType t : {DType::f32, DType::bf16, DType::f16, DType::f64, DType::i32, DType::i64,
                  DType::u8}) {
    if (name == dtype_name(t)) return t;
  }
  DTRAIN_FAIL(Errc::invalid_argument, "unknown dtype '" << name << "'");
}

std::uint16_t f32_to_f16_bits(float f) noexcept {
  const std::uint32_t x = float_bits(f);
  const std::uint32_t sign = (x >> 16) & 0x8000u;
  const std::uint32_t a = x & 0x7FFFFFFFu;
  if (a >= 0x7F800000u) {  // inf or NaN (keep a quiet NaN payload bit)
    return static_cast<std::uint16_t>(sign | 0x7C00u | (a > 0x7F800000u ? 0x0200u | ((a >> 13) & 0x3FFu) : 0u));
  }
  if (a >= 0x477FF000u) return static_cast<std::uint16_t>(sign | 0x7C00u);  // >= 65520 rounds to inf
  if (a < 0x38800000u) {  // below 2^-14: a subnormal half (or zero)
    const int e = static_cast<int>(a >> 23);
    if (e < 102) return static_cast<std::uint16_t>(sign);  // < 2^-25 rounds to zero
    const std::uint32_t m = (a & 0x7FFFFFu) | 0x800000u;
    const int shift = 126 - e;  // half units are 2^-24
    std::uint32_t h = m >> shift;
    const std::uint32_t rem = m & ((1u << shift) - 1u);
    const std::uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (h & 1u))) ++h;
    return static_cast<std::uint16_t>(sign | h);
  }
  std::uint32_t h = (a - 0x38000000u) >> 13;  // re-bias exponent 127 -> 15
  const std::uint32_t rem = a & 0x1FFFu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;  // a carry into the exponent is right
  return static_cast<std::uint16_t>(sign | h);
}

float f16_bits_to_f32(std::uint16_t h) noexcept {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t e = (h >> 10) & 0x1Fu;
  const std::uint32_t m = h & 0x3FFu;
  if (e == 0) {
    const float v = static_cast<float>(m) * 5.9604644775390625e-08f;  // m * 2^-24, exact
    return sign ? -v : v;
  }
  if (e == 31) return bits_float(sign | 0x7F800000u | (m << 13));
  return bits_float(sign | ((e + 112u) << 23) | (m << 13));
}

namespace {
float load_as_f32(const void* src, DType t, std::size_t i) {
  switch (t) {
    case DType::f32: return static_cast<const float*>(src)[i];
    case DType::bf16: return bf16_bits_to_f32(static_cast<const std::uint16_t*>(src)[i]);
    case DType::f16: return f16_bits_to_f32(static_cast<const std::uint16_t*>(src)[i]);
    default: break;
  }
  DTRAIN_FAIL(Errc::invalid_argument, "convert: unsupported source dtype " << dtype_name(t));
}
}  // namespace

void convert(const void* src, DType st, void* dst, DType dt, std::size_t n) {
  if (st == dt) {
    std::memcpy(dst, src, n * dtype_size(st));
    return;
  }
  if (st == DType::f64 && dt == DType::f32) {
    for (std::size_t i = 0; i < n; ++i)
      static_cast<float*>(dst)[i] = static_cast<float>(static_cast<const double*>(src)[i]);
    return;
  }
  switch (dt) {
    case DType::f32:
      for (std::size_t i = 0; i < n; ++i) static_cast<float*>(dst)[i] = load_as_f32(src, st, i);
      return;
    case DType::bf16:
      for (std::size_t i = 0; i < n; ++i)
        static_cast<std::uint16_t*>(dst)[i] = f32_to_bf16_bits(load_as_f32(src, st, i));
      return;
    case DType::f16:
      for (std::size_t i = 0; i < n; ++i)
        static_cast<std::uint16_t*>(dst)[i] = f32_to_f16_bits(load_as_f32(src, st, i));
      return;
    case DType::f64:
      for (std::size_t i = 0; i < n; ++i) static_cast<double*>(dst)[i] = load_as_f32(src, st, i);
      return;
    default: break;
  }
  DTRAIN_FAIL(Errc::invalid_argument,
              "convert: unsupported conversion " << dtype_name(st) << " -> " << dtype_name(dt));
}

}  // namespace dtrain
