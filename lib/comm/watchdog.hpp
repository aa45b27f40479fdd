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

// Marks one blocking call in flight for its scope.
class WatchScope {
 public:
  WatchScope(const char* op, const GroupLabel* group) noexcept : slot_(watchdog::this_thread_slot()) {
    if (!slot_) return;
    std::atomic_thread_fence(std::memory_order_release);  // seqlock writer order
    slot_->op.store(op, std::memory_order_relaxed);
    slot_->group.store(group, std::memory_order_relaxed);
    slot_->seq.store(++slot_->next_seq, std::memory_order_release);
  }
  ~WatchScope() {
    if (slot_) slot_->seq.store(0, std::memory_order_release);
  }
  WatchScope(const WatchScope&) = delete;
  WatchScope& operator=(const WatchScope&) = delete;

 private:
  WatchSlot* slot_;
};

}  // namespace dtrain::comm
