#include "dtrain/core/log.hpp"

#include <unistd.h>

#include <atomic>

#include "dtrain/core/env.hpp"
#include "dtrain/core/error.hpp"

namespace dtrain::log {
namespace {
std::atomic<int> g_rank{0};
std::atomic<int> g_size{1};
std::atomic<int> g_level{-1};  // -1: not yet read from the environment

const char* level_tag(Level l) {
  switch (l) {
    case Level::error: return "ERROR ";
    case Level::warn: return "WARN ";
    case Level::info: return "";
    case Level::debug: return "DEBUG ";
  }
  return "";
}
}  // namespace

void set_rank(int rank, int size) noexcept {
  g_rank = rank;
  g_size = size;
}

void set_level(Level l) noexcept { g_level = static_cast<int>(l); }

Level level() noexcept {
  int l = g_level.load();
  if (l < 0) {
    // A malformed DTRAIN_* variable is reported by the Runtime's start-up, agreed by every
    // rank; a message logged before it must not end the program here.
    try {
      l = static_cast<int>(env::params().log_level);
    } catch (...) {
      return Level::info;
    }
    g_level = l;
  }
  return static_cast<Level>(l);
}

bool enabled(Level l) noexcept {
  if (static_cast<int>(l) > static_cast<int>(level())) return false;
  if (l == Level::error) return true;
  if (g_rank.load() == 0) return true;
  try {
    return env::params().log_all_ranks;
  } catch (...) {  // as in level()
    return false;
  }
}

void write(Level l, const std::string& message) noexcept {
  try {
    std::string line = "[dtrain r" + std::to_string(g_rank.load()) + "/" +
                       std::to_string(g_size.load()) + "] " + level_tag(l) + message + "\n";
    ssize_t unused = ::write(STDERR_FILENO, line.data(), line.size());
    (void)unused;
  } catch (...) {
  }
}

Level parse_level(const std::string& name) {
  if (name == "error") return Level::error;
  if (name == "warn") return Level::warn;
  if (name == "info") return Level::info;
  if (name == "debug") return Level::debug;
  DTRAIN_FAIL(Errc::invalid_config,
              "DTRAIN_LOG_LEVEL='" << name << "' is not a log level (expected error, warn, info or debug)");
}

}  // namespace dtrain::log
