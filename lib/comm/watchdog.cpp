#include "comm/watchdog.hpp"

#include <mpi.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <iomanip>
#include <mutex>
#include <sstream>
#include <thread>

#include "comm/group_label.hpp"
#include "comm/mpi_session.hpp"
#include "dtrain/core/env.hpp"
#include "dtrain/core/log.hpp"
#include "dtrain/core/timer.hpp"

namespace dtrain::comm::watchdog {
namespace {

constexpr int kSlots = 64;
constexpr int kAbortCode = 124;  // what `timeout` returns: "it hung"

std::array<WatchSlot, kSlots> g_slots;

struct Monitor {
  std::mutex mutex;
  std::condition_variable wake;
  std::thread thread;
  bool stop = false;
  // A program that exits without shutting dtrain down (no dt_finalize) must not end in
  // std::terminate from a running thread's destructor.
  ~Monitor() {
    {
      std::lock_guard<std::mutex> lock(mutex);
      if (!thread.joinable()) return;
      stop = true;
    }
    wake.notify_all();
    thread.join();
  }
};
Monitor g_monitor;

// Releases the slot when its thread exits, so short-lived threads do not use them all up.
struct SlotOwner {
  WatchSlot* slot = nullptr;
  bool tried = false;
  ~SlotOwner() {
    if (slot) {
      slot->seq.store(0, std::memory_order_release);
      slot->owned.store(false, std::memory_order_release);
    }
  }
};
thread_local SlotOwner t_owner;

struct Seen {
  std::uint64_t seq = 0;
  double since = 0.0;
};

[[noreturn]] void abort_job(const char* op, const GroupLabel* group, double timeout_s) {
  std::ostringstream msg;
  msg << "watchdog: " << (op ? op : "?") << " on group '" << (group ? group->name : "?")
      << "' (world ranks " << (group ? group->ranks : "?") << ") made no progress for "
      << std::setprecision(6) << timeout_s << " s; aborting";
  log::write(log::Level::error, msg.str());
  // MPI may be called from this thread only under MPI_THREAD_MULTIPLE. Below, the process
  // ends alone; the launcher ends the job (mpiexec), or the other ranks' watchdogs, stuck
  // in the same operation, end theirs.
  if (session::thread_level() >= MPI_THREAD_MULTIPLE) MPI_Abort(MPI_COMM_WORLD, kAbortCode);
  std::_Exit(kAbortCode);  // MPI_Abort should not return; never hang if it does
}

void run(double timeout_s) {
  // Sample often enough to fire within about a tenth of the limit, at most once a second.
  const auto period = std::chrono::duration<double>(std::clamp(timeout_s / 10.0, 0.01, 1.0));
  std::array<Seen, kSlots> seen{};
  std::unique_lock<std::mutex> lock(g_monitor.mutex);
  while (!g_monitor.wake.wait_for(lock, period, [] { return g_monitor.stop; })) {
    const double now = now_seconds();
    for (int i = 0; i < kSlots; ++i) {
      WatchSlot& s = g_slots[i];
      const std::uint64_t seq = s.seq.load(std::memory_order_acquire);
      if (seq == 0 || seq != seen[i].seq) {
        seen[i] = Seen{seq, now};
        continue;
      }
      if (now - seen[i].since < timeout_s) continue;
      const char* op = s.op.load(std::memory_order_relaxed);
      const GroupLabel* group = s.group.load(std::memory_order_relaxed);
      std::atomic_thread_fence(std::memory_order_acquire);
      if (s.seq.load(std::memory_order_relaxed) != seq) continue;  // finished meanwhile
      abort_job(op, group, timeout_s);
    }
  }
}

}  // namespace

void ensure_running() {
  std::lock_guard<std::mutex> lock(g_monitor.mutex);
  if (g_monitor.thread.joinable()) return;
  g_monitor.stop = false;
  const double timeout_s = env::params().comm_timeout_s;
  g_monitor.thread = std::thread(run, timeout_s);
}

void shutdown() {
  {
    std::lock_guard<std::mutex> lock(g_monitor.mutex);
    if (!g_monitor.thread.joinable()) return;
    g_monitor.stop = true;
  }
  g_monitor.wake.notify_all();
  g_monitor.thread.join();
}

WatchSlot* this_thread_slot() {
  if (t_owner.slot || t_owner.tried) return t_owner.slot;
  t_owner.tried = true;
  for (WatchSlot& s : g_slots) {
    bool expected = false;
    if (s.owned.compare_exchange_strong(expected, true, std::memory_order_acq_rel)) {
      t_owner.slot = &s;
      break;
    }
  }
  if (!t_owner.slot) DTRAIN_LOG(warn, "watchdog: more than " << kSlots << " communicating threads; extra ones are not watched");
  return t_owner.slot;
}

}  // namespace dtrain::comm::watchdog
