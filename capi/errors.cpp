// Result codes, their names, and the last-error messages (per context and per thread).
#include <atomic>
#include <cstdint>
#include <new>

#include "dtrain/core/error.hpp"
#include "dtrain_version.h"
#include "guard.hpp"

namespace dtrain::capi {
namespace {

thread_local std::string thread_last_error;
thread_local std::string returned_error;  // what dt_get_last_error handed out last
// Failures are numbered as they happen, so that a context's message gives way to a newer
// failure of the calling thread that no context could be named for (a destroyed or NULL
// handle): the program asking its context about the call that just failed gets that call's
// message, not an older one.
std::atomic<std::uint64_t> failures_so_far{0};
thread_local std::string thread_contextless_error;
thread_local std::uint64_t thread_contextless_number = 0;

// The Errc values are the C codes below 1000, one to one (checked here, at compile time).
static_assert(static_cast<int>(Errc::internal) == DT_ERR_INTERNAL, "Errc and dt_result_t diverged");
static_assert(static_cast<int>(Errc::invalid_argument) == DT_ERR_INVALID_ARGUMENT, "");
static_assert(static_cast<int>(Errc::corrupt_data) == DT_ERR_CORRUPT_DATA, "");

}  // namespace

void fail(dt_result_t code, const std::string& msg) { throw CError(code, msg); }

std::uint64_t failures_recorded() noexcept { return failures_so_far.load(); }

void record_error(dt_context_s* ctx, const char* func, const char* prefix, const char* msg) noexcept {
  try {
    std::string text = std::string(func) + ": " + prefix + msg;
    if (ctx) {
      std::lock_guard<std::mutex> lock(ctx->error_mutex);  // numbered in the order stored
      ctx->last_error = text;
      ctx->last_error_number = ++failures_so_far;
    } else {
      thread_contextless_error = text;
      thread_contextless_number = ++failures_so_far;
    }
    thread_last_error = std::move(text);
  } catch (...) {
    // Out of memory while recording: a message that fits in any string's own storage (so
    // storing it allocates nothing), rather than an older failure's message standing in.
    static const char kOutOfMemory[] = "out of memory";
    try {
      if (ctx) {
        std::lock_guard<std::mutex> lock(ctx->error_mutex);
        ctx->last_error.assign(kOutOfMemory);
        ctx->last_error_number = ++failures_so_far;
      } else {
        thread_contextless_error.assign(kOutOfMemory);
        thread_contextless_number = ++failures_so_far;
      }
      thread_last_error.assign(kOutOfMemory);
    } catch (...) {
    }
  }
}

// (The messages go to record_error as they are: building a string here, outside its
// try, could throw out of this noexcept function.)
dt_result_t handle_exception(dt_context_s* ctx, const char* func) noexcept {
  try {
    throw;
  } catch (const CError& e) {
    record_error(ctx, func, "", e.what());
    return e.code();
  } catch (const Error& e) {
    record_error(ctx, func, "", e.what());
    return static_cast<dt_result_t>(static_cast<int>(e.code()));
  } catch (const std::bad_alloc&) {
    record_error(ctx, func, "", "out of memory");
    return DT_ERR_OUT_OF_MEMORY;
  } catch (const std::exception& e) {
    record_error(ctx, func, "internal error: ", e.what());
    return DT_ERR_INTERNAL;
  } catch (...) {
    record_error(ctx, func, "", "internal error: unknown exception");
    return DT_ERR_INTERNAL;
  }
}

}  // namespace dtrain::capi

using namespace dtrain::capi;

extern "C" {

int dt_get_version(void) { return DT_VERSION_CODE; }

const char* dt_get_error_string(dt_result_t code) {
  switch (code) {
    case DT_SUCCESS: return "success";
    case DT_ERR_INVALID_ARGUMENT: return "invalid argument";
    case DT_ERR_INVALID_CONFIG: return "invalid configuration";
    case DT_ERR_OUT_OF_MEMORY: return "out of memory";
    case DT_ERR_IO: return "I/O error";
    case DT_ERR_COMM: return "communication error";
    case DT_ERR_TIMEOUT: return "timeout";
    case DT_ERR_NOT_IMPLEMENTED: return "not implemented";
    case DT_ERR_UNAVAILABLE: return "unavailable";
    case DT_ERR_CORRUPT_DATA: return "corrupt data";
    case DT_ERR_INTERNAL: return "internal error";
    case DT_ERR_INVALID_HANDLE: return "invalid handle";
    case DT_ERR_INVALID_STATE: return "invalid state";
  }
  return "unknown result code";
}

const char* dt_get_last_error(dt_context_t ctx) {
  try {
    Handle* h = find_handle(ctx, Kind::context);
    if (h) {
      dt_context_s* c = static_cast<dt_context_s*>(h);
      std::lock_guard<std::mutex> lock(c->error_mutex);
      returned_error = thread_contextless_number > c->last_error_number ? thread_contextless_error
                                                                         : c->last_error;
    } else {
      returned_error = thread_last_error;
    }
    return returned_error.c_str();
  } catch (...) {
    return "out of memory while reading the last error";
  }
}

}  // extern "C"
