#pragma once
// A failure seen by some ranks only, made every rank's before the next collective, so that
// none is left waiting: the lowest failing rank's code and message reach every rank, and all
// throw AgreedError (core/error.hpp), which a program reports from one rank.
#include <exception>
#include <string>

#include "dtrain/comm/communicator.hpp"
#include "dtrain/core/error.hpp"
#include "dtrain/export.hpp"

namespace dtrain {

class DTRAIN_API LocalFailure {
 public:
  void record(Errc code, std::string message);
  // dtrain's code; Errc::out_of_memory for std::bad_alloc; else Errc::io (a file system's).
  void record(const std::exception& e);
  bool failed() const noexcept { return failed_; }

  // Collective over comm: returns when no rank failed. Otherwise every rank throws
  // AgreedError with the lowest failing rank's code and message; with `what` set, the other
  // ranks' message reads "<what> failed on world rank R: <message>".
  void agree(Communicator& comm, const std::string& what = "") const;

 private:
  bool failed_ = false;
  Errc code_ = Errc::io;
  std::string message_;
};

}  // namespace dtrain
