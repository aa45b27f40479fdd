// MPI has no 16-bit float types: bf16 and f16 reduce through dtrain's own MPI ops, which
// widen each pair to f32, combine, and round back to nearest even.
#include <mpi.h>

#include <cstdint>

#include "comm/mpi_util.hpp"
#include "dtrain/core/error.hpp"

namespace dtrain::comm {
namespace {

struct Sum {
  static float apply(float a, float b) { return a + b; }
};
// A NaN on any rank wins, wherever it is in the reduction order (a + b is NaN then).
struct Max {
  static float apply(float a, float b) { return a != a || b != b ? a + b : (b > a ? b : a); }
};
struct Min {
  static float apply(float a, float b) { return a != a || b != b ? a + b : (b < a ? b : a); }
};

// MPI user function: inout[i] = in[i] (op) inout[i].
template <class Op, float (*Load)(std::uint16_t), std::uint16_t (*Store)(float)>
void half_reduce(void* in, void* inout, int* len, MPI_Datatype*) {
  const auto* a = static_cast<const std::uint16_t*>(in);
  auto* b = static_cast<std::uint16_t*>(inout);
  for (int i = 0; i < *len; ++i) b[i] = Store(Op::apply(Load(a[i]), Load(b[i])));
}

template <class Op>
constexpr MPI_User_function* bf16_fn = &half_reduce<Op, bf16_bits_to_f32, f32_to_bf16_bits>;
template <class Op>
constexpr MPI_User_function* f16_fn = &half_reduce<Op, f16_bits_to_f32, f32_to_f16_bits>;

// [bf16, f16] x [sum, max, min]
MPI_Op g_ops[2][3] = {{MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL},
                      {MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL}};

int op_index(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
    case ReduceOp::avg: return 0;
    case ReduceOp::max: return 1;
    case ReduceOp::min: return 2;
  }
  DTRAIN_FAIL(Errc::invalid_argument, "unknown reduction " << static_cast<int>(op));
}

}  // namespace

void create_half_ops() {
  if (g_ops[0][0] != MPI_OP_NULL) return;
  MPI_User_function* fns[2][3] = {{bf16_fn<Sum>, bf16_fn<Max>, bf16_fn<Min>},
                                  {f16_fn<Sum>, f16_fn<Max>, f16_fn<Min>}};
  for (int t = 0; t < 2; ++t)
    for (int o = 0; o < 3; ++o) mpi_check(MPI_Op_create(fns[t][o], 1, &g_ops[t][o]), "MPI_Op_create");
}

void free_half_ops() {
  for (auto& row : g_ops)
    for (MPI_Op& op : row)
      if (op != MPI_OP_NULL) MPI_Op_free(&op);
}

MPI_Op mpi_op(ReduceOp op, DType type) {
  if (type == DType::bf16 || type == DType::f16) {
    MPI_Op o = g_ops[type == DType::bf16 ? 0 : 1][op_index(op)];
    DTRAIN_CHECK(o != MPI_OP_NULL, Errc::invalid_argument,
                 "bf16 and f16 reductions need a live dtrain::Runtime (it makes their MPI "
                 "operators), also for a communicator made from the program's own MPI one");
    return o;
  }
  switch (op) {
    case ReduceOp::sum:
    case ReduceOp::avg: return MPI_SUM;
    case ReduceOp::max: return MPI_MAX;
    case ReduceOp::min: return MPI_MIN;
  }
  DTRAIN_FAIL(Errc::invalid_argument, "unknown reduction " << static_cast<int>(op));
}

}  // namespace dtrain::comm
