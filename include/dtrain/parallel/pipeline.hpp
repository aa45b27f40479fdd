#pragma once
// PipelineExecutor: runs one rank's pipeline schedule (dtrain/parallel/pipeline_schedule.hpp)
// on its GPT stage for one optimiser step, passing activations and their gradients to the
// neighbouring stages with non-blocking point-to-point messages over the pipeline group.
//
// Memory: the model keeps the activations of one micro-batch. For each micro-batch in
// flight (at most max_in_flight() of the schedule) the executor keeps only the stage input
// (or the tokens) and recomputes the stage's forward just before a backward that does not
// directly follow its own forward. Recomputation is bit-identical, so gradients equal the
// single-process model's; it costs up to one extra forward per micro-batch on stages that
// are not last. All buffers are allocated at construction.
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
  // model: this rank's stage (GptStage: embedding on pp rank 0, head on the last), borrowed.
  // pp: the pipeline group, rank = stage, borrowed. One chunk per rank (virtual stages 1):
  // kind interleaved throws Error(Errc::not_implemented).
  PipelineExecutor(GptModel& model, Communicator& pp, ScheduleKind kind, int micro_batches,
                   int micro_batch, int seq_len);
  PipelineExecutor(const PipelineExecutor&) = delete;
  PipelineExecutor& operator=(const PipelineExecutor&) = delete;

  // Fills tokens and targets ([micro_batch, seq_len] int32, host) of micro-batch mb.
  using Loader = std::function<void(int mb, std::int32_t* tokens, std::int32_t* targets)>;
  // One step: every micro-batch forward and backward; gradients accumulate (+=) into the
  // model's arena, each micro-batch's mean loss scaled by dloss. load is called on the first
  // and the last stage only. Returns the sum of the micro-batches' mean losses on the last
  // stage, 0 elsewhere. Collective over the pipeline group.
  double run_step(const Loader& load, float dloss);

  // Forward of one micro-batch through every stage (evaluation): tokens are read on the
  // first stage, targets on the last. Returns the mean loss on the last stage, 0 elsewhere.
  // Collective over the pipeline group.
  double forward_only(const std::int32_t* tokens, const std::int32_t* targets);

  const std::vector<PipelineAction>& actions() const noexcept { return actions_; }
  int slots() const noexcept { return slots_; }

 private:
  void forward(int mb);
  void backward(int mb, float dloss);

  GptModel& model_;
  Communicator& pp_;
  std::vector<PipelineAction> actions_;
  int micro_batch_, seq_len_, slots_;
  std::size_t boundary_;  // floats of one activation (= its gradient)
  bool first_, last_;
  int resident_ = -1;     // micro-batch whose activations the model holds
  double loss_sum_ = 0;
  // per slot (micro-batch % slots_): tokens, targets, received input, sent output, sent grad
  AlignedBuffer tokens_, targets_;
  DeviceBuffer input_, output_, grad_out_, grad_in_;
  std::vector<Request> act_sends_, grad_sends_, recvs_;
};

}  // namespace dtrain::parallel
