#include "dtrain/core/env.hpp"

#include <charconv>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <system_error>

#include "dtrain/core/error.hpp"

namespace dtrain::env {
namespace {
std::mutex g_mutex;
Params g_params;
bool g_loaded = false;

// The CUDA plugin's own settings, which it reads where a GPU is used: checked here as well, so
// that a malformed one fails every run at its start, on every rank together, instead of
// being ignored on the CPU or, under --device auto, sending a GPU run to the CPU.
void check_gpu_settings() {
  get_int(cuda::kDevice, -1, 0, cuda::kMaxDevice);
  for (const char* name : cuda::kSwitches) get_bool(name, false);
  const std::string transport = get_string("DTRAIN_DEVICE_COMM", "auto");
  DTRAIN_CHECK(transport == "auto" || transport == "nccl" || transport == "mpi_staged", Errc::invalid_config,
               "DTRAIN_DEVICE_COMM must be auto, nccl or mpi_staged, got '" << transport << "'");
}

Params read_params() {
  Params p;
  p.comm_timeout_s = get_double("DTRAIN_COMM_TIMEOUT", p.comm_timeout_s, 0.001, 1e9);
  p.log_level = log::parse_level(get_string("DTRAIN_LOG_LEVEL", "info"));
  p.log_all_ranks = get_bool("DTRAIN_LOG_ALL_RANKS", false);
  p.num_threads = static_cast<int>(get_int("DTRAIN_NUM_THREADS", 0, 0, 4096));
  p.cpu_attention_probabilities = get_bool("DTRAIN_CPU_ATTENTION_PROBABILITIES", false);
  // 0 measures; a rate below a megaflop per second would only make MFU an overflow.
  p.peak_flops = get_double("DTRAIN_PEAK_FLOPS", 0.0, 0.0, 1e21);
  DTRAIN_CHECK(p.peak_flops == 0 || p.peak_flops >= 1e6, Errc::invalid_config,
               "DTRAIN_PEAK_FLOPS=" << p.peak_flops << " is out of range (0 to measure, or 1e6 to 1e21 FLOP/s)");
  p.host_memory_check = get_bool("DTRAIN_HOST_MEMORY_CHECK", true);
  check_gpu_settings();
  return p;
}
}  // namespace

const Params& params() {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (!g_loaded) {
    g_params = read_params();
    g_loaded = true;
  }
  return g_params;
}

void reload() {
  Params p = read_params();
  std::lock_guard<std::mutex> lock(g_mutex);
  g_params = p;
  g_loaded = true;
}

std::string get_string(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return (v && *v) ? std::string(v) : fallback;
}

namespace {

// Decimal text only, as a whole: no leading spaces, '+' or hexadecimal (which strtol and
// strtod accept); a value past the type's range is out of range, not "not a number".
template <class T>
T parse_setting(const char* name, const char* text, T min_value, T max_value, const char* kind) {
  const char* end = text + std::strlen(text);
  T x{};
  const std::from_chars_result r = std::from_chars(text, end, x);
  DTRAIN_CHECK(r.ptr == end && r.ec != std::errc::invalid_argument, Errc::invalid_config,
               name << "='" << text << "' is not " << kind);
  DTRAIN_CHECK(r.ec == std::errc() && x >= min_value && x <= max_value, Errc::invalid_config,
               name << "=" << text << " is out of range [" << min_value << ", " << max_value << "]");
  return x;
}

}  // namespace

long get_int(const char* name, long fallback, long min_value, long max_value) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  return parse_setting(name, v, min_value, max_value, "an integer");
}

double get_double(const char* name, double fallback, double min_value, double max_value) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  return parse_setting(name, v, min_value, max_value, "a number");
}

bool get_bool(const char* name, bool fallback) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  std::string s(v);
  if (s == "1" || s == "true" || s == "yes" || s == "on") return true;
  if (s == "0" || s == "false" || s == "no" || s == "off") return false;
  DTRAIN_FAIL(Errc::invalid_config, name << "='" << v << "' is not a boolean (use 1, true, yes or on; 0, false, no or off)");
}

}  // namespace dtrain::env
