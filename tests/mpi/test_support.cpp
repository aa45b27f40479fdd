#include "test_support.hpp"

#include <algorithm>
#include <cstring>

namespace dtrain::test {

double load(const void* buf, DType type, std::size_t i) {
  switch (type) {
    case DType::f32: return static_cast<const float*>(buf)[i];
    case DType::f64: return static_cast<const double*>(buf)[i];
    case DType::i32: return static_cast<const std::int32_t*>(buf)[i];
    case DType::i64: return static_cast<double>(static_cast<const std::int64_t*>(buf)[i]);
    case DType::u8: return static_cast<const std::uint8_t*>(buf)[i];
    case DType::bf16: return bf16_bits_to_f32(static_cast<const std::uint16_t*>(buf)[i]);
    case DType::f16: return f16_bits_to_f32(static_cast<const std::uint16_t*>(buf)[i]);
  }
  return 0;
}

void store(void* buf, DType type, std::size_t i, double v) {
  switch (type) {
    case DType::f32: static_cast<float*>(buf)[i] = static_cast<float>(v); return;
    case DType::f64: static_cast<double*>(buf)[i] = v; return;
    case DType::i32: static_cast<std::int32_t*>(buf)[i] = static_cast<std::int32_t>(v); return;
    case DType::i64: static_cast<std::int64_t*>(buf)[i] = static_cast<std::int64_t>(v); return;
    case DType::u8: static_cast<std::uint8_t*>(buf)[i] = static_cast<std::uint8_t>(v); return;
    case DType::bf16:
      static_cast<std::uint16_t*>(buf)[i] = f32_to_bf16_bits(static_cast<float>(v));
      return;
    case DType::f16:
      static_cast<std::uint16_t*>(buf)[i] = f32_to_f16_bits(static_cast<float>(v));
      return;
  }
}

namespace {
bool is_integer(DType t) { return t == DType::i32 || t == DType::i64 || t == DType::u8; }
}  // namespace

// sum/avg: (rank+1) * k with k = i%5 + 1, so the sum over n ranks is k*n(n+1)/2.
// max/min: ((i + 3*rank) % 11) - 5 (not shifted for unsigned u8).
double reduce_input(int rank, std::size_t i, ReduceOp op, DType type) {
  if (op == ReduceOp::sum || op == ReduceOp::avg)
    return static_cast<double>((rank + 1) * static_cast<int>(i % 5 + 1));
  const int v = static_cast<int>((i + 3 * static_cast<std::size_t>(rank)) % 11);
  return type == DType::u8 ? v : v - 5;
}

double reduce_expected(int n, std::size_t i, ReduceOp op, DType type) {
  const long k = static_cast<long>(i % 5 + 1);
  const long sum = k * n * (n + 1) / 2;
  switch (op) {
    case ReduceOp::sum: return static_cast<double>(sum);
    case ReduceOp::avg:
      return is_integer(type) ? static_cast<double>(sum / n) : static_cast<double>(sum) / n;
    case ReduceOp::max:
    case ReduceOp::min: {
      // The values of (i + 3r) % 11 over r < n: n consecutive steps of 3 modulo 11.
      double best = reduce_input(0, i, op, type);
      for (int r = 1; r < n; ++r) {
        const double v = reduce_input(r, i, op, type);
        best = op == ReduceOp::max ? std::max(best, v) : std::min(best, v);
      }
      return best;
    }
  }
  return 0;
}

std::string describe(DType type, ReduceOp op, std::size_t count, bool in_place) {
  return std::string(dtype_name(type)) + " " + reduce_op_name(op) + " count=" +
         std::to_string(count) + (in_place ? " in-place" : " out-of-place");
}

}  // namespace dtrain::test
