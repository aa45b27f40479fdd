#pragma once
// Error type shared by every layer: a code that callers (and the C ABI) can switch on,
// and a message meant for a human.
#include <sstream>
#include <stdexcept>
#include <string>

#include "dtrain/export.hpp"

namespace dtrain {

// Only ever grows; values are stable because the C ABI maps them one to one.
enum class Errc : int {
  ok = 0,
  invalid_argument = 1,
  invalid_config = 2,
  out_of_memory = 3,
  io = 4,
  comm = 5,
  timeout = 6,
  not_implemented = 7,
  unavailable = 8,  // e.g. a CUDA device was asked for but none is present
  corrupt_data = 9, // checksum / format mismatch
  internal = 10,
};

DTRAIN_API const char* errc_name(Errc code) noexcept;

class DTRAIN_API Error : public std::runtime_error {
 public:
  Error(Errc code, const std::string& message);
  Errc code() const noexcept { return code_; }

 private:
  Errc code_;
};

// An error every rank throws alike, after agreeing on it (a diverged loss, an fp16 overflow
// at the minimum loss scale, a failed checkpoint): a program reports it from one rank.
class DTRAIN_API AgreedError : public Error {
 public:
  using Error::Error;
};

namespace detail {
[[noreturn]] DTRAIN_API void throw_error(Errc code, const std::string& message, const char* file,
                                         int line);
}  // namespace detail

}  // namespace dtrain

// DTRAIN_CHECK(cond, code, stream-expr): throw dtrain::Error when cond is false.
//   DTRAIN_CHECK(n > 0, Errc::invalid_argument, "count must be positive, got " << n);
#define DTRAIN_CHECK(cond, code, msg)                                              \
  do {                                                                             \
    if (!(cond)) {                                                                 \
      std::ostringstream dtrain_check_os_;                                         \
      dtrain_check_os_ << msg;                                                     \
      ::dtrain::detail::throw_error(::dtrain::code, dtrain_check_os_.str(), __FILE__, \
                                    __LINE__);                                     \
    }                                                                              \
  } while (0)

#define DTRAIN_FAIL(code, msg) DTRAIN_CHECK(false, code, msg)
