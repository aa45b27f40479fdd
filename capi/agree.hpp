#pragma once
// Failing alike on every rank of a collective call: when one rank's check fails, the others
// must not be left waiting in the call's collectives. The ranks agree on the outcome first,
// and every rank fails with the same code and message.
#include <functional>
#include <string>

#include "dtrain/comm/communicator.hpp"
#include "guard.hpp"

namespace dtrain::capi {

struct Outcome {
  int code = DT_SUCCESS;
  std::string message;
};

// What running body ended in: success, or the code and message its exception maps to.
Outcome capture(const std::function<void()>& body);

// Collective over comm: when rank `from`'s outcome is a failure, every rank fails with it
// (prefix, if any, goes before the message).
void share_failure(Communicator& comm, const Outcome& mine, int from, const std::string& prefix);

// body runs on comm's rank 0 only (e.g. a file check read once); every rank fails alike
// when it throws.
void on_root_for_all(Communicator& comm, const std::function<void()>& body);

// A call's argument checks, run by every rank on its own arguments. When the call is
// collective, the ranks agree before any communication: all fail with the lowest failing
// rank's code and message ("rank r: ..."). Otherwise the checks simply run.
void agreed_checks(Communicator& comm, bool collective, const std::function<void()>& checks);

}  // namespace dtrain::capi
