// GPT split into pipeline stages, chained in one process: each stage's parameters start as
// the whole model's (same names), and passing the boundary activations forward and their
// gradients backward reproduces the whole model's loss and every gradient.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "dtrain/core/error.hpp"
#include "dtrain/device/device.hpp"
#include "dtrain/nn/gpt.hpp"
#include "dtrain/parallel/pipeline_partition.hpp"

using namespace dtrain;

namespace {

GptConfig tiny(bool tied) {
  GptConfig c;
  c.layers = 5;
  c.heads = 2;
  c.d_model = 16;
  c.seq_len = 8;
  c.vocab = 37;
  c.tie_embeddings = tied;
  return c;
}

std::vector<float> host(const ParameterStore& ps, const ParamInfo& p, bool grad) {
  std::vector<float> v(p.numel);
  const float* src = grad ? ps.grad(p) : ps.param(p);
  ps.device().copy(v.data(), src, v.size() * sizeof(float), CopyKind::device_to_host);
  return v;
}

void check_stages(bool tied, int stages) {
  SCOPED_TRACE(std::string(tied ? "tied" : "untied") + " stages=" + std::to_string(stages));
  const GptConfig cfg = tiny(tied);
  const int B = 2, T = cfg.seq_len, N = B * T;
  std::vector<std::int32_t> tokens(N), targets(N);
  for (int i = 0; i < N; ++i) {
    tokens[i] = (7 * i + 3) % cfg.vocab;
    targets[i] = (5 * i + 1) % cfg.vocab;
  }
  Device& dev = cpu_device();
  GptModel whole(cfg, dev, 11, B);
  whole.parameters().zero_grads();
  const float loss = whole.forward(tokens.data(), targets.data(), B, T);
  whole.backward(0.5f);

  std::vector<std::unique_ptr<GptModel>> parts;
  const auto split = parallel::partition_layers(cfg.layers, stages);
  for (int s = 0; s < stages; ++s) {
    GptStage st{split[s].first, split[s].count, s == 0, s == stages - 1};
    parts.push_back(std::make_unique<GptModel>(cfg, dev, 11, B, st));
    parts.back()->parameters().zero_grads();
  }
  float stage_loss = 0;
  for (int s = 0; s < stages; ++s) {
    const float* in = s == 0 ? nullptr : parts[s - 1]->stage_output();
    stage_loss = parts[s]->forward_stage(tokens.data(), targets.data(), in, B, T);
  }
  EXPECT_EQ(stage_loss, loss);
  for (int s = stages - 1; s >= 0; --s) {
    const float* dout = s == stages - 1 ? nullptr : parts[s + 1]->input_grad();
    parts[s]->backward_stage(0.5f, dout);
  }

  // Every parameter of the whole model lives on exactly one stage (wte, when tied, on the
  // first and the last, whose gradients add up to the whole model's).
  const ParameterStore& ref = whole.parameters();
  for (const ParamInfo& p : ref) {
    std::vector<float> value, grad;
    int holders = 0;
    for (auto& m : parts) {
      const ParamInfo* q = m->parameters().find(p.name);
      if (!q) continue;
      ++holders;
      ASSERT_EQ(q->shape, p.shape) << p.name;
      const auto v = host(m->parameters(), *q, false);
      const auto g = host(m->parameters(), *q, true);
      if (value.empty()) {
        value = v;
        grad = g;
      } else {
        EXPECT_EQ(v, value) << p.name << ": copies differ";
        for (std::size_t i = 0; i < g.size(); ++i) grad[i] += g[i];
      }
    }
    EXPECT_EQ(holders, p.name == "wte" && tied && stages > 1 ? 2 : 1) << p.name;
    EXPECT_EQ(value, host(ref, p, false)) << p.name;
    const auto want = host(ref, p, true);
    for (std::size_t i = 0; i < want.size(); ++i)
      ASSERT_NEAR(grad[i], want[i], 1e-6f * (1 + std::fabs(want[i]))) << p.name << "[" << i << "]";
  }
  // The grad-ready ranges still tile each stage's arena.
  for (auto& m : parts) {
    std::size_t covered = 0;
    for (const auto& r : m->grad_ready_ranges()) covered += r.second - r.first;
    EXPECT_EQ(covered, m->parameters().numel());
  }
}

}  // namespace

TEST(GptStages, ChainedStagesMatchTheWholeModel) {
  for (bool tied : {true, false})
    for (int stages : {1, 2, 3, 5}) check_stages(tied, stages);
}

TEST(GptStages, BadLayerRangeIsAConfigError) {
  const GptConfig cfg = tiny(true);
  for (GptStage st : {GptStage{4, 2, false, true}, GptStage{0, 0, true, false},
                      GptStage{-1, 2, true, false}}) {
    try {
      GptModel m(cfg, cpu_device(), 1, 1, st);
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), Errc::invalid_config);
    }
  }
}
