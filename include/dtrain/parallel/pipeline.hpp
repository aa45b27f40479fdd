#pragma once
// PipelineExecutor: runs one rank's pipeline schedule (dtrain/parallel/pipeline_schedule.hpp)
// on its GPT stage for one optimiser step, passing activations and their gradients to the
// neighbouring stages with non-blocking point-to-point messages over the pipeline group.
//
// Memory: the model keeps every in-flight micro-batch's activations in its own slot
// (GptStage::slots, sized by chunk_slots()), so no forward is recomputed: micro-batch m of
// chunk c lives in slot m % slots[c]. Activations are received straight into the model's
// slot and sent straight from it; only the gradients sent back get a copy per slot. All
// buffers are allocated at construction.
//
// Bubble timers: run_step measures its own duration and the part of it spent blocked on
// messages (waiting for a receive, or for a send whose buffer is needed again).
#include <cstdint>
#include <functional>
#include <vector>

#include "dtrain/comm/communicator.hpp"
#include "dtrain/core/buffer.hpp"
#include "dtrain/export.hpp"
#include "dtrain/nn/gpt.hpp"
#include "dtrain/parallel/pipeline_schedule.hpp"

namespace dtrain::parallel {

class DTRAIN_API PipelineExecutor {
 public:
  // model: this rank's part, borrowed: virtual_stages chunks (chunk c = piece c*pp + rank of
  // partition_layers(layers, pp*virtual_stages)), the embedding on chunk 0 of pp rank 0, the
  // head on the last chunk of the last rank, each chunk with at least chunk_slots()
  // activation slots. pp: the pipeline group, rank = stage, borrowed. Throws
  // Error(Errc::invalid_config) for a schedule that does not validate and
  // Error(Errc::invalid_argument) for a model that does not fit it or a micro-batch shape it
  // cannot run (GptModel::check_batch_shape), before any message. Local: a model wrong on
  // some stages only throws there, and the caller makes that every rank's before its next
  // collective, or ends the job (the C ABI's agreed allocation agrees on it; the Trainer's
  // failing rank ends the job). A collective here would leave a rank that failed earlier, in
  // the model's construction, waiting in another one.
  PipelineExecutor(GptModel& model, Communicator& pp, ScheduleKind kind, int micro_batches,
                   int micro_batch, int seq_len, int virtual_stages = 1);
  PipelineExecutor(const PipelineExecutor&) = delete;
  PipelineExecutor& operator=(const PipelineExecutor&) = delete;

  // The micro-batch shape of the passes from now on: micro_batch sequences of seq_len tokens,
  // at most the constructor's of each (its buffers are reused). Throws
  // Error(Errc::invalid_argument) for a larger or empty shape, or one the model cannot run.
  void use_shape(int micro_batch, int seq_len);

  // Fills tokens and targets ([micro_batch, seq_len] int32, host) of micro-batch mb.
  using Loader = std::function<void(int mb, std::int32_t* tokens, std::int32_t* targets)>;
  // Called after micro-batch mb's backward on this rank (one chunk per rank only), e.g. to
  // set its gradient aside for a fixed-order sum.
  using BackwardDone = std::function<void(int mb)>;
  // One step: every micro-batch forward and backward; gradients accumulate (+=) into the
  // model's arena, each micro-batch's mean loss scaled by dloss. load is called on the first
  // and the last stage only. Returns the sum of the micro-batches' mean losses on the last
  // stage, 0 elsewhere. Collective over the pipeline group. With virtual stages, `done`
  // must be empty (a micro-batch's backward is spread over several actions). A failure on
  // one rank inside a step (a throwing load, a device error) cannot be recovered: the other
  // stages wait in their receives, and so would this rank's pending sends, were the executor
  // destroyed; the job must end (dtrain-gpt aborts it; otherwise the communicator's
  // watchdog does, after DTRAIN_COMM_TIMEOUT).
  double run_step(const Loader& load, float dloss, const BackwardDone& done = {});
  // Mean loss of each micro-batch of the last run_step (last stage; 0 elsewhere).
  const std::vector<double>& last_losses() const noexcept { return losses_; }

  // Forward of one micro-batch through every stage and chunk (evaluation): tokens are read
  // on the first stage, targets on the last. Returns the mean loss on the last stage, 0
  // elsewhere. Collective over the pipeline group. Uses slot 0 of every chunk.
  double forward_only(const std::int32_t* tokens, const std::int32_t* targets);
  // Generation: n more tokens of the text through every stage and chunk with the model's
  // key/value cache (GptModel::decode_chunk); tokens are read on the first stage. Returns
  // the logits of the last token on the last stage (GptModel::decode), null elsewhere.
  // Collective over the pipeline group.
  const float* decode(const std::int32_t* tokens, int n);

  const std::vector<PipelineAction>& actions() const noexcept { return actions_; }
  // Activation slots the schedule needs per chunk (chunk_slots()).
  const std::vector<int>& slots() const noexcept { return slots_; }
  // The last run_step: its wall time, and the part blocked on messages; their ratio is this
  // stage's measured bubble fraction (compare bubble_fraction()).
  double last_step_seconds() const noexcept { return step_seconds_; }
  double last_idle_seconds() const noexcept { return idle_seconds_; }
  // Bytes of the executor's own buffers (gradient copies in flight, one received gradient,
  // one micro-batch of token ids and one of targets), besides the model's activations.
  std::size_t buffer_bytes() const noexcept { return buffer_bytes_; }

 private:
  bool embeds(int chunk) const noexcept { return first_ && chunk == 0; }
  bool heads(int chunk) const noexcept { return last_ && chunk == virtual_stages_ - 1; }
  std::size_t slot_index(int chunk, int micro_batch) const;  // into the per-slot arrays
  void wait(Request& r);                                     // counted as idle
  // Without a single-copy transport a large message advances only while its sender is
  // inside MPI: poll_sends lets pending sends move on (true when none is left), push_sends
  // keeps them moving for up to a millisecond (counted as idle), so a message to a peer
  // that already waits for it arrives now rather than after this rank's next computation
  // (run_step spins only where a computation comes next, on every transport).
  bool poll_sends();
  void push_sends();

  GptModel& model_;
  Communicator& pp_;
  std::vector<PipelineAction> actions_;
  std::vector<int> slots_, slot_base_;  // per chunk: slot count, first index of its slots
  // per chunk: first index of its gradient-send slots; -1 for the embedding's chunk, which
  // has no input gradient to send
  std::vector<int> grad_slot_base_;
  int micro_batch_, seq_len_, virtual_stages_;
  int max_micro_batch_, max_seq_len_;  // the constructor's: what the buffers hold
  std::size_t boundary_;  // floats of one activation (= its gradient)
  bool first_, last_;
  double loss_sum_ = 0, step_seconds_ = 0, idle_seconds_ = 0;
  std::vector<double> losses_;  // per micro-batch
  std::size_t buffer_bytes_ = 0;
  AlignedBuffer tokens_, targets_;  // the micro-batch being loaded (host)
  DeviceBuffer grad_out_;           // per gradient-send slot: the input gradient being sent
  DeviceBuffer grad_in_;            // the output gradient just received
  std::vector<Request> act_sends_;  // per slot
  std::vector<Request> grad_sends_; // per gradient-send slot
  Request recv_;
};

}  // namespace dtrain::parallel
