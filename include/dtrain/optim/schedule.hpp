#pragma once
// Learning-rate schedule: linear warm-up from lr/warmup to lr, then cosine decay to min_lr
// at the last step. A pure function of the step, so a resumed run gets the same rates.
#include "dtrain/export.hpp"

namespace dtrain::optim {

struct DTRAIN_API LrSchedule {
  double lr = 3e-4;
  double min_lr = 3e-5;
  long warmup_steps = 0;
  long total_steps = 1;
  // Rate for step (0-based).
  double at(long step) const;
  void validate() const;  // Error(Errc::invalid_config) on nonsense values
};

}  // namespace dtrain::optim
