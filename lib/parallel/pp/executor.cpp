// Pipeline executor: walks the schedule's actions. Receives block right away (the schedule
// puts them just before their use); sends go out non-blocking from a per-slot copy, and a
// slot's previous send is waited for before the slot is written again.
#include "dtrain/parallel/pipeline.hpp"

#include <algorithm>

#include "dtrain/core/error.hpp"

namespace dtrain::parallel {

namespace {
// One tag per message kind: with one chunk per rank, FIFO order per pair does the rest.
constexpr int kActivationTag = 1;
constexpr int kGradTag = 2;
}  // namespace

PipelineExecutor::PipelineExecutor(GptModel& model, Communicator& pp, ScheduleKind kind,
                                   int micro_batches, int micro_batch, int seq_len)
    : model_(model), pp_(pp), micro_batch_(micro_batch), seq_len_(seq_len) {
  DTRAIN_CHECK(kind != ScheduleKind::interleaved, Errc::not_implemented,
               "--schedule interleaved: the pipeline executor runs one chunk per rank");
  const int N = pp.size(), stage = pp.rank();
  actions_ = build_schedule(kind, N, stage, micro_batches, 1);
  slots_ = max_in_flight(kind, N, stage, micro_batches, 1);
  first_ = stage == 0;
  last_ = stage == N - 1;
  DTRAIN_CHECK(model.stage().embedding == first_ && model.stage().head == last_,
               Errc::invalid_argument,
               "pipeline rank " << stage << " of " << N << " holds the wrong part of the model");
  boundary_ = model.boundary_floats(micro_batch, seq_len);
  const std::size_t ids = static_cast<std::size_t>(micro_batch) * seq_len * slots_;
  Device& dev = model.device();
  const std::size_t act_bytes = boundary_ * sizeof(float);
  if (first_ || last_) {
    tokens_ = AlignedBuffer(ids * sizeof(std::int32_t));
    targets_ = AlignedBuffer(ids * sizeof(std::int32_t));
  }
  if (!first_) {
    input_ = DeviceBuffer(dev, act_bytes * slots_);
    grad_out_ = DeviceBuffer(dev, act_bytes * slots_);
  }
  if (!last_) {
    output_ = DeviceBuffer(dev, act_bytes * slots_);
    grad_in_ = DeviceBuffer(dev, act_bytes);
  }
  act_sends_.resize(static_cast<std::size_t>(slots_));
  grad_sends_.resize(static_cast<std::size_t>(slots_));
  recvs_.resize(1);
}

void PipelineExecutor::forward(int mb) {
  const std::size_t slot = static_cast<std::size_t>(mb % slots_);
  const std::size_t ids = static_cast<std::size_t>(micro_batch_) * seq_len_;
  const std::int32_t* tok = first_ ? tokens_.as<std::int32_t>() + slot * ids : nullptr;
  const std::int32_t* tgt = last_ ? targets_.as<std::int32_t>() + slot * ids : nullptr;
  const float* in = first_ ? nullptr : input_.as<float>() + slot * boundary_;
  const float loss = model_.forward_stage(tok, tgt, in, micro_batch_, seq_len_);
  resident_ = mb;
  if (last_) loss_sum_ += loss;
}

void PipelineExecutor::backward(int mb, float dloss) {
  if (resident_ != mb) {
    // Recompute this micro-batch's activations from its saved input (the loss of the
    // recomputation is not counted again).
    const double kept = loss_sum_;
    forward(mb);
    loss_sum_ = kept;
  }
  model_.backward_stage(dloss, last_ ? nullptr : grad_in_.as<float>());
  resident_ = -1;  // backward overwrote the logits / scratch
}

double PipelineExecutor::run_step(const Loader& load, float dloss) {
  loss_sum_ = 0;
  resident_ = -1;
  Device& dev = model_.device();
  const std::size_t ids = static_cast<std::size_t>(micro_batch_) * seq_len_;
  const auto n = static_cast<std::int64_t>(boundary_);
  for (const PipelineAction& a : actions_) {
    const std::size_t slot = static_cast<std::size_t>(a.micro_batch % slots_);
    switch (a.type) {
      case ActionType::forward:
        if (first_ || last_)
          load(a.micro_batch, tokens_.as<std::int32_t>() + slot * ids,
               targets_.as<std::int32_t>() + slot * ids);
        forward(a.micro_batch);
        break;
      case ActionType::backward:
        backward(a.micro_batch, dloss);
        break;
      case ActionType::send_activation: {
        act_sends_[slot].wait();  // the slot's previous message has left
        float* out = output_.as<float>() + slot * boundary_;
        dev.copy_floats(out, model_.stage_output(), n);
        act_sends_[slot] = pp_.isend(out, boundary_, DType::f32, a.peer, kActivationTag);
        break;
      }
      case ActionType::send_grad: {
        grad_sends_[slot].wait();
        float* g = grad_out_.as<float>() + slot * boundary_;
        dev.copy_floats(g, model_.input_grad(), n);
        grad_sends_[slot] = pp_.isend(g, boundary_, DType::f32, a.peer, kGradTag);
        break;
      }
      case ActionType::recv_activation:
        recvs_[0] = pp_.irecv(input_.as<float>() + slot * boundary_, boundary_, DType::f32,
                              a.peer, kActivationTag);
        recvs_[0].wait();
        break;
      case ActionType::recv_grad:
        recvs_[0] = pp_.irecv(grad_in_.as<float>(), boundary_, DType::f32, a.peer, kGradTag);
        recvs_[0].wait();
        break;
    }
  }
  // Sends must be complete before the buffers are reused in the next step.
  wait_all(act_sends_);
  wait_all(grad_sends_);
  return loss_sum_;
}

double PipelineExecutor::forward_only(const std::int32_t* tokens, const std::int32_t* targets) {
  const int stage = pp_.rank();
  float* in = first_ ? nullptr : input_.as<float>();
  if (!first_) pp_.recv(in, boundary_, DType::f32, stage - 1, kActivationTag);
  const float loss = model_.forward_stage(tokens, targets, in, micro_batch_, seq_len_);
  resident_ = -1;
  if (!last_) pp_.send(model_.stage_output(), boundary_, DType::f32, stage + 1, kActivationTag);
  return last_ ? loss : 0.0;
}

}  // namespace dtrain::parallel
