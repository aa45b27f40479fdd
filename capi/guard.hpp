#pragma once
// The one shape of every entry point (ADIOS2's C layer): look the handle up, check the
// arguments, call C++, and turn any exception into a dt_result_t plus a stored message.
// Nothing thrown ever crosses the C ABI.
#include <cstdint>
#include <sstream>
#include <stdexcept>
#include <string>

#include "dtrain.h"
#include "handles.hpp"

namespace dtrain::capi {

// Thrown inside entry points for failures the C ABI itself detects.
class CError : public std::runtime_error {
 public:
  CError(dt_result_t code, const std::string& msg) : std::runtime_error(msg), code_(code) {}
  dt_result_t code() const noexcept { return code_; }

 private:
  dt_result_t code_;
};

[[noreturn]] void fail(dt_result_t code, const std::string& msg);

// Stores "func: prefix msg" as ctx's last error (when ctx is known) and the calling thread's;
// "out of memory" where there is no memory for that.
void record_error(dt_context_s* ctx, const char* func, const char* prefix, const char* msg) noexcept;
// How many failures were recorded so far: a new context's messages start after them (a
// failure before it existed is none of its own).
std::uint64_t failures_recorded() noexcept;
// Maps the exception in flight to a code and records its message.
dt_result_t handle_exception(dt_context_s* ctx, const char* func) noexcept;

inline void need(bool ok, const char* what) {
  if (!ok) fail(DT_ERR_INVALID_ARGUMENT, what);
}
template <class P>
inline void need_ptr(P* p, const char* name) {
  if (!p) fail(DT_ERR_INVALID_ARGUMENT, std::string(name) + " must not be NULL");
}

// An output handle is NULL after any failure, also one found before the call's body runs
// (a bad input handle): clear it first.
template <class H>
inline void clear_output(H* out) noexcept {
  if (out) *out = nullptr;
}

template <class T>
T& resolve(const void* h, Kind k, const char* arg) {
  Handle* found = find_handle(h, k);
  if (!found) {
    std::ostringstream os;
    os << arg << " is not a live " << kind_name(k)
       << (h ? " (destroyed, finalized, or another kind of handle)" : " (NULL)");
    fail(DT_ERR_INVALID_HANDLE, os.str());
  }
  return *static_cast<T*>(found);
}

// call<dt_comm_s>(__func__, comm, "comm", [&](dt_comm_s& c) { ... });
template <class T, class F>
dt_result_t call(const char* func, const void* h, Kind k, const char* arg, F&& body) noexcept {
  dt_context_s* ctx = nullptr;
  try {
    T& obj = resolve<T>(h, k, arg);
    ctx = obj.ctx;
    body(obj);
    return DT_SUCCESS;
  } catch (...) {
    return handle_exception(ctx, func);
  }
}

// For entry points without a handle to resolve (dt_init*).
template <class F>
dt_result_t call_free(const char* func, F&& body) noexcept {
  try {
    body();
    return DT_SUCCESS;
  } catch (...) {
    return handle_exception(nullptr, func);
  }
}

}  // namespace dtrain::capi
