// Pipeline executor: walks the schedule's actions. Receives block right away (the schedule
// puts them just before their use); sends go out non-blocking, activations straight from
// the model's slot and input gradients from a per-slot copy, and a slot's previous send is
// waited for before the slot is written again. Pending sends are kept moving around every
// message and before every computation (see push_sends).
#include "dtrain/parallel/pipeline.hpp"

#include "dtrain/core/error.hpp"
#include "dtrain/core/timer.hpp"
#include "parallel/pp/schedule.hpp"

namespace dtrain::parallel {

namespace {
// How long to keep pending sends moving after posting one or finishing a receive: long
// enough for a message to a waiting peer to go through (a few hundred microseconds for
// activations of megabytes through shared memory), short against a computation.
constexpr double kPushSeconds = 1e-3;
// A message is told apart by kind and the receiving chunk: between two ranks, messages of
// one (kind, chunk) arrive in the order sent, which the schedules rely on.
int activation_tag(int receiving_chunk) { return 1 + 2 * receiving_chunk; }
int grad_tag(int receiving_chunk) { return 2 + 2 * receiving_chunk; }
}  // namespace

PipelineExecutor::PipelineExecutor(GptModel& model, Communicator& pp, ScheduleKind kind,
                                   int micro_batches, int micro_batch, int seq_len,
                                   int virtual_stages)
    : model_(model), pp_(pp), micro_batch_(micro_batch), seq_len_(seq_len),
      virtual_stages_(virtual_stages), max_micro_batch_(micro_batch), max_seq_len_(seq_len) {
  const int N = pp.size(), stage = pp.rank(), V = virtual_stages;
  actions_ = build_schedule(kind, N, stage, micro_batches, V);
  slots_ = chunk_slots(kind, N, stage, micro_batches, V);
  first_ = stage == 0;
  last_ = stage == N - 1;
  DTRAIN_CHECK(N > 1 || V == 1, Errc::invalid_config,
               "--virtual-stages " << V << " needs --pp > 1");
  DTRAIN_CHECK(model.chunks() == V, Errc::invalid_argument,
               "pipeline rank " << stage << " holds " << model.chunks()
                                << " model chunks, --virtual-stages is " << V);
  // Here, on every rank, rather than in the first forward of stage 0 alone, which would
  // leave the other stages waiting for its activations.
  model.check_batch_shape(micro_batch, seq_len);
  int total_slots = 0, grad_slots = 0;
  for (int c = 0; c < V; ++c) {
    const GptStage& ch = model.chunk(c);
    DTRAIN_CHECK(ch.embedding == embeds(c) && ch.head == heads(c), Errc::invalid_argument,
                 "pipeline rank " << stage << " of " << N << ", chunk " << c
                                  << " holds the wrong part of the model");
    DTRAIN_CHECK(ch.slots >= slots_[c], Errc::invalid_argument,
                 "chunk " << c << " keeps " << ch.slots << " micro-batches' activations, the "
                          << schedule_kind_name(kind) << " schedule needs " << slots_[c]);
    slot_base_.push_back(total_slots);
    total_slots += slots_[c];
    grad_slot_base_.push_back(embeds(c) ? -1 : grad_slots);
    if (!embeds(c)) grad_slots += slots_[c];
  }
  boundary_ = model.boundary_floats(micro_batch, seq_len);
  const std::size_t ids = static_cast<std::size_t>(micro_batch) * seq_len * sizeof(std::int32_t);
  const std::size_t act_bytes = boundary_ * sizeof(float);
  Device& dev = model.device();
  if (first_ || last_) {
    tokens_ = AlignedBuffer(ids);
    targets_ = AlignedBuffer(ids);
    buffer_bytes_ += 2 * ids;
  }
  if (grad_slots > 0) {  // some chunk sends input gradients
    grad_out_ = DeviceBuffer(dev, act_bytes * static_cast<std::size_t>(grad_slots));
    buffer_bytes_ += act_bytes * static_cast<std::size_t>(grad_slots);
  }
  if (!(last_ && V == 1)) {  // some chunk receives output gradients
    grad_in_ = DeviceBuffer(dev, act_bytes);
    buffer_bytes_ += act_bytes;
  }
  act_sends_.resize(static_cast<std::size_t>(total_slots));
  grad_sends_.resize(static_cast<std::size_t>(grad_slots));
  losses_.assign(static_cast<std::size_t>(micro_batches), 0.0);
}

void PipelineExecutor::use_shape(int micro_batch, int seq_len) {
  model_.check_batch_shape(micro_batch, seq_len);
  DTRAIN_CHECK(micro_batch >= 1 && micro_batch <= max_micro_batch_ && seq_len >= 1 &&
                   seq_len <= max_seq_len_,
               Errc::invalid_argument,
               "pipeline micro-batch of " << micro_batch << " x " << seq_len
                   << " tokens: the executor holds at most " << max_micro_batch_ << " x "
                   << max_seq_len_);
  micro_batch_ = micro_batch;
  seq_len_ = seq_len;
  boundary_ = model_.boundary_floats(micro_batch, seq_len);
}

std::size_t PipelineExecutor::slot_index(int chunk, int micro_batch) const {
  const auto c = static_cast<std::size_t>(chunk);
  return static_cast<std::size_t>(slot_base_[c] + micro_batch % slots_[c]);
}

bool PipelineExecutor::poll_sends() {
  bool done = true;
  for (Request& r : act_sends_) done = r.test() && done;
  for (Request& r : grad_sends_) done = r.test() && done;
  return done;
}

void PipelineExecutor::push_sends() {
  ScopedAccumulate idle(idle_seconds_);
  Stopwatch spent;
  while (!poll_sends() && spent.seconds() < kPushSeconds) {
  }
}

void PipelineExecutor::wait(Request& r) {
  ScopedAccumulate idle(idle_seconds_);
  r.wait();
}

double PipelineExecutor::run_step(const Loader& load, float dloss, const BackwardDone& done) {
  DTRAIN_CHECK(!done || virtual_stages_ == 1, Errc::not_implemented,
               "per-micro-batch gradients (--deterministic) with --virtual-stages "
                   << virtual_stages_ << " are not implemented");
  Stopwatch step;
  loss_sum_ = 0;
  idle_seconds_ = 0;
  Device& dev = model_.device();
  const auto n = static_cast<std::int64_t>(boundary_);
  for (std::size_t i = 0; i < actions_.size(); ++i) {
    const PipelineAction& a = actions_[i];
    // Pending sends are pushed before a computation only: a blocking receive, or the waits
    // at the end of the step, keep them moving anyway, without the spin.
    const bool computes_next = i + 1 < actions_.size() &&
                               (actions_[i + 1].type == ActionType::forward ||
                                actions_[i + 1].type == ActionType::backward ||
                                actions_[i + 1].type == ActionType::send_grad);
    auto push_before_computing = [&] {
      if (computes_next) push_sends();
    };
    const int c = a.chunk, slot = a.micro_batch % slots_[static_cast<std::size_t>(c)];
    const std::size_t k = slot_index(c, a.micro_batch);
    switch (a.type) {
      case ActionType::forward: {
        poll_sends();
        wait(act_sends_[k]);  // the slot's output is about to be overwritten
        if (embeds(c) || heads(c))
          load(a.micro_batch, tokens_.as<std::int32_t>(), targets_.as<std::int32_t>());
        const float* in = embeds(c) ? nullptr : model_.stage_input(c, slot);
        const float loss = model_.forward_stage(tokens_.as<std::int32_t>(),
                                                targets_.as<std::int32_t>(), in, micro_batch_,
                                                seq_len_, c, slot);
        if (heads(c)) {
          loss_sum_ += loss;
          losses_[static_cast<std::size_t>(a.micro_batch)] = loss;
        }
        break;
      }
      case ActionType::backward:
        poll_sends();
        model_.backward_stage(dloss, heads(c) ? nullptr : grad_in_.as<float>(), c, slot);
        // the input gradient goes out first: the previous stage waits for it, and done
        // (under --deterministic, an exchange over data parallelism) touches only the
        // parameters' gradients
        if (done && embeds(c)) done(a.micro_batch);
        break;
      case ActionType::send_activation:  // right after the forward: its output is current
        act_sends_[k] = pp_.isend(model_.stage_output(), boundary_, DType::f32, a.peer,
                                  activation_tag(a.peer_chunk));
        push_before_computing();
        break;
      case ActionType::send_grad: {
        const auto kg =
            static_cast<std::size_t>(grad_slot_base_[static_cast<std::size_t>(c)] + slot);
        wait(grad_sends_[kg]);
        float* g = grad_out_.as<float>() + kg * boundary_;
        dev.copy_floats(g, model_.input_grad(), n);
        grad_sends_[kg] = pp_.isend(g, boundary_, DType::f32, a.peer, grad_tag(a.peer_chunk));
        push_before_computing();
        if (done) done(a.micro_batch);  // this backward's gradients, after its send is posted
        break;
      }
      case ActionType::recv_activation:
        recv_ = pp_.irecv(model_.stage_input(c, slot), boundary_, DType::f32, a.peer,
                          activation_tag(c));
        wait(recv_);
        push_before_computing();
        break;
      case ActionType::recv_grad:
        recv_ = pp_.irecv(grad_in_.as<float>(), boundary_, DType::f32, a.peer, grad_tag(c));
        wait(recv_);
        push_before_computing();
        break;
    }
  }
  // Sends must be complete before the buffers are reused in the next step.
  for (Request& r : act_sends_) wait(r);
  for (Request& r : grad_sends_) wait(r);
  step_seconds_ = step.seconds();
  return loss_sum_;
}

double PipelineExecutor::forward_only(const std::int32_t* tokens, const std::int32_t* targets) {
  const int N = pp_.size(), stage = pp_.rank(), V = virtual_stages_;
  double loss = 0;
  for (int c = 0; c < V; ++c) {  // pieces in order: each waits for the one before
    float* in = nullptr;
    if (!embeds(c)) {
      const pp::ChunkLocation prev = pp::previous_piece(N, V, stage, c);
      in = model_.stage_input(c, 0);
      pp_.recv(in, boundary_, DType::f32, prev.stage, activation_tag(c));
    }
    const float l = model_.forward_stage(tokens, targets, in, micro_batch_, seq_len_, c, 0);
    if (heads(c)) {
      loss = l;
    } else {
      const pp::ChunkLocation next = pp::next_piece(N, V, stage, c);
      pp_.send(model_.stage_output(), boundary_, DType::f32, next.stage,
               activation_tag(next.chunk));
    }
  }
  return loss;
}

const float* PipelineExecutor::decode(const std::int32_t* tokens, int n) {
  const int N = pp_.size(), stage = pp_.rank(), V = virtual_stages_;
  const std::size_t rows = static_cast<std::size_t>(n) * model_.config().d_model;
  const float* out = nullptr;
  for (int c = 0; c < V; ++c) {  // pieces in order, as in forward_only
    float* in = nullptr;
    if (!embeds(c)) {
      in = model_.decode_input();
      pp_.recv(in, rows, DType::f32, pp::previous_piece(N, V, stage, c).stage, activation_tag(c));
    }
    out = model_.decode_chunk(c, tokens, in, n);
    if (!heads(c)) {
      const pp::ChunkLocation next = pp::next_piece(N, V, stage, c);
      pp_.send(out, rows, DType::f32, next.stage, activation_tag(next.chunk));
      out = nullptr;
    }
  }
  return out;
}

}  // namespace dtrain::parallel
