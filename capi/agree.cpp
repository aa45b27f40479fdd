#include "agree.hpp"

namespace dtrain::capi {

void share_failure(Communicator& comm, const Outcome& mine, int from, const std::string& prefix) {
  int code = mine.code;
  comm.broadcast(&code, &code, 1, DType::i32, from);
  if (code == DT_SUCCESS) return;
  std::string message = mine.message;
  std::uint64_t n = message.size();
  comm.broadcast(&n, &n, 1, DType::i64, from);
  message.resize(n);
  if (n > 0) comm.broadcast(message.data(), message.data(), n, DType::u8, from);
  fail(static_cast<dt_result_t>(code), prefix + message);
}

}  // namespace dtrain::capi
