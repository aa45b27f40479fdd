#pragma once
// Runtime parameters read once from DTRAIN_* environment variables. A malformed value is a
// clear error (Errc::invalid_config), never silently ignored.
#include <string>

#include "dtrain/core/log.hpp"
#include "dtrain/export.hpp"

namespace dtrain::env {

struct Params {
  double comm_timeout_s = 600.0;  // DTRAIN_COMM_TIMEOUT: watchdog limit per collective
  log::Level log_level = log::Level::info;  // DTRAIN_LOG_LEVEL: error|warn|info|debug
  bool log_all_ranks = false;     // DTRAIN_LOG_ALL_RANKS: 1 to print on every rank
  int num_threads = 0;            // DTRAIN_NUM_THREADS: BLAS/kernel threads, 0 = library default
  bool cpu_attention_probabilities = false;  // DTRAIN_CPU_ATTENTION_PROBABILITIES: the CPU's
                                             // attention keeps probabilities, not log-sum-exps
  double peak_flops = 0;          // DTRAIN_PEAK_FLOPS: FLOP/s per rank for MFU; 0 = measure
  bool host_memory_check = true;  // DTRAIN_HOST_MEMORY_CHECK: 0 to skip the Trainer's check
                                  // of the run's host memory against each node's room
};

// Read on first use, then cached for the life of the process: a Runtime reads them as it
// starts, on every rank together, so a malformed value fails the whole job at once, and a
// setenv() after that changes nothing (tests call reload(), on one rank alone).
DTRAIN_API const Params& params();
// Re-read the environment (tests only).
DTRAIN_API void reload();

// The CUDA plugin's settings, which it reads where it uses them (with these names and
// bounds) and which params() checks in every run, so that a malformed one fails at the start
// even where no GPU is used. A new one goes here.
namespace cuda {
inline constexpr const char* kDevice = "DTRAIN_CUDA_DEVICE";  // a device index, 0..kMaxDevice
inline constexpr long kMaxDevice = 1 << 20;
inline constexpr const char* kTf32 = "DTRAIN_CUDA_TF32";  // the switches (booleans)
inline constexpr const char* kVmm = "DTRAIN_CUDA_VMM";
inline constexpr const char* kProfile = "DTRAIN_CUDA_PROFILE";
inline constexpr const char* kFusedAttention = "DTRAIN_CUDA_FUSED_ATTENTION";
inline constexpr const char* kGemmEpilogue = "DTRAIN_CUDA_GEMM_EPILOGUE";
inline constexpr const char* kSwitches[] = {kTf32, kVmm, kProfile, kFusedAttention, kGemmEpilogue};
}  // namespace cuda

// Typed lookups used by params(); exposed for layers that own their own variables.
DTRAIN_API std::string get_string(const char* name, const std::string& fallback);
DTRAIN_API long get_int(const char* name, long fallback, long min_value, long max_value);
DTRAIN_API double get_double(const char* name, double fallback, double min_value, double max_value);
DTRAIN_API bool get_bool(const char* name, bool fallback);

}  // namespace dtrain::env
