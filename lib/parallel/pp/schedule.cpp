// Pipeline schedules: first the order of a rank's forwards and backwards, then the
// communication around each (receive just before the computation that needs the data, send
// right after the one that produced it).
#include "parallel/pp/schedule.hpp"

#include <algorithm>

#include "dtrain/core/error.hpp"

namespace dtrain::parallel {

ScheduleKind parse_schedule_kind(const std::string& name) {
  if (name == "gpipe") return ScheduleKind::gpipe;
  if (name == "1f1b") return ScheduleKind::one_f_one_b;
  if (name == "interleaved") return ScheduleKind::interleaved;
  DTRAIN_FAIL(Errc::invalid_config,
              "--schedule must be gpipe, 1f1b or interleaved, got '" << name << "'");
}

const char* schedule_kind_name(ScheduleKind kind) noexcept {
  switch (kind) {
    case ScheduleKind::gpipe: return "gpipe";
    case ScheduleKind::one_f_one_b: return "1f1b";
    case ScheduleKind::interleaved: return "interleaved";
  }
  return "unknown";
}

void validate_schedule(ScheduleKind kind, int stages, int micro_batches, int virtual_stages) {
  DTRAIN_CHECK(stages >= 1, Errc::invalid_config, "--pp must be at least 1, got " << stages);
  DTRAIN_CHECK(micro_batches >= 1, Errc::invalid_config,
               "the pipeline needs at least one micro-batch per step, got " << micro_batches);
  DTRAIN_CHECK(virtual_stages >= 1, Errc::invalid_config,
               "--virtual-stages must be at least 1, got " << virtual_stages);
  DTRAIN_CHECK(virtual_stages == 1 || kind == ScheduleKind::interleaved, Errc::invalid_config,
               "--virtual-stages " << virtual_stages << " needs --schedule interleaved (got "
                                   << schedule_kind_name(kind) << ")");
  // The schedule is a list of about 4 actions per micro-batch and chunk, built each run.
  DTRAIN_CHECK(static_cast<long long>(micro_batches) * virtual_stages <= kMaxPipelineMicroSteps,
               Errc::invalid_config,
               "the pipeline would run " << micro_batches
                   << " micro-batches a step (x --virtual-stages " << virtual_stages
                   << "); at most " << kMaxPipelineMicroSteps
                   << ": a smaller --global-batch or a larger --micro-batch");
  DTRAIN_CHECK(kind != ScheduleKind::interleaved || micro_batches % stages == 0,
               Errc::invalid_config,
               "--schedule interleaved needs the micro-batches per step ("
                   << micro_batches << ") to be a multiple of --pp (" << stages << ")");
}

namespace pp {

int interleaved_micro_batch(int stages, int virtual_stages, int k) {
  const int group = stages * virtual_stages;
  return (k / group) * stages + (k % group) % stages;
}

int interleaved_chunk(int stages, int virtual_stages, int k, bool forward) {
  const int chunk = (k % (stages * virtual_stages)) / stages;
  return forward ? chunk : virtual_stages - 1 - chunk;
}

int interleaved_warmup(int stages, int stage, int micro_batches, int virtual_stages) {
  // Megatron's count. Unlike Megatron, M == N gets no all-forward special case: the
  // simulation in the unit tests shows the steady phase runs as well there, with fewer
  // activations kept.
  return std::min(micro_batches * virtual_stages,
                  (stages - stage - 1) * 2 + (virtual_stages - 1) * stages);
}

namespace {

struct Compute {
  bool forward;
  int micro_batch;
  int chunk;
};

std::vector<Compute> compute_order(ScheduleKind kind, int N, int stage, int M, int V) {
  std::vector<Compute> order;
  order.reserve(2 * static_cast<std::size_t>(M) * static_cast<std::size_t>(V));
  switch (kind) {
    case ScheduleKind::gpipe:
      for (int m = 0; m < M; ++m) order.push_back({true, m, 0});
      for (int m = 0; m < M; ++m) order.push_back({false, m, 0});
      break;
    case ScheduleKind::one_f_one_b: {
      const int warmup = std::min(N - stage - 1, M);
      for (int m = 0; m < warmup; ++m) order.push_back({true, m, 0});
      for (int m = warmup; m < M; ++m) {
        order.push_back({true, m, 0});
        order.push_back({false, m - warmup, 0});
      }
      for (int m = M - warmup; m < M; ++m) order.push_back({false, m, 0});
      break;
    }
    case ScheduleKind::interleaved: {
      const int total = M * V;
      const int warmup = interleaved_warmup(N, stage, M, V);
      auto fwd = [&](int k) {
        order.push_back({true, interleaved_micro_batch(N, V, k), interleaved_chunk(N, V, k, true)});
      };
      auto bwd = [&](int k) {
        order.push_back(
            {false, interleaved_micro_batch(N, V, k), interleaved_chunk(N, V, k, false)});
      };
      for (int k = 0; k < warmup; ++k) fwd(k);
      for (int k = 0; k < total - warmup; ++k) {
        fwd(k + warmup);
        bwd(k);
      }
      for (int k = total - warmup; k < total; ++k) bwd(k);
      break;
    }
  }
  return order;
}

}  // namespace
}  // namespace pp

namespace {
void validate_stage(ScheduleKind kind, int stages, int stage, int micro_batches, int virtual_stages) {
  validate_schedule(kind, stages, micro_batches, virtual_stages);
  DTRAIN_CHECK(stage >= 0 && stage < stages, Errc::invalid_argument,
               "pipeline stage " << stage << " out of range [0, " << stages << ")");
}
}  // namespace

std::vector<PipelineAction> build_schedule(ScheduleKind kind, int stages, int stage,
                                           int micro_batches, int virtual_stages) {
  validate_stage(kind, stages, stage, micro_batches, virtual_stages);
  const int N = stages, V = virtual_stages;
  std::vector<PipelineAction> actions;
  actions.reserve(4 * static_cast<std::size_t>(micro_batches) * static_cast<std::size_t>(V));
  // Neighbours on this rank exchange in memory: only other ranks get actions.
  auto remote = [&](const pp::ChunkLocation& at) { return at.stage >= 0 && at.stage != stage; };
  for (const auto& c : pp::compute_order(kind, N, stage, micro_batches, V)) {
    const auto prev = pp::previous_piece(N, V, stage, c.chunk);
    const auto next = pp::next_piece(N, V, stage, c.chunk);
    if (c.forward) {
      if (remote(prev))
        actions.push_back({ActionType::recv_activation, c.micro_batch, c.chunk, prev.stage,
                           prev.chunk});
      actions.push_back({ActionType::forward, c.micro_batch, c.chunk, -1, -1});
      if (remote(next))
        actions.push_back({ActionType::send_activation, c.micro_batch, c.chunk, next.stage,
                           next.chunk});
    } else {
      if (remote(next))
        actions.push_back({ActionType::recv_grad, c.micro_batch, c.chunk, next.stage,
                           next.chunk});
      actions.push_back({ActionType::backward, c.micro_batch, c.chunk, -1, -1});
      if (remote(prev))
        actions.push_back({ActionType::send_grad, c.micro_batch, c.chunk, prev.stage,
                           prev.chunk});
    }
  }
  return actions;
}

int max_in_flight(ScheduleKind kind, int stages, int stage, int micro_batches,
                  int virtual_stages) {
  validate_stage(kind, stages, stage, micro_batches, virtual_stages);
  switch (kind) {
    case ScheduleKind::gpipe: return micro_batches;
    case ScheduleKind::one_f_one_b: return std::min(micro_batches, stages - stage);
    case ScheduleKind::interleaved: {
      const int total = micro_batches * virtual_stages;
      return std::min(total, pp::interleaved_warmup(stages, stage, micro_batches,
                                                    virtual_stages) + 1);
    }
  }
  return micro_batches * virtual_stages;
}

std::vector<int> chunk_slots(ScheduleKind kind, int stages, int stage, int micro_batches,
                             int virtual_stages) {
  std::vector<int> slots(static_cast<std::size_t>(virtual_stages), 0);
  std::vector<int> live(slots.size(), 0);
  for (const PipelineAction& a : build_schedule(kind, stages, stage, micro_batches,
                                                virtual_stages)) {
    const auto c = static_cast<std::size_t>(a.chunk);
    if (a.type == ActionType::forward) slots[c] = std::max(slots[c], ++live[c]);
    if (a.type == ActionType::backward) --live[c];
  }
  return slots;
}

double bubble_fraction(ScheduleKind kind, int stages, int micro_batches, int virtual_stages) {
  validate_schedule(kind, stages, micro_batches, virtual_stages);
  const double N = stages;
  const double M = kind == ScheduleKind::interleaved
                       ? static_cast<double>(micro_batches) * virtual_stages
                       : micro_batches;
  return (N - 1) / (M + N - 1);
}

}  // namespace dtrain::parallel
