// GPT split into pipeline stages, chained in one process: each stage's parameters start as
// the whole model's (same names), and passing the boundary activations forward and their
// gradients backward reproduces the whole model's loss and every gradient; so do several
// micro-batches held in activation slots and several layer chunks held in one model.
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

namespace {

void fill_batch(int mb, int N, int vocab, std::vector<std::int32_t>& tok,
                std::vector<std::int32_t>& tgt) {
  for (int i = 0; i < N; ++i) {
    tok[i] = (7 * i + 3 * mb + 1) % vocab;
    tgt[i] = (5 * i + 11 * mb + 2) % vocab;
  }
}

// Gradients of two models, compared by name: `got` may hold a part of `want`'s parameters.
void expect_same_grads(const ParameterStore& got, const ParameterStore& want, float rel,
                       const std::string& skip = "") {
  for (const ParamInfo& p : got) {
    if (p.name == skip) continue;
    const auto g = host(got, p, true);
    const auto w = host(want, want.at(p.name), true);
    for (std::size_t i = 0; i < w.size(); ++i)
      ASSERT_NEAR(g[i], w[i], rel * (1 + std::fabs(w[i]))) << p.name << "[" << i << "]";
  }
}

}  // namespace

// Activation slots: K micro-batches go forward into K slots, then backward in another
// order; no forward is recomputed, and the losses and accumulated gradients are those of
// K forward+backward pairs on a one-slot model.
TEST(GptStages, SlotsKeepEveryMicroBatchUntilItsBackward) {
  const GptConfig cfg = tiny(true);
  const int B = 2, T = cfg.seq_len, N = B * T, K = 3;
  std::vector<std::int32_t> tok(N), tgt(N);
  Device& dev = cpu_device();
  GptModel one(cfg, dev, 11, B);
  GptStage all;
  all.slots = K;
  GptModel many(cfg, dev, 11, B, all);
  EXPECT_GT(many.activation_bytes(), one.activation_bytes());
  one.parameters().zero_grads();
  many.parameters().zero_grads();
  const int order[K] = {1, 2, 0};  // backward order
  std::vector<float> want(K), got(K);
  for (int k : order) {
    fill_batch(k, N, cfg.vocab, tok, tgt);
    want[k] = one.forward(tok.data(), tgt.data(), B, T);
    one.backward(0.25f);
  }
  for (int k = 0; k < K; ++k) {
    fill_batch(k, N, cfg.vocab, tok, tgt);
    got[k] = many.forward_stage(tok.data(), tgt.data(), nullptr, B, T, 0, k);
  }
  for (int k : order) many.backward_stage(0.25f, nullptr, 0, k);
  EXPECT_EQ(got, want);
  expect_same_grads(many.parameters(), one.parameters(), 0.0f);  // same order: bit-identical
}

// Interleaved layout: two "ranks" of two chunks each (pieces 0, 2 and 1, 3), chained
// s0c0 -> s1c0 -> s0c1 -> s1c1 for two micro-batches in two slots, reproduce the whole model.
TEST(GptStages, ChunksInOneModelMatchTheWholeModel) {
  for (bool tied : {true, false}) {
    SCOPED_TRACE(tied ? "tied" : "untied");
    const GptConfig cfg = tiny(tied);  // 5 layers -> pieces of 2, 1, 1, 1
    const int B = 2, T = cfg.seq_len, N = B * T, M = 2;
    const auto split = parallel::partition_layers(cfg.layers, 4);
    Device& dev = cpu_device();
    std::vector<std::unique_ptr<GptModel>> rank;
    for (int s = 0; s < 2; ++s) {
      std::vector<GptStage> chunks;
      for (int c = 0; c < 2; ++c) {
        const auto& r = split[c * 2 + s];
        chunks.push_back({r.first, r.count, s == 0 && c == 0, s == 1 && c == 1, M});
      }
      rank.push_back(std::make_unique<GptModel>(cfg, dev, 11, B, chunks));
      rank.back()->parameters().zero_grads();
      EXPECT_EQ(rank.back()->chunks(), 2);
    }
    // parameters named by global layer, in layer order in the arena
    EXPECT_NE(rank[0]->parameters().find("h.3.ln_1.weight"), nullptr);
    EXPECT_EQ(rank[0]->parameters().find("h.2.ln_1.weight"), nullptr);
    EXPECT_LT(rank[1]->parameters().at("h.2.ln_1.weight").offset,
              rank[1]->parameters().at("h.4.ln_1.weight").offset);

    GptModel whole(cfg, dev, 11, B);
    whole.parameters().zero_grads();
    std::vector<std::int32_t> tok(N), tgt(N);
    const int pieces[4][2] = {{0, 0}, {1, 0}, {0, 1}, {1, 1}};  // (rank, chunk) in order
    for (int mb = 0; mb < M; ++mb) {
      fill_batch(mb, N, cfg.vocab, tok, tgt);
      const float want = whole.forward(tok.data(), tgt.data(), B, T);
      whole.backward(0.5f);
      const float* in = nullptr;
      float loss = 0;
      for (const auto& p : pieces) {
        GptModel& m = *rank[p[0]];
        loss = m.forward_stage(tok.data(), tgt.data(), in, B, T, p[1], mb);
        in = m.stage_output();
      }
      EXPECT_EQ(loss, want) << "micro-batch " << mb;
    }
    for (int mb = 0; mb < M; ++mb) {
      const float* dout = nullptr;
      for (int i = 3; i >= 0; --i) {
        GptModel& m = *rank[pieces[i][0]];
        m.backward_stage(0.5f, dout, pieces[i][1], mb);
        dout = m.input_grad();
      }
    }
    for (auto& m : rank) {
      expect_same_grads(m->parameters(), whole.parameters(), 1e-6f, "wte");
      std::size_t covered = 0;  // the grad-ready ranges tile the arena
      for (const auto& r : m->grad_ready_ranges()) covered += r.second - r.first;
      EXPECT_EQ(covered, m->parameters().numel());
    }
    // wte: the embedding's gradient plus, when tied, the head copy's
    std::vector<float> wte = host(rank[0]->parameters(), rank[0]->parameters().at("wte"), true);
    if (tied) {
      const auto copy = host(rank[1]->parameters(), rank[1]->parameters().at("wte"), true);
      for (std::size_t i = 0; i < wte.size(); ++i) wte[i] += copy[i];
    }
    const auto want = host(whole.parameters(), whole.parameters().at("wte"), true);
    for (std::size_t i = 0; i < want.size(); ++i)
      ASSERT_NEAR(wte[i], want[i], 1e-6f * (1 + std::fabs(want[i]))) << "wte[" << i << "]";
  }
}

TEST(GptStages, BadChunksAreConfigErrors) {
  const GptConfig cfg = tiny(true);
  using Chunks = std::vector<GptStage>;
  for (const Chunks& chunks :
       {Chunks{{2, 1, false, false}, {0, 1, true, false}},   // out of layer order
        Chunks{{0, 2, true, false}, {1, 1, false, false}},   // overlapping
        Chunks{{0, 1, false, false}, {2, 1, true, false}},   // embedding not on chunk 0
        Chunks{{0, 1, false, true}, {2, 1, false, false}},   // head not on the last chunk
        Chunks{{0, 1, true, false, 0}},                      // no activation slot
        Chunks{}}) {
    try {
      GptModel m(cfg, cpu_device(), 1, 1, chunks);
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), Errc::invalid_config);
    }
  }
}
