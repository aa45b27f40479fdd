#pragma once
// Small value types shared by the communicator API.
#include "dtrain/export.hpp"

namespace dtrain {

// Values are part of the C ABI: append only.
// avg = sum, then divide by the group size. Integer types use integer division (truncating
// toward zero); u8 sums wrap modulo 256 as in MPI, and a 16-bit float sum can overflow its
// type before the division (f16: beyond 65504) over MPI, where NCCL's avg scales first.
// max/min of bf16/f16 give NaN where any rank holds one; for f32/f64 they are MPI's own,
// whose NaN handling depends on the order (Open MPI at 2-3 ranks kept rank 0's NaN only).
enum class ReduceOp : int { sum = 0, avg = 1, max = 2, min = 3 };

// Which library moves the bytes of a communicator. Only mpi (host memory) exists today;
// nccl (device memory, stream-ordered) is reserved for the CUDA plugin.
enum class BackendKind : int { mpi = 0, nccl = 1 };

DTRAIN_API const char* reduce_op_name(ReduceOp op) noexcept;
DTRAIN_API const char* backend_name(BackendKind kind) noexcept;

}  // namespace dtrain
