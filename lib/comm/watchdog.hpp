#pragma once
// The communication watchdog. Each thread that communicates owns one slot; a call marks its
// slot busy on entry and idle on exit (plain atomic stores, no clock read, no lock). A
// background thread samples the slots: a call still busy with the same sequence number for
// DTRAIN_COMM_TIMEOUT seconds has made no progress, and the job is aborted with one line
// naming the operation, the group and its world ranks.
#include <atomic>
#include <cstdint>

namespace dtrain::comm {

struct GroupLabel;

struct WatchSlot {
  std::atomic<std::uint64_t> seq{0};  // 0 = idle; otherwise the id of the call in flight
  std::atomic<const char*> op{nullptr};
  std::atomic<const GroupLabel*> group{nullptr};
  std::atomic<bool> owned{false};
  std::uint64_t next_seq = 0;  // written only by the owning thread
};

namespace watchdog {
// Starts the background thread if it is not running (cheap when it is).
void ensure_running();
// Stops and joins it (at the last Runtime's destruction).
void shutdown();
// This thread's slot, claimed on first use; nullptr if all slots are taken.
WatchSlot* this_thread_slot();
}  // namespace watchdog

// Marks one blocking call in flight for its scope. A long operation made of many steps (a
// checkpoint write, whose HDF5 calls communicate where no scope of dtrain's can see) calls
// progress() after each, and scopes nest: an outer scope is watched again when an inner one
// ends, with a new sequence number, as an inner call finished is progress too. So such an
// operation only has to finish a step every DTRAIN_COMM_TIMEOUT.
class WatchScope {
 public:
  WatchScope(const char* op, const GroupLabel* group) noexcept
      : slot_(watchdog::this_thread_slot()), op_(op), group_(group) {
    if (!slot_) return;
    const bool nested = slot_->seq.load(std::memory_order_relaxed) != 0;  // this thread's stores
    if (nested) {
      outer_op_ = slot_->op.load(std::memory_order_relaxed);
      outer_group_ = slot_->group.load(std::memory_order_relaxed);
    }
    mark(op, group, nested);
  }
  ~WatchScope() { end(); }
  WatchScope(const WatchScope&) = delete;
  WatchScope& operator=(const WatchScope&) = delete;

  // A step of the operation finished: its time without progress starts again.
  void progress() noexcept {
    if (slot_) mark(op_, group_, true);
  }

  // The operation's watched part is over (before the scope's end: what follows is not
  // watched). The outer scope, if any, is watched again.
  void end() noexcept {
    if (!slot_) return;
    if (outer_op_)
      mark(outer_op_, outer_group_, true);
    else
      slot_->seq.store(0, std::memory_order_release);
    slot_ = nullptr;
  }

 private:
  void mark(const char* op, const GroupLabel* group, bool busy) noexcept {
    if (busy) slot_->seq.store(0, std::memory_order_relaxed);  // idle while op and group change
    std::atomic_thread_fence(std::memory_order_release);  // seqlock writer order
    slot_->op.store(op, std::memory_order_relaxed);
    slot_->group.store(group, std::memory_order_relaxed);
    slot_->seq.store(++slot_->next_seq, std::memory_order_release);
  }

  WatchSlot* slot_;
  const char* op_;
  const GroupLabel* group_;
  const char* outer_op_ = nullptr;
  const GroupLabel* outer_group_ = nullptr;
};

}  // namespace dtrain::comm
