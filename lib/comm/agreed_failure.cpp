#include "dtrain/comm/agreed_failure.hpp"

#include <cstdint>
#include <new>

namespace dtrain {

void LocalFailure::record(Errc code, std::string message) {
  failed_ = true;
  code_ = code;
  message_ = std::move(message);
}

void LocalFailure::record(const std::exception& e) {
  if (const auto* own = dynamic_cast<const Error*>(&e)) return record(own->code(), e.what());
  if (dynamic_cast<const std::bad_alloc*>(&e)) return record(Errc::out_of_memory, "out of host memory (std::bad_alloc)");
  record(Errc::io, e.what());
}

void LocalFailure::agree(Communicator& comm, const std::string& what) const {
  int first = failed_ ? comm.rank() : comm.size();
  comm.all_reduce(&first, &first, 1, DType::i32, ReduceOp::min);
  if (first == comm.size()) return;
  int code = static_cast<int>(code_);
  comm.broadcast(&code, &code, 1, DType::i32, first);
  std::string text = comm.rank() == first ? message_ : std::string();
  std::uint64_t n = text.size();
  comm.broadcast(&n, &n, 1, DType::i64, first);
  text.resize(n);
  if (n > 0) comm.broadcast(text.data(), text.data(), n, DType::u8, first);
  if (comm.rank() != first && !what.empty()) {
    text = what + " failed on world rank " + std::to_string(comm.world_ranks()[first]) + ": " + text;
  }
  throw AgreedError(static_cast<Errc>(code), text);
}

}  // namespace dtrain
