#pragma once
// Shared by the MPI tests: the Runtime of the test main, typed access to untyped buffers,
// and the closed-form inputs whose reductions are exact in every dtype.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "dtrain/comm/communicator.hpp"
#include "dtrain/comm/runtime.hpp"
#include "dtrain/core/dtype.hpp"

namespace dtrain::test {

Runtime& runtime();
Communicator& world();

inline const std::vector<DType>& all_dtypes() {
  static const std::vector<DType> types = {DType::f32, DType::f64, DType::i32, DType::i64,
                                           DType::u8,  DType::bf16, DType::f16};
  return types;
}
inline const std::vector<ReduceOp>& all_ops() {
  static const std::vector<ReduceOp> ops = {ReduceOp::sum, ReduceOp::avg, ReduceOp::max,
                                            ReduceOp::min};
  return ops;
}

double load(const void* buf, DType type, std::size_t i);
void store(void* buf, DType type, std::size_t i, double value);

// Input of rank r at element i for a reduction with op: small integers, exact in bf16.
double reduce_input(int rank, std::size_t i, ReduceOp op, DType type);
// The exact result of op over ranks 0..size-1 of reduce_input at element i.
double reduce_expected(int size, std::size_t i, ReduceOp op, DType type);
// Payload of rank r at element i for gathers, broadcasts and point-to-point.
inline double gather_input(int rank, std::size_t i) {
  return static_cast<double>((rank * 31 + static_cast<long>(i)) % 200);
}

// A host buffer of count elements of type (at least one byte, so data() is never null).
class Buffer {
 public:
  Buffer(std::size_t count, DType type) : type_(type), bytes_(count * dtype_size(type) + 1) {}
  void* data() { return bytes_.data(); }
  void* at(std::size_t element) { return bytes_.data() + element * dtype_size(type_); }
  double get(std::size_t i) const { return load(bytes_.data(), type_, i); }
  void set(std::size_t i, double v) { store(bytes_.data(), type_, i, v); }

 private:
  DType type_;
  std::vector<unsigned char> bytes_;
};

std::string describe(DType type, ReduceOp op, std::size_t count, bool in_place);

}  // namespace dtrain::test
