#pragma once
// Leveled logging. Every line is prefixed "[dtrain rR/N] "; by default only rank 0 prints
// (DTRAIN_LOG_ALL_RANKS=1 or Level::error lines print everywhere).
#include <sstream>
#include <string>

#include "dtrain/export.hpp"

namespace dtrain::log {

enum class Level : int { error = 0, warn = 1, info = 2, debug = 3 };

// Set once by the comm bootstrap; before that the prefix reads r0/1.
DTRAIN_API void set_rank(int rank, int size) noexcept;
DTRAIN_API void set_level(Level level) noexcept;
DTRAIN_API Level level() noexcept;
DTRAIN_API bool enabled(Level level) noexcept;
// Writes one whole line to stderr (one write call, so ranks do not interleave mid-line).
DTRAIN_API void write(Level level, const std::string& message) noexcept;
// The value of DTRAIN_LOG_LEVEL (error, warn, info or debug); anything else is invalid_config.
DTRAIN_API Level parse_level(const std::string& name);

}  // namespace dtrain::log

#define DTRAIN_LOG(lvl, msg)                                   \
  do {                                                         \
    if (::dtrain::log::enabled(::dtrain::log::Level::lvl)) {   \
      std::ostringstream dtrain_log_os_;                       \
      dtrain_log_os_ << msg;                                   \
      ::dtrain::log::write(::dtrain::log::Level::lvl, dtrain_log_os_.str()); \
    }                                                          \
  } while (0)
