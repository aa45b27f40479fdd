#include "comm/backend.hpp"
#include "comm/watchdog.hpp"
#include "dtrain/comm/communicator.hpp"
#include "dtrain/core/log.hpp"

namespace dtrain {

Request::Request() noexcept = default;
Request::Request(std::unique_ptr<comm::RequestImpl> impl) noexcept : impl_(std::move(impl)) {}

Request::~Request() {
  if (!impl_) return;
  try {
    wait();
  } catch (const std::exception& e) {
    DTRAIN_LOG(error, "pending request failed while being destroyed: " << e.what());
  }
}

Request::Request(Request&& other) noexcept = default;

Request& Request::operator=(Request&& other) noexcept {
  if (this != &other) {
    if (impl_) {
      try {
        wait();
      } catch (...) {
      }
    }
    impl_ = std::move(other.impl_);
  }
  return *this;
}

void Request::wait() {
  if (!impl_) return;
  {
    comm::WatchScope watch(impl_->op_name, impl_->group);
    impl_->wait();
  }
  impl_.reset();
}

bool Request::test() {
  if (!impl_) return true;
  if (!impl_->test()) return false;
  impl_.reset();
  return true;
}

bool Request::valid() const noexcept { return impl_ != nullptr; }

void wait_all(std::vector<Request>& requests) {
  for (Request& r : requests) r.wait();
}

}  // namespace dtrain
