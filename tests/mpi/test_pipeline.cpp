// Pipeline parallelism against the single-process model: every rank also builds the whole
// model, and both take the same plain SGD steps. Losses (from the last stage) match per
// step, and gradients match by name, for gpipe, 1f1b and interleaved (2 chunks per rank),
// with PP = world or PP x DP. The bubble timers count time blocked on messages.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "dtrain/comm/process_grid.hpp"
#include "dtrain/core/error.hpp"
#include "dtrain/device/device.hpp"
#include "dtrain/nn/gpt.hpp"
#include "dtrain/parallel/pipeline.hpp"
#include "dtrain/parallel/pipeline_partition.hpp"
#include "test_support.hpp"

using namespace dtrain;
using namespace dtrain::parallel;

namespace {

GptConfig tiny() {
  GptConfig c;
  c.layers = 8;
  c.heads = 2;
  c.d_model = 32;
  c.seq_len = 16;
  c.vocab = 50;
  return c;
}

// Deterministic micro-batch mb of step `step` for data-parallel replica r.
void fill(int step, int r, int mb, int n, int vocab, std::int32_t* tok, std::int32_t* tgt) {
  for (int i = 0; i < n; ++i) {
    const long k = 1000L * step + 100L * r + 10L * mb + i;
    tok[i] = static_cast<std::int32_t>((k * 7 + 3) % vocab);
    tgt[i] = static_cast<std::int32_t>((k * 13 + 5) % vocab);
  }
}

void sgd(ParameterStore& ps, float lr) {
  Device& d = ps.device();
  std::vector<float> p(ps.numel()), g(ps.numel());
  d.copy(p.data(), ps.params(), ps.bytes(), CopyKind::device_to_host);
  d.copy(g.data(), ps.grads(), ps.bytes(), CopyKind::device_to_host);
  for (std::size_t i = 0; i < p.size(); ++i) p[i] -= lr * g[i];
  d.copy(ps.params(), p.data(), ps.bytes(), CopyKind::host_to_device);
}

// This rank's chunks for a schedule: chunk c = piece c*pp + stage, slots as it needs.
std::vector<GptStage> stage_chunks(const GptConfig& cfg, const ProcessGrid& grid,
                                   ScheduleKind kind, int M, int V) {
  const int pp = grid.pp_size(), s = grid.pp_rank();
  const auto split = partition_layers(cfg.layers, pp * V);
  const auto slots = chunk_slots(kind, pp, s, M, V);
  std::vector<GptStage> chunks;
  for (int c = 0; c < V; ++c)
    chunks.push_back({split[c * pp + s].first, split[c * pp + s].count, s == 0 && c == 0,
                      s == pp - 1 && c == V - 1, slots[c]});
  return chunks;
}

void run(ScheduleKind kind, int pp, int V = 1) {
  Communicator& w = test::world();
  SCOPED_TRACE(std::string(schedule_kind_name(kind)) + " pp=" + std::to_string(pp) +
               " V=" + std::to_string(V));
  GridShape shape;
  shape.pp = pp;
  ProcessGrid grid(w, shape);
  const GptConfig cfg = tiny();
  const int B = 2, T = cfg.seq_len, M = 4, steps = 20, n = B * T;
  const int DP = grid.dp_size();
  const float lr = 0.02f;  // small enough that rounding differences do not grow over 20 steps
  Device& dev = cpu_device();

  GptModel stage(cfg, dev, 3, B, stage_chunks(cfg, grid, kind, M, V));
  PipelineExecutor exec(stage, grid.pp(), kind, M, B, T, V);
  GptModel whole(cfg, dev, 3, B);
  std::vector<std::int32_t> tok(n), tgt(n);

  // What the executor holds: the micro-batch's ids on the end stages, an input gradient
  // being sent per slot of each chunk with a previous piece (not the embedding's chunk), and
  // the output gradient received.
  const bool first = grid.is_first_stage(), last = grid.is_last_stage();
  const std::size_t act = stage.boundary_floats(B, T) * sizeof(float);
  const auto slots = chunk_slots(kind, pp, grid.pp_rank(), M, V);
  std::size_t held = first || last ? 2 * n * sizeof(std::int32_t) : 0;
  for (int c = 0; c < V; ++c)
    if (!(first && c == 0)) held += act * static_cast<std::size_t>(slots[c]);
  if (!(last && V == 1)) held += act;
  EXPECT_EQ(exec.buffer_bytes(), held);

  for (int step = 0; step < steps; ++step) {
    // reference: every replica's micro-batches, mean loss over all of them
    whole.parameters().zero_grads();
    double ref_loss = 0;
    for (int r = 0; r < DP; ++r)
      for (int mb = 0; mb < M; ++mb) {
        fill(step, r, mb, n, cfg.vocab, tok.data(), tgt.data());
        ref_loss += whole.forward(tok.data(), tgt.data(), B, T);
        whole.backward(1.0f / (M * DP));
      }
    ref_loss /= M * DP;

    stage.parameters().zero_grads();
    double loss = exec.run_step(
        [&](int mb, std::int32_t* tk, std::int32_t* tg) {
          fill(step, grid.dp_rank(), mb, n, cfg.vocab, tk, tg);
        },
        1.0f / (M * DP));
    loss /= M;
    ASSERT_GE(exec.last_idle_seconds(), 0.0);
    ASSERT_LE(exec.last_idle_seconds(), exec.last_step_seconds());
    ParameterStore& ps = stage.parameters();
    grid.dp().all_reduce(ps.grads(), ps.grads(), ps.numel(), DType::f32, ReduceOp::sum);
    grid.dp().all_reduce(&loss, &loss, 1, DType::f64, ReduceOp::avg);
    grid.pp().broadcast(&loss, &loss, 1, DType::f64, pp - 1);
    if (const ParamInfo* wte = ps.find("wte"); wte && grid.in_embedding_group())
      grid.embedding().all_reduce(ps.grad(*wte), ps.grad(*wte), wte->numel, DType::f32,
                                  ReduceOp::sum);
    ASSERT_NEAR(loss, ref_loss, 1e-5 * std::fabs(ref_loss)) << "step " << step;

    if (step == 0)  // gradients by name
      for (const ParamInfo& p : ps) {
        const ParamInfo& q = whole.parameters().at(p.name);
        ASSERT_EQ(p.numel, q.numel);
        std::vector<float> a(p.numel), b(p.numel);
        dev.copy(a.data(), ps.grad(p), p.numel * 4, CopyKind::device_to_host);
        dev.copy(b.data(), whole.parameters().grad(q), p.numel * 4, CopyKind::device_to_host);
        for (std::size_t i = 0; i < a.size(); ++i)
          ASSERT_NEAR(a[i], b[i], 1e-5f * (1e-2f + std::fabs(b[i]))) << p.name << "[" << i << "]";
      }
    sgd(ps, lr);
    sgd(whole.parameters(), lr);
  }
}

}  // namespace

TEST(Pipeline, GpipeMatchesSingleProcess) {
  for (int pp : {2, 4})
    if (test::world().size() % pp == 0) run(ScheduleKind::gpipe, pp);
}
TEST(Pipeline, OneFOneBMatchesSingleProcess) {
  for (int pp : {2, 4})
    if (test::world().size() % pp == 0) run(ScheduleKind::one_f_one_b, pp);
}
TEST(Pipeline, InterleavedMatchesSingleProcess) {
  for (int pp : {2, 4})
    if (test::world().size() % pp == 0) run(ScheduleKind::interleaved, pp, 2);
}

// Pipeline-only forward (evaluation) through every chunk equals the whole model's loss.
TEST(Pipeline, ForwardOnlyThroughChunks) {
  Communicator& w = test::world();
  GridShape shape;
  shape.pp = w.size();
  ProcessGrid grid(w, shape);
  const GptConfig cfg = tiny();
  const int B = 2, T = cfg.seq_len, n = B * T;
  for (int V : {1, 2}) {
    SCOPED_TRACE("V=" + std::to_string(V));
    const ScheduleKind kind = V == 1 ? ScheduleKind::one_f_one_b : ScheduleKind::interleaved;
    GptModel stage(cfg, cpu_device(), 5, B, stage_chunks(cfg, grid, kind, w.size(), V));
    PipelineExecutor exec(stage, grid.pp(), kind, w.size(), B, T, V);
    GptModel whole(cfg, cpu_device(), 5, B);
    std::vector<std::int32_t> tok(n), tgt(n);
    fill(7, 0, 0, n, cfg.vocab, tok.data(), tgt.data());
    const double loss = exec.forward_only(tok.data(), tgt.data());
    const double want = whole.forward(tok.data(), tgt.data(), B, T);
    if (grid.is_last_stage()) EXPECT_NEAR(loss, want, 1e-6 * want);
    else EXPECT_EQ(loss, 0.0);
  }
}

// The bubble timer counts time blocked on a receive: the last stage's first action waits
// for the first stage's output, which it cannot get before the first stage starts.
TEST(Pipeline, IdleTimerCountsBlockedReceives) {
  Communicator& w = test::world();
  GridShape shape;
  shape.pp = w.size();
  ProcessGrid grid(w, shape);
  const GptConfig cfg = tiny();
  const int B = 1, T = cfg.seq_len, M = 2;
  GptModel stage(cfg, cpu_device(), 5, B, stage_chunks(cfg, grid, ScheduleKind::gpipe, M, 1));
  PipelineExecutor exec(stage, grid.pp(), ScheduleKind::gpipe, M, B, T);
  const double delay = 2.0;  // long enough that the last stage starts waiting well within it
  w.barrier();
  if (grid.is_first_stage()) std::this_thread::sleep_for(std::chrono::duration<double>(delay));
  exec.run_step(
      [&](int mb, std::int32_t* tk, std::int32_t* tg) {
        fill(0, 0, mb, B * T, cfg.vocab, tk, tg);
      },
      1.0f);
  EXPECT_LE(exec.last_idle_seconds(), exec.last_step_seconds());
  if (grid.is_last_stage()) EXPECT_GE(exec.last_idle_seconds(), 0.25 * delay);
}

// A model that does not fit the schedule is refused before any message.
TEST(Pipeline, ModelMustFitTheSchedule) {
  Communicator& w = test::world();
  GridShape shape;
  shape.pp = w.size();
  ProcessGrid grid(w, shape);
  const GptConfig cfg = tiny();
  auto code_of = [&](const std::vector<GptStage>& chunks, ScheduleKind kind, int V,
                     int micro_batch = 1, int seq_len = 0) {
    if (seq_len == 0) seq_len = cfg.seq_len;
    GptModel m(cfg, cpu_device(), 1, 1, chunks);
    try {
      PipelineExecutor e(m, grid.pp(), kind, 2 * w.size(), micro_batch, seq_len, V);
    } catch (const Error& e) {
      return e.code();
    }
    return Errc::ok;
  };
  // gpipe keeps every micro-batch: one slot is too few
  auto chunks = stage_chunks(cfg, grid, ScheduleKind::gpipe, 2 * w.size(), 1);
  chunks[0].slots = 1;
  EXPECT_EQ(code_of(chunks, ScheduleKind::gpipe, 1), Errc::invalid_argument);
  // one chunk where the schedule runs two
  chunks = stage_chunks(cfg, grid, ScheduleKind::one_f_one_b, 2 * w.size(), 1);
  EXPECT_EQ(code_of(chunks, ScheduleKind::interleaved, 2), Errc::invalid_argument);
  EXPECT_EQ(code_of(chunks, ScheduleKind::one_f_one_b, 1), Errc::ok);
  // micro-batches the model has no room for: refused here, on every rank, not in stage 0's
  // first forward (the other stages would wait for its activations)
  EXPECT_EQ(code_of(chunks, ScheduleKind::one_f_one_b, 1, 2), Errc::invalid_argument);
  EXPECT_EQ(code_of(chunks, ScheduleKind::one_f_one_b, 1, 1, cfg.seq_len + 1), Errc::invalid_argument);
}
