#include "dtrain/train/signals.hpp"

#include <atomic>
#include <csignal>

namespace dtrain::train {
namespace {

// Lock-free, so the handler may store to it, and threads (a watchdog, a test) may too.
std::atomic<int> g_stop_signal{0};
static_assert(std::atomic<int>::is_always_lock_free, "the signal handler needs a lock-free flag");

// A second SIGINT (Ctrl-C again) ends the process at once, as one did before: the first
// asked for a stop at the next step, which a user who presses it twice does not wait for.
extern "C" void on_stop_signal(int sig) {
  if (sig == SIGINT && g_stop_signal == SIGINT) {
    std::signal(SIGINT, SIG_DFL);
    std::raise(SIGINT);
    return;
  }
  g_stop_signal = sig;
}

constexpr int kSignals[] = {SIGTERM, SIGUSR1, SIGINT};
constexpr int kCount = static_cast<int>(sizeof kSignals / sizeof kSignals[0]);

}  // namespace

struct StopSignalScope::Saved {
  struct sigaction previous[kCount];
};

void request_stop(int signal_number) noexcept { g_stop_signal = signal_number ? signal_number : -1; }
int stop_requested() noexcept { return g_stop_signal; }
void clear_stop_request() noexcept { g_stop_signal = 0; }

StopSignalScope::StopSignalScope() : saved_(new Saved) {
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;  // MPI's system calls carry on; the flag is polled
  for (int i = 0; i < kCount; ++i) sigaction(kSignals[i], &sa, &saved_->previous[i]);
}

StopSignalScope::~StopSignalScope() {
  for (int i = 0; i < kCount; ++i) sigaction(kSignals[i], &saved_->previous[i], nullptr);
  delete saved_;
}

}  // namespace dtrain::train
