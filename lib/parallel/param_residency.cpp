#include "dtrain/parallel/param_residency.hpp"

#include <exception>

#include "dtrain/core/log.hpp"

namespace dtrain::parallel {

HeldParameters::~HeldParameters() {
  if (!residency_ || --residency_->whole_scopes_ > 0) return;
  try {
    residency_->release_all();
  } catch (const std::exception& e) {  // a failed wait while unwinding: the first error wins
    DTRAIN_LOG(error, "releasing the held parameters failed: " << e.what());
  }
}

}  // namespace dtrain::parallel
