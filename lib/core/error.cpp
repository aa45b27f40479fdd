#include "dtrain/core/error.hpp"

#include <string>

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

namespace {
// Control bytes other than newline and tab as \xNN: a message quotes values as given (a file
// name, an option's text), and a NUL would cut what() short, an escape sequence act on the
// terminal that shows it.
std::string printable(const std::string& message) {
  static const char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(message.size());
  for (const char c : message) {
    const auto u = static_cast<unsigned char>(c);
    if ((u < 0x20 && c != '\n' && c != '\t') || u == 0x7f) {
      out += "\\x";
      out += kHex[u >> 4];
      out += kHex[u & 15];
    } else {
      out += c;
    }
  }
  return out;
}
}  // namespace

Error::Error(Errc code, const std::string& message) : std::runtime_error(printable(message)), code_(code) {}

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
