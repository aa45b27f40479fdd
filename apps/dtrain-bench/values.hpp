#pragma once
// Typed access to untyped benchmark buffers, and the closed-form inputs and results used by
// --check (small integers, exact in every dtype for modest rank counts).
#include <cstddef>
#include <cstdint>

#include "dtrain/comm/types.hpp"
#include "dtrain/core/dtype.hpp"

namespace bench {

inline double get(const void* buf, dtrain::DType t, std::size_t i) {
  using dtrain::DType;
  switch (t) {
    case DType::f32: return static_cast<const float*>(buf)[i];
    case DType::f64: return static_cast<const double*>(buf)[i];
    case DType::i32: return static_cast<const std::int32_t*>(buf)[i];
    case DType::i64: return static_cast<double>(static_cast<const std::int64_t*>(buf)[i]);
    case DType::u8: return static_cast<const std::uint8_t*>(buf)[i];
    case DType::bf16: return dtrain::bf16_bits_to_f32(static_cast<const std::uint16_t*>(buf)[i]);
    case DType::f16: return dtrain::f16_bits_to_f32(static_cast<const std::uint16_t*>(buf)[i]);
  }
  return 0;
}

inline void set(void* buf, dtrain::DType t, std::size_t i, double v) {
  using dtrain::DType;
  switch (t) {
    case DType::f32: static_cast<float*>(buf)[i] = static_cast<float>(v); return;
    case DType::f64: static_cast<double*>(buf)[i] = v; return;
    case DType::i32: static_cast<std::int32_t*>(buf)[i] = static_cast<std::int32_t>(v); return;
    case DType::i64: static_cast<std::int64_t*>(buf)[i] = static_cast<std::int64_t>(v); return;
    case DType::u8: static_cast<std::uint8_t*>(buf)[i] = static_cast<std::uint8_t>(v); return;
    case DType::bf16:
      static_cast<std::uint16_t*>(buf)[i] = dtrain::f32_to_bf16_bits(static_cast<float>(v));
      return;
    case DType::f16:
      static_cast<std::uint16_t*>(buf)[i] = dtrain::f32_to_f16_bits(static_cast<float>(v));
      return;
  }
}

// Reduction input of rank r at element i: (r+1) * (i%5 + 1).
inline double reduce_input(int r, std::size_t i) { return (r + 1.0) * static_cast<double>(i % 5 + 1); }

inline double reduce_result(int n, std::size_t i, dtrain::ReduceOp op, dtrain::DType t) {
  const long k = static_cast<long>(i % 5 + 1), sum = k * n * (n + 1) / 2;
  const bool integer = t == dtrain::DType::i32 || t == dtrain::DType::i64 || t == dtrain::DType::u8;
  switch (op) {
    case dtrain::ReduceOp::sum: return static_cast<double>(sum);
    case dtrain::ReduceOp::avg: return integer ? static_cast<double>(sum / n) : double(sum) / n;
    case dtrain::ReduceOp::max: return static_cast<double>(n * k);
    case dtrain::ReduceOp::min: return static_cast<double>(k);
  }
  return 0;
}

// Gather / broadcast payload of rank r at element i.
inline double payload(int r, std::size_t i) {
  return static_cast<double>((static_cast<std::size_t>(r) * 31 + i) % 200);
}

}  // namespace bench
