#include "dtrain/core/error.hpp"

namespace dtrain {

const char* errc_name(Errc code) noexcept {
  switch (code) {
    case Errc::ok: return "ok";
    case Errc::invalid_argument: return "invalid argument";
    case Errc::invalid_config: return "invalid configuration";
    case Errc::out_of_memory: return "out of memory";
    case Errc::io: return "I/O error";
    case Errc::comm: return "communication error";
    case Errc::timeout: return "timeout";
    case Errc::not_implemented: return "not implemented";
    case Errc::unavailable: return "unavailable";
    case Errc::corrupt_data: return "corrupt data";
    case Errc::internal: return "internal error";
  }
  return "unknown error";
}

Error::Error(Errc code, const std::string& message) : std::runtime_error(message), code_(code) {}

namespace detail {
void throw_error(Errc code, const std::string& message, const char* file, int line) {
  // File and line only for internal errors: users get the message, developers the place.
  if (code == Errc::internal) {
    throw Error(code, message + " (" + file + ":" + std::to_string(line) + ")");
  }
  throw Error(code, message);
}
}  // namespace detail

}  // namespace dtrain
