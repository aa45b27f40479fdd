#pragma once
// Pipeline schedules as pure functions: the ordered actions of one pipeline rank for one
// optimiser step, with no MPI, so every schedule is tested by simulating all ranks together.
//
// Model chunks. With V virtual stages the model is cut into N*V pieces; rank (stage) s holds
// chunks c = 0..V-1, chunk c of stage s being piece c*N + s (Megatron's interleaving). With
// V == 1 a rank holds one chunk, chunk 0. Piece p's input comes from piece p-1 and its
// output gradient from piece p+1; a piece on another rank is reached by send/recv, while
// consecutive pieces on the same rank (N == 1) hand over in memory, without actions.
//
// Execution model the schedules are built and tested for: a Send* action posts a
// non-blocking send and returns at once (its buffer stays untouched until the send
// completes); a Recv* action blocks until its data has arrived. Messages between a pair of
// ranks of one kind (activation or gradient) and chunk arrive in the order they were sent,
// and every list orders its receives like the peer orders the matching sends, so one
// message tag per (kind, chunk) suffices.
#include <string>
#include <vector>

#include "dtrain/export.hpp"

namespace dtrain::parallel {

enum class ScheduleKind {
  gpipe,        // all forwards, then all backwards (M activations in flight)
  one_f_one_b,  // warm-up, one forward one backward, cool-down (<= N - stage in flight)
  interleaved,  // Megatron's interleaved 1F1B over V chunks per rank (M % N == 0)
};

enum class ActionType {
  forward,          // run chunk on micro_batch (after its input is here)
  backward,         // backward of chunk on micro_batch (after its output gradient is here)
  send_activation,  // output of (micro_batch, chunk) to peer
  recv_activation,  // input of (micro_batch, chunk) from peer
  send_grad,        // gradient of the input of (micro_batch, chunk) to peer
  recv_grad,        // gradient of the output of (micro_batch, chunk) from peer
};

struct DTRAIN_API PipelineAction {
  ActionType type = ActionType::forward;
  int micro_batch = 0;
  int chunk = 0;   // this rank's model chunk the action belongs to
  int peer = -1;   // pipeline rank at the other end (communication only), else -1
  // The peer's chunk that sends or receives the matching message (communication only).
  int peer_chunk = -1;

  bool operator==(const PipelineAction& o) const noexcept {
    return type == o.type && micro_batch == o.micro_batch && chunk == o.chunk &&
           peer == o.peer && peer_chunk == o.peer_chunk;
  }
};

// "gpipe", "1f1b", "interleaved" (the --schedule spellings); throws
// Error(Errc::invalid_config) for anything else.
DTRAIN_API ScheduleKind parse_schedule_kind(const std::string& name);
DTRAIN_API const char* schedule_kind_name(ScheduleKind kind) noexcept;

// Most micro-batches times virtual stages of one step (a schedule of 4 million actions).
inline constexpr long long kMaxPipelineMicroSteps = 1 << 20;

// Throws Error(Errc::invalid_config) with a message naming the option when the arguments
// do not make a schedule: stages, micro_batches, virtual_stages < 1; virtual_stages > 1 with
// a schedule other than interleaved; interleaved with micro_batches % stages != 0;
// micro_batches * virtual_stages above kMaxPipelineMicroSteps.
DTRAIN_API void validate_schedule(ScheduleKind kind, int stages, int micro_batches,
                                  int virtual_stages);

// The ordered actions of pipeline rank `stage` (0 <= stage < stages) for one step of
// micro_batches micro-batches. Validates as validate_schedule (and stage's range).
DTRAIN_API std::vector<PipelineAction> build_schedule(ScheduleKind kind, int stages, int stage,
                                                      int micro_batches, int virtual_stages);

// Most activations of (micro-batch, chunk) pairs a rank keeps at once under the schedule:
// micro_batches for gpipe, min(M, N - stage) for 1f1b, Megatron's warm-up + 1 (at most
// M * V) for interleaved: the sum over chunks of what the rank holds, where chunk_slots()
// (what the executor sizes its slots by) counts each chunk's own most. Validates as
// build_schedule.
DTRAIN_API int max_in_flight(ScheduleKind kind, int stages, int stage, int micro_batches,
                             int virtual_stages);

// Activation slots rank `stage` needs per model chunk (V entries): the most micro-batches of
// that chunk between their forward and their backward at once in build_schedule's list.
// A chunk's forwards, and its backwards, go in micro-batch order, so micro-batch m of chunk
// c can use slot m % slots[c] without overwriting one still waiting for its backward. For
// V == 1 the single entry is max_in_flight().
DTRAIN_API std::vector<int> chunk_slots(ScheduleKind kind, int stages, int stage,
                                        int micro_batches, int virtual_stages);

// Theoretical idle fraction of a step (free communication, equal layers per chunk):
// (N-1) / (M+N-1) for gpipe and 1f1b, (N-1) / (V*M + N-1) for interleaved, whose warm-up
// and cool-down take 1/V of the time (Megatron's bubble (N-1)/(V*M) of the ideal time;
// "the 1F1B fraction divided by V" is its estimate for small bubbles). Zero for N == 1.
DTRAIN_API double bubble_fraction(ScheduleKind kind, int stages, int micro_batches,
                                  int virtual_stages);

}  // namespace dtrain::parallel
