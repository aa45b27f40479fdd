#include "dtrain/comm/types.hpp"

namespace dtrain {

const char* reduce_op_name(ReduceOp op) noexcept {
  switch (op) {
    case ReduceOp::sum: return "sum";
    case ReduceOp::avg: return "avg";
    case ReduceOp::max: return "max";
    case ReduceOp::min: return "min";
  }
  return "unknown";
}

const char* backend_name(BackendKind kind) noexcept {
  switch (kind) {
    case BackendKind::mpi: return "mpi";
    case BackendKind::nccl: return "nccl";
  }
  return "unknown";
}

}  // namespace dtrain
