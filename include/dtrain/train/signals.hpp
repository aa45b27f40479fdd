#pragma once
// Preemption: SLURM (and most schedulers) send SIGTERM, or a chosen signal such as SIGUSR1,
// some time before they kill a job. While Trainer::run() runs, those two signals only set a
// flag; at the next step boundary or micro-batch (not inside a pipeline's schedule) all ranks
// agree on it with one all-reduce, write a checkpoint and return with
// TrainSummary::stopped_by_signal set. A step stopped part-way is dropped, not applied.
// dtrain-gpt then exits with kExitPreempted (0 where the training had finished and it has no
// text to generate: TrainSummary::finished). A stop requested before run() (a signal during
// the program's set-up under its own StopSignalScope) stops it before the first step; run()
// clears the request when it returns.
#include "dtrain/export.hpp"

namespace dtrain::train {

// Exit status of dtrain-gpt after a signal-triggered checkpoint: "stopped early, resumable
// with --resume auto" (distinct from 0 = done, 1 = error, 2 = bad configuration).
inline constexpr int kExitPreempted = 3;

// What the handler does (async-signal-safe): records signal_number (any non-zero value).
// Programs may call it too, e.g. from their own handler.
DTRAIN_API void request_stop(int signal_number) noexcept;
// The recorded signal number, 0 when none.
DTRAIN_API int stop_requested() noexcept;
DTRAIN_API void clear_stop_request() noexcept;

// Installs the SIGTERM, SIGUSR1 and SIGINT handlers for its lifetime (a second SIGINT ends
// the process at once) and restores the previous ones afterwards (Trainer::run() holds one).
class DTRAIN_API StopSignalScope {
 public:
  StopSignalScope();
  ~StopSignalScope();
  StopSignalScope(const StopSignalScope&) = delete;
  StopSignalScope& operator=(const StopSignalScope&) = delete;

 private:
  struct Saved;
  Saved* saved_;
};

}  // namespace dtrain::train
