// Pipeline parallelism against the single-process model: every rank also builds the whole
// model, and both take the same plain SGD steps. Losses (from the last stage) match per
// step, and gradients match by name, for gpipe and 1f1b, with PP = world or PP x DP.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
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
  c.layers = 4;
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

void run(ScheduleKind kind, int pp) {
  Communicator& w = test::world();
  SCOPED_TRACE(std::string(schedule_kind_name(kind)) + " pp=" + std::to_string(pp));
  GridShape shape;
  shape.pp = pp;
  ProcessGrid grid(w, shape);
  const GptConfig cfg = tiny();
  const int B = 2, T = cfg.seq_len, M = 4, steps = 20, n = B * T;
  const int DP = grid.dp_size();
  const float lr = 0.05f;
  Device& dev = cpu_device();

  const auto split = partition_layers(cfg.layers, pp);
  const int s = grid.pp_rank();
  GptModel stage(cfg, dev, 3, B,
                 GptStage{split[s].first, split[s].count, grid.is_first_stage(),
                          grid.is_last_stage()});
  PipelineExecutor exec(stage, grid.pp(), kind, M, B, T);
  GptModel whole(cfg, dev, 3, B);
  std::vector<std::int32_t> tok(n), tgt(n);

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
TEST(Pipeline, InterleavedIsRejectedByTheExecutor) {
  GptModel m(tiny(), cpu_device(), 1, 1);
  try {
    PipelineExecutor e(m, test::world(), ScheduleKind::interleaved, 4, 1, 16);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::not_implemented);
  }
}
