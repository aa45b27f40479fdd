#pragma once
// Failing alike on every rank of a collective call: when one rank's check fails, the others
// must not be left waiting in the call's collectives. The ranks agree on the outcome first,
// and every rank fails with the same code and message. Templates, so that the checks of a
// per-step call (dt_gpt_forward_backward) cost no allocation.
#include <climits>
#include <cstdint>
#include <new>
#include <string>

#include "dtrain/comm/communicator.hpp"
#include "dtrain/core/error.hpp"
#include "dtrain/core/hash.hpp"
#include "guard.hpp"

namespace dtrain::capi {

struct Outcome {
  int code = DT_SUCCESS;
  std::string message;
};

// What running body ended in: success, or the code and message its exception maps to. Never
// throws, so that a rank always goes on to the agreement: out of memory while taking the
// message, the outcome says so in a string short enough to need no allocation.
template <class F>
Outcome capture(F&& body) noexcept {
  try {
    try {
      body();
      return {};
    } catch (const CError& e) {
      return {e.code(), e.what()};
    } catch (const Error& e) {
      return {static_cast<int>(e.code()), e.what()};
    } catch (const std::bad_alloc&) {
      return {DT_ERR_OUT_OF_MEMORY, "out of memory"};
    } catch (const std::exception& e) {  // never leave the other ranks waiting
      return {DT_ERR_INTERNAL, std::string("internal error: ") + e.what()};
    } catch (...) {
      return {DT_ERR_INTERNAL, "internal error: an exception of unknown type"};
    }
  } catch (...) {
    return {DT_ERR_OUT_OF_MEMORY, "out of memory"};
  }
}

// Collective over comm: when rank `from`'s outcome is a failure, every rank fails with it
// (prefix, if any, goes before the message).
void share_failure(Communicator& comm, const Outcome& mine, int from, const std::string& prefix);

// body runs on comm's rank 0 only (e.g. a file check read once); every rank fails alike
// when it throws.
template <class F>
void on_root_for_all(Communicator& comm, F&& body) {
  const Outcome o = comm.rank() == 0 ? capture(body) : Outcome{};
  share_failure(comm, o, 0, "");
}

// A call's argument checks, run by every rank on its own arguments. When the call is
// collective, the ranks agree before any communication: all fail with the lowest failing
// rank's code and message ("rank r: ..."). Otherwise the checks simply run.
template <class F>
void agreed_checks(Communicator& comm, bool collective, F&& checks) {
  if (!collective || comm.size() == 1) {
    checks();
    return;
  }
  const Outcome o = capture(checks);
  int first = o.code == DT_SUCCESS ? INT_MAX : comm.rank();
  comm.all_reduce(&first, &first, 1, DType::i32, ReduceOp::min);
  if (first == INT_MAX) return;
  share_failure(comm, o, first, "rank " + std::to_string(first) + ": ");
}

using dtrain::fnv1a;  // the fingerprints the ranks compare (files here say dtrain::capi)

// h continued over one value's bytes (a scalar without padding).
template <class T>
std::uint64_t mix(std::uint64_t h, const T& value) noexcept {
  return fnv1a(&value, sizeof value, h);
}

// Collective over ranks: fails every rank alike (DT_ERR_INVALID_CONFIG, `message`) unless all
// pass the same value.
void need_same_value(Communicator& ranks, std::uint64_t value, const char* message);
// A step's learning rate, the same on every rank of `ranks` (replicas given different ones
// drift apart, each updating with its own): else DT_ERR_INVALID_ARGUMENT on every rank.
// Collective.
void need_same_lr(Communicator& ranks, float lr);
// Whether every rank of ranks has the same value (collective over ranks).
bool same_value(Communicator& ranks, std::uint64_t value);

// A fingerprint of the settings of an optimizer config that every rank must share.
std::uint64_t optimizer_fingerprint(const dt_optimizer_config_t& o) noexcept;

}  // namespace dtrain::capi
