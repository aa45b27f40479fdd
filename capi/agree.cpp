#include "agree.hpp"

#include <climits>
#include <new>

#include "dtrain/core/error.hpp"

namespace dtrain::capi {

Outcome capture(const std::function<void()>& body) {
  Outcome o;
  try {
    body();
  } catch (const CError& e) {
    o = {e.code(), e.what()};
  } catch (const Error& e) {
    o = {static_cast<int>(e.code()), e.what()};
  } catch (const std::bad_alloc&) {
    o = {DT_ERR_OUT_OF_MEMORY, "out of memory"};
  } catch (const std::exception& e) {  // never leave the other ranks waiting
    o = {DT_ERR_INTERNAL, std::string("internal error: ") + e.what()};
  }
  return o;
}

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

void on_root_for_all(Communicator& comm, const std::function<void()>& body) {
  const Outcome o = comm.rank() == 0 ? capture(body) : Outcome{};
  share_failure(comm, o, 0, "");
}

void agreed_checks(Communicator& comm, bool collective, const std::function<void()>& checks) {
  if (!collective || comm.size() == 1) {
    checks();
    return;
  }
  const Outcome o = capture(checks);
  int first = o.code == DT_SUCCESS ? INT_MAX : comm.rank();
  comm.all_reduce(&first, &first, 1, DType::i32, ReduceOp::min);
  if (first == INT_MAX) return;
  share_failure(comm, o, first, "rank " + std::to_string(first) + ": ");
}

}  // namespace dtrain::capi
