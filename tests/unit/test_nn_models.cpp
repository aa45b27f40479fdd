// GPT and MLP models: whole-model finite-difference gradient checks (fp32, tiny configs),
// initialisation, determinism, padded vocabulary, config validation.
#include <gtest/gtest.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "device/cpu/cpu_device.hpp"
#include "dtrain/core/buffer.hpp"
#include "dtrain/core/env.hpp"
#include "dtrain/core/error.hpp"
#include "dtrain/core/rng.hpp"
#include "dtrain/device/device.hpp"
#include "dtrain/nn/gpt.hpp"
#include "dtrain/nn/mlp.hpp"
#include "fd_check.hpp"

using namespace dtrain;
using std::vector;

namespace {

GptConfig tiny_gpt(bool tied = true) {
  GptConfig c;
  c.layers = 2;
  c.heads = 2;
  c.d_model = 8;
  c.seq_len = 4;
  c.vocab = 11;
  c.tie_embeddings = tied;
  return c;
}

// 2 layers, 2 heads of 16, vocabulary 100.
GptConfig small_gpt(int seq_len) {
  GptConfig c;
  c.layers = 2;
  c.heads = 2;
  c.d_model = 32;
  c.seq_len = seq_len;
  c.vocab = 100;
  return c;
}

vector<std::int32_t> tokens_for(int n, int vocab, std::uint32_t seed) {
  vector<std::int32_t> t(n);
  std::uint32_t s = seed;
  for (auto& x : t) {
    s = s * 1664525u + 1013904223u;
    x = static_cast<std::int32_t>((s >> 8) % static_cast<std::uint32_t>(vocab));
  }
  return t;
}

// Replace the GPT-2 init by larger random values so every gradient is sizeable and the
// non-linearities matter (LN weights around 1). Padding rows stay zero.
void randomise(ParameterStore& ps, std::uint64_t seed) {
  for (const ParamInfo& p : ps) {
    const bool ln_weight = p.name.find("ln_") != std::string::npos &&
                           p.name.find(".weight") != std::string::npos;
    ps.init_normal(p, seed, ln_weight ? 1.0f : 0.0f, 0.4f);
  }
}

struct FdSummary {
  std::size_t checked = 0, loose = 0;
  double max_rel = 0;
};

// fp32 central differences over EVERY logical parameter element. Each element must satisfy
// |a - n| <= 2e-2 * max(|a|,|n|) + 5e-4; and 90% must be within 1e-2 relative (for gradients
// large enough to measure in fp32).
template <class Model, class LossFn>
FdSummary fd_whole_model(Model& model, LossFn loss_fn, float h) {
  ParameterStore& ps = model.parameters();
  vector<float> analytic(ps.grads(), ps.grads() + ps.numel());
  FdSummary s;
  vector<double> rels;
  for (const ParamInfo& p : ps) {
    float* w = ps.param(p);
    for (std::size_t i = 0; i < p.local_numel(); ++i) {
      const float saved = w[i];
      w[i] = saved + h;
      const double fp = loss_fn();
      w[i] = saved - h;
      const double fm = loss_fn();
      w[i] = saved;
      const double num = (fp - fm) / (2.0 * h);
      const double a = analytic[p.offset + i];
      const double err = std::abs(a - num);
      EXPECT_LE(err, 2e-2 * std::max(std::abs(a), std::abs(num)) + 5e-4)
          << p.name << "[" << i << "] analytic " << a << " numerical " << num;
      if (std::max(std::abs(a), std::abs(num)) > 1e-2) {
        const double rel = err / std::max(std::abs(a), std::abs(num));
        rels.push_back(rel);
        s.max_rel = std::max(s.max_rel, rel);
      }
      ++s.checked;
    }
  }
  std::size_t tight = 0;
  for (double r : rels) tight += r <= 1e-2;
  s.loose = rels.size() - tight;
  EXPECT_GE(tight, rels.size() * 9 / 10) << "only " << tight << " of " << rels.size()
                                         << " gradients within 1e-2";
  EXPECT_GE(rels.size(), s.checked / 2) << "too few measurable gradients";
  return s;
}

double mean_loss_double(const GptModel& m, int n) {
  double s = 0;
  for (int i = 0; i < n; ++i) s += m.losses()[i];
  return s / n;
}

// The largest gradient of a, and the largest difference of b's gradients from a's (NaN
// where one is: a bound on it then fails).
struct GradientGap {
  double scale = 0, difference = 0;
};
GradientGap gradient_gap(const ParameterStore& a, const ParameterStore& b) {
  GradientGap g;
  for (std::size_t i = 0; i < a.numel(); ++i) {
    g.scale = std::max(g.scale, static_cast<double>(std::fabs(a.grads()[i])));
    const double d = std::fabs(static_cast<double>(a.grads()[i]) - b.grads()[i]);
    if (std::isnan(d)) return {g.scale, d};
    g.difference = std::max(g.difference, d);
  }
  return g;
}

// One forward and backward of both models on the same batch: the losses must be the same
// bits; returns how far their gradients lie apart.
GradientGap same_loss_gradient_gap(GptModel& a, GptModel& b, const std::vector<std::int32_t>& tok,
                                   const std::vector<std::int32_t>& tgt, int B, int T) {
  EXPECT_EQ(float_bits(a.forward(tok.data(), tgt.data(), B, T)),
            float_bits(b.forward(tok.data(), tgt.data(), B, T)));
  a.parameters().zero_grads();
  b.parameters().zero_grads();
  a.backward(1.0f);
  b.backward(1.0f);
  return gradient_gap(a.parameters(), b.parameters());
}

}  // namespace

// ---- configuration ----------------------------------------------------------------------
TEST(GptConfig, BadConfigsThrowClearErrors) {
  auto expect_invalid = [](GptConfig c, const std::string& fragment) {
    try {
      c.validate();
      ADD_FAILURE() << "no error for " << fragment;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), Errc::invalid_config);
      EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
    }
  };
  GptConfig c;
  c.heads = 3;
  expect_invalid(c, "heads (3) must divide d-model (256)");
  c = GptConfig{};
  c.seq_len = 0;
  expect_invalid(c, "seq-len must be positive");
  c = GptConfig{};
  c.layers = 0;
  expect_invalid(c, "layers must be positive");
  c = GptConfig{};
  c.vocab = 0;
  expect_invalid(c, "vocab");
  c = GptConfig{};
  c.d_model = -4;
  expect_invalid(c, "d-model must be positive");
  c = GptConfig{};
  c.d_model = c.heads << 27;  // past 2^28: 4 d-model would pass a GEMM's int
  expect_invalid(c, "d-model must be at most 2^28");
  c = GptConfig{};
  c.vocab = (1 << 30) + 1;
  expect_invalid(c, "vocab must be at most 2^30");
  EXPECT_NO_THROW(GptConfig{}.validate());
  EXPECT_THROW(GptModel(tiny_gpt(), cpu_device(), 1, 0), Error);
  try {  // refused before any allocation: the passes count a micro-batch's tokens in an int
    GptModel(tiny_gpt(), cpu_device(), 1, INT_MAX / 2);
    ADD_FAILURE() << "a micro-batch of more than INT_MAX tokens was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::invalid_config);
    EXPECT_NE(std::string(e.what()).find("tokens exceed"), std::string::npos) << e.what();
  }
  GptConfig bad = tiny_gpt();
  bad.heads = 3;
  EXPECT_THROW(GptModel(bad, cpu_device(), 1, 1), Error);
}

TEST(MlpConfig, BadConfigsThrow) {
  EXPECT_THROW(MlpConfig{{4}}.validate(), Error);
  EXPECT_THROW((MlpConfig{{4, 0, 3}}.validate()), Error);
  EXPECT_THROW((MlpConfig{{4, 1}}.validate()), Error);
  EXPECT_NO_THROW((MlpConfig{{4, 8, 3}}.validate()));
}

// ---- parameters -------------------------------------------------------------------------
TEST(GptModel, ParameterNamesShapesAndArena) {
  GptConfig cfg = tiny_gpt();
  GptModel m(cfg, cpu_device(), 7, 2);
  ParameterStore& ps = m.parameters();
  const vector<std::string> expect = {
      "wte", "wpe", "h.0.ln_1.weight", "h.0.ln_1.bias", "h.0.attn.c_attn.weight",
      "h.0.attn.c_attn.bias", "h.0.attn.c_proj.weight", "h.0.attn.c_proj.bias",
      "h.0.ln_2.weight", "h.0.ln_2.bias", "h.0.mlp.c_fc.weight", "h.0.mlp.c_fc.bias",
      "h.0.mlp.c_proj.weight", "h.0.mlp.c_proj.bias"};
  ASSERT_EQ(ps.size(), 2 + 12 * 2 + 2u);
  for (std::size_t i = 0; i < expect.size(); ++i) EXPECT_EQ(ps[i].name, expect[i]);
  EXPECT_EQ(ps[ps.size() - 1].name, "ln_f.bias");
  EXPECT_EQ(ps.find("lm_head.weight"), nullptr);
  const int C = cfg.d_model, V = cfg.vocab, Vp = cfg.padded_vocab();
  EXPECT_EQ(Vp, 64);
  EXPECT_EQ(ps.at("wte").shape, (vector<std::int64_t>{V, C}));
  EXPECT_EQ(ps.at("wte").storage_shape, (vector<std::int64_t>{Vp, C}));
  EXPECT_EQ(ps.at("wte").local_shape, ps.at("wte").shape);
  EXPECT_EQ(ps.at("wte").slice_offset, (vector<std::int64_t>{0, 0}));
  EXPECT_EQ(ps.at("wpe").shape, (vector<std::int64_t>{cfg.seq_len, C}));
  EXPECT_EQ(ps.at("h.1.attn.c_attn.weight").shape, (vector<std::int64_t>{3 * C, C}));
  EXPECT_EQ(ps.at("h.1.mlp.c_fc.weight").shape, (vector<std::int64_t>{4 * C, C}));
  EXPECT_EQ(ps.at("h.1.mlp.c_proj.weight").shape, (vector<std::int64_t>{C, 4 * C}));
  EXPECT_TRUE(ps.at("wte").decay);
  EXPECT_TRUE(ps.at("h.0.attn.c_attn.weight").decay);
  EXPECT_FALSE(ps.at("h.0.attn.c_attn.bias").decay);
  EXPECT_FALSE(ps.at("h.0.ln_1.weight").decay);
  EXPECT_FALSE(ps.at("ln_f.bias").decay);
  EXPECT_THROW(ps.at("nope"), Error);
  // offsets: registration order, 64-byte aligned, non-overlapping, inside the arena
  std::size_t end = 0;
  for (const ParamInfo& p : ps) {
    EXPECT_EQ(p.offset % ParameterStore::kAlignFloats, 0u) << p.name;
    EXPECT_GE(p.offset, end) << p.name;
    end = p.offset + p.numel;
  }
  EXPECT_LE(end, ps.numel());
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(ps.params()) % 64, 0u);
  const auto stored = [](const ParameterStore& store) {
    std::size_t n = 0;
    for (const ParamInfo& p : store) n += p.numel;
    return n;
  };
  EXPECT_EQ(stored(ps), cfg.parameter_count());

  GptModel untied(tiny_gpt(false), cpu_device(), 7, 2);
  const ParamInfo* head = untied.parameters().find("lm_head.weight");
  ASSERT_NE(head, nullptr);
  EXPECT_EQ(stored(untied.parameters()), tiny_gpt(false).parameter_count());
  EXPECT_EQ(head->shape, (vector<std::int64_t>{V, C}));
}

TEST(GptModel, InitIsKeyedByNameAndLogicalIndex) {
  GptConfig cfg = tiny_gpt();
  const std::uint64_t seed = 1234;
  GptModel m(cfg, cpu_device(), seed, 1);
  ParameterStore& ps = m.parameters();
  const float std_res = static_cast<float>(0.02 / std::sqrt(2.0 * cfg.layers));
  auto expect_rng = [&](const std::string& name, float stddev) {
    const ParamInfo& p = ps.at(name);
    const float* w = ps.param(p);
    for (std::size_t i = 0; i < p.logical_numel(); i += 3) {
      float ref;
      rng::fill_normal(&ref, 1, seed, rng::stream_id(name), i, 0.0f, stddev);
      ASSERT_EQ(w[i], ref) << name << "[" << i << "]";
    }
  };
  expect_rng("wte", 0.02f);
  expect_rng("wpe", 0.02f);
  expect_rng("h.1.attn.c_attn.weight", 0.02f);
  expect_rng("h.0.mlp.c_fc.weight", 0.02f);
  expect_rng("h.0.attn.c_proj.weight", std_res);
  expect_rng("h.1.mlp.c_proj.weight", std_res);
  const ParamInfo& wte = ps.at("wte");
  for (std::size_t i = wte.logical_numel(); i < wte.numel; ++i)
    ASSERT_EQ(ps.param(wte)[i], 0.0f) << "padding row element " << i;
  for (const char* n : {"h.0.ln_1.weight", "ln_f.weight"})
    for (int i = 0; i < cfg.d_model; ++i) EXPECT_EQ(ps.param(ps.at(n))[i], 1.0f);
  for (const char* n : {"h.0.ln_1.bias", "h.1.attn.c_attn.bias", "h.0.mlp.c_proj.bias"})
    for (int i = 0; i < cfg.d_model; ++i) EXPECT_EQ(ps.param(ps.at(n))[i], 0.0f);
  // Initialised again over trained values: every tensor as a fresh model's, biases too.
  for (std::size_t i = 0; i < ps.numel(); ++i) ps.params()[i] += 0.5f;
  m.init_weights(seed);
  GptModel fresh(cfg, cpu_device(), seed, 1);
  for (const ParamInfo& p : ps)
    for (std::size_t i = 0; i < p.logical_numel(); ++i)
      ASSERT_EQ(ps.param(p)[i], fresh.parameters().param(fresh.parameters().at(p.name))[i]) << p.name << "[" << i << "]";
}

// ---- behaviour --------------------------------------------------------------------------
TEST(GptModel, LossAtInitIsLogVocabAndForwardIsDeterministic) {
  const GptConfig cfg = small_gpt(16);
  const int B = 3, T = 16;
  auto tok = tokens_for(B * T, cfg.vocab, 1), tgt = tokens_for(B * T, cfg.vocab, 2);
  GptModel a(cfg, cpu_device(), 5, B), b(cfg, cpu_device(), 5, B);
  const float la = a.forward(tok.data(), tgt.data(), B, T);
  EXPECT_NEAR(la, std::log(100.0), 0.05);
  const float la2 = a.forward(tok.data(), tgt.data(), B, T);
  const float lb = b.forward(tok.data(), tgt.data(), B, T);
  EXPECT_EQ(float_bits(la), float_bits(la2));
  EXPECT_EQ(float_bits(la), float_bits(lb));
  EXPECT_EQ(0, std::memcmp(a.parameters().params(), b.parameters().params(),
                           a.parameters().bytes()));
  // shorter sequence and smaller batch than allocated
  const float lshort = a.forward(tok.data(), tgt.data(), 2, 5);
  const float row0 = a.forward(tok.data(), tgt.data(), 1, 5);
  const float row1 = a.forward(tok.data() + 5, tgt.data() + 5, 1, 5);
  EXPECT_NEAR(lshort, (row0 + row1) / 2, 1e-6) << "a batch is the mean of its sequences";
  GptModel d(cfg, cpu_device(), 5, 2);  // allocated for exactly this shape
  EXPECT_EQ(float_bits(d.forward(tok.data(), tgt.data(), 2, 5)), float_bits(lshort));
  // a different seed gives different weights
  GptModel c(cfg, cpu_device(), 6, B);
  EXPECT_NE(float_bits(c.forward(tok.data(), tgt.data(), B, T)), float_bits(la));
}

TEST(GptModel, PaddedVocabularyNeverChangesLossOrGradients) {
  GptConfig cfg = tiny_gpt();
  const int B = 2, T = 4;
  auto tok = tokens_for(B * T, cfg.vocab, 3), tgt = tokens_for(B * T, cfg.vocab, 4);
  GptModel m(cfg, cpu_device(), 9, B);
  ParameterStore& ps = m.parameters();
  m.forward(tok.data(), tgt.data(), B, T);
  const double base = mean_loss_double(m, B * T);
  ps.zero_grads();
  m.backward(1.0f);
  vector<float> g0(ps.grads(), ps.grads() + ps.numel());
  // garbage in the padding rows of wte (they produce the padding logit columns)
  const ParamInfo& wte = ps.at("wte");
  for (std::size_t i = wte.logical_numel(); i < wte.numel; ++i) ps.param(wte)[i] = 1e6f;
  m.forward(tok.data(), tgt.data(), B, T);
  EXPECT_EQ(mean_loss_double(m, B * T), base);
  ps.zero_grads();
  m.backward(1.0f);
  for (const ParamInfo& p : ps) {
    if (p.name == "wte") continue;  // dwte's real rows see the padded logits only via dlnf (0)
    for (std::size_t i = 0; i < p.numel; ++i)
      ASSERT_EQ(ps.grad(p)[i], g0[p.offset + i]) << p.name << "[" << i << "]";
  }
  for (std::size_t i = 0; i < wte.numel; ++i)
    ASSERT_EQ(ps.grad(wte)[i], g0[wte.offset + i]) << "wte grad [" << i << "]";
}

TEST(GptModel, BackwardAccumulatesAndStepsDoNotAllocate) {
  GptConfig cfg = tiny_gpt();
  const int B = 2, T = 4;
  auto tok = tokens_for(B * T, cfg.vocab, 5), tgt = tokens_for(B * T, cfg.vocab, 6);
  GptModel m(cfg, cpu_device(), 11, B);
  ParameterStore& ps = m.parameters();
  ps.zero_grads();
  const auto allocs = AlignedBuffer::allocation_count();
  m.forward(tok.data(), tgt.data(), B, T);
  m.backward(1.0f);
  vector<float> once(ps.grads(), ps.grads() + ps.numel());
  m.forward(tok.data(), tgt.data(), B, T);
  m.backward(1.0f);
  EXPECT_EQ(AlignedBuffer::allocation_count(), allocs);
  for (std::size_t i = 0; i < ps.numel(); ++i)  // sums re-associate: allow rounding
    ASSERT_NEAR(ps.grads()[i], 2 * once[i], 1e-5 * std::abs(once[i]) + 1e-9);
  EXPECT_GT(m.activation_bytes(), 0u);
  // One backward a forward: a second would read the first's logit gradients as logits.
  EXPECT_THROW(m.backward(1.0f), Error);
  EXPECT_THROW(m.forward(tok.data(), tgt.data(), 3, T), Error);  // more than max_batch
  tok[0] = cfg.vocab;                                             // out-of-range token
  EXPECT_THROW(m.forward(tok.data(), tgt.data(), B, T), Error);
}

// Generation's key/value cache: the logits decode() gives after each appended piece of text
// (the first rows, then one row at a time, then several rows at once) are those of a full
// forward over the text so far, at its last position; the cache is reused without allocating.
TEST(GptModel, DecodeWithTheCacheGivesTheLogitsOfAFullForward) {
  for (const bool tied : {true, false}) {
    GptConfig cfg = small_gpt(40);
    cfg.tie_embeddings = tied;
    GptModel m(cfg, cpu_device(), 21, 1);
    randomise(m.parameters(), 22);
    const auto tok = tokens_for(cfg.seq_len, cfg.vocab, 23);
    const int Vp = cfg.padded_vocab();
    auto expect_logits_of_forward = [&](const float* got, int length) {
      m.forward(tok.data(), nullptr, 1, length);
      const float* want = m.logits() + static_cast<std::size_t>(length - 1) * Vp;
      float scale = 0, gap = 0;
      for (int v = 0; v < cfg.vocab; ++v) {
        scale = std::max(scale, std::abs(want[v]));
        gap = static_cast<float>(test::worse(gap, std::abs(got[v] - want[v])));
      }
      EXPECT_LE(gap, 1e-5f * scale) << "tied " << tied << ", length " << length;
    };
    vector<float> first;
    std::size_t allocations = 0;
    for (int round = 0; round < 2; ++round) {
      m.decode_reset();
      EXPECT_EQ(m.decoded_length(), 0);
      const float* got = m.decode(tok.data(), 7);
      if (round == 0) {
        first.assign(got, got + Vp);
        allocations = AlignedBuffer::allocation_count();
        expect_logits_of_forward(got, 7);
        continue;
      }
      EXPECT_EQ(0, std::memcmp(got, first.data(), sizeof(float) * Vp)) << "a new text repeats";
      for (int length = 8; length <= cfg.seq_len; ++length) {
        const int n = length == 25 ? 5 : 1;  // positions 20..24 in one call
        if (length >= 21 && length < 25) continue;
        got = m.decode(tok.data() + length - n, n);
        EXPECT_EQ(m.decoded_length(), length);
        expect_logits_of_forward(got, length);  // forward() leaves decode's memory alone
      }
      EXPECT_EQ(AlignedBuffer::allocation_count(), allocations) << "the cache is reused";
    }
    EXPECT_THROW(m.decode(tok.data(), 1), Error);  // past seq-len
    EXPECT_THROW(m.decode(tok.data(), INT_MAX), Error);  // a count whose sum with the length overflows
    m.decode_reset();
    std::vector<std::int32_t> bad = {1, cfg.vocab};
    EXPECT_THROW(m.decode(bad.data(), 2), Error);
  }
  GptConfig cfg = tiny_gpt();
  GptModel stage(cfg, cpu_device(), 1, 1, GptStage{0, 1, true, false});
  const auto tok = tokens_for(2, cfg.vocab, 24);
  EXPECT_THROW(stage.decode(tok.data(), 2), Error) << "a pipeline stage cannot decode";
}

TEST(GptModel, FlopsPerToken) {
  GptConfig cfg;  // 4 layers, C 256, T 256, V 256
  GptModel m(cfg, cpu_device(), 1, 1);
  const double C = 256, L = 4, V = 256, T = 256;
  EXPECT_DOUBLE_EQ(m.flops_per_token(), 6 * (12 * L * C * C + V * C) + 12 * L * C * T);
}

// ---- whole-model gradient checks ---------------------------------------------------------
TEST(GptModel, FiniteDifferenceGradientsTied) {
  GptConfig cfg = tiny_gpt(true);
  const int B = 2, T = 4, N = B * T;
  auto tok = tokens_for(N, cfg.vocab, 7), tgt = tokens_for(N, cfg.vocab, 8);
  GptModel m(cfg, cpu_device(), 13, B);
  randomise(m.parameters(), 99);
  m.parameters().zero_grads();
  m.forward(tok.data(), tgt.data(), B, T);
  m.backward(1.0f);
  auto loss = [&] {
    m.forward(tok.data(), tgt.data(), B, T);
    return mean_loss_double(m, N);
  };
  // h = 3e-3 balances fp32 rounding (~1e-7 / h) against truncation (~h^2 f''').
  FdSummary s = fd_whole_model(m, loss, 3e-3f);
  EXPECT_GT(s.checked, 1500u);
  RecordProperty("max_rel", std::to_string(s.max_rel));
}

TEST(GptModel, FiniteDifferenceGradientsUntiedShortSequence) {
  GptConfig cfg = tiny_gpt(false);
  const int B = 2, T = 3, N = B * T;  // T < seq_len: the last wpe row gets no gradient
  auto tok = tokens_for(N, cfg.vocab, 9), tgt = tokens_for(N, cfg.vocab, 10);
  GptModel m(cfg, cpu_device(), 17, B);
  randomise(m.parameters(), 98);
  m.parameters().zero_grads();
  m.forward(tok.data(), tgt.data(), B, T);
  m.backward(2.5f);  // dloss scales every gradient
  auto loss = [&] {
    m.forward(tok.data(), tgt.data(), B, T);
    return 2.5 * mean_loss_double(m, N);
  };
  fd_whole_model(m, loss, 3e-3f);
}

TEST(MlpModel, FiniteDifferenceGradientsAndNames) {
  MlpConfig cfg{{5, 7, 6, 4}};
  const int B = 3;
  MlpModel m(cfg, cpu_device(), 21, B);
  ParameterStore& ps = m.parameters();
  ASSERT_EQ(ps.size(), 6u);
  EXPECT_EQ(ps[0].name, "layers.0.weight");
  EXPECT_EQ(ps[0].shape, (vector<std::int64_t>{7, 5}));
  EXPECT_EQ(ps[5].name, "layers.2.bias");
  EXPECT_FALSE(ps[5].decay);
  auto x = test::random_vec<float>(B * 5, 3);
  vector<std::int32_t> y = {0, 3, 2};
  const float l0 = m.forward(x.data(), y.data(), B);
  EXPECT_NEAR(l0, std::log(4.0), 1.0);
  for (const ParamInfo& p : ps) ps.init_normal(p, 77, 0.0f, 0.5f);
  ps.zero_grads();
  m.forward(x.data(), y.data(), B);
  m.backward(1.0f);
  EXPECT_THROW(m.backward(1.0f), Error);  // one backward a forward
  EXPECT_THROW(m.forward(nullptr, y.data(), B), Error);  // was a crash in the input copy
  auto loss = [&] { return static_cast<double>(m.forward(x.data(), y.data(), B)); };
  FdSummary s = fd_whole_model(m, loss, 3e-3f);
  EXPECT_EQ(s.checked, 7u * 5 + 7 + 6 * 7 + 6 + 4 * 6 + 4);
  EXPECT_EQ(m.flops_per_sample(), 6.0 * (5 * 7 + 7 * 6 + 6 * 4));
}

// ---- device selection --------------------------------------------------------------------
TEST(Device, SelectDevice) {
  EXPECT_EQ(select_device("cpu").kind(), DeviceKind::cpu);
  EXPECT_EQ(&select_device("cpu"), &cpu_device());
  if (!cuda_available()) {
    EXPECT_EQ(select_device("auto").kind(), DeviceKind::cpu);
    try {
      select_device("cuda");
      ADD_FAILURE() << "cuda selected without a plugin/GPU";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), Errc::unavailable);
      EXPECT_NE(std::string(e.what()).find("--device cuda"), std::string::npos);
    }
  }
  try {
    select_device("tpu");
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::invalid_argument);
  }
  Device& d = cpu_device();
  void* p = d.allocate(1000);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(p) % 64, 0u);
  EXPECT_EQ(static_cast<unsigned char*>(p)[999], 0);
  d.free(p);
  float t[6] = {};
  Tensor x(t, {2, 3});
  EXPECT_EQ(x.numel(), 6);
  EXPECT_EQ(x.bytes(), 24u);
  EXPECT_THROW(Tensor(t, {1, 2, 3, 4, 5}), Error);
}

TEST(GptModel, SixteenBitSavedActivationsHalveTheirBytesAndKeepGradientsClose) {
  // bf16 saved activations: every block keeps its LayerNorm outputs, qkv, attention output
  // and log-sum-exps and MLP hidden layers (before and after GELU) in half the bytes, plus
  // one fp32 copy shared by all blocks. Forward computes in fp32 as before (the same loss bits); backward reads the
  // rounded values, so the gradients differ a little, within bf16's precision.
  GptConfig cfg = small_gpt(16);
  cfg.layers = 4;
  const int B = 3, T = 16, L = cfg.layers;
  auto tok = tokens_for(B * T, cfg.vocab, 1), tgt = tokens_for(B * T, cfg.vocab, 2);
  GptModel full(cfg, cpu_device(), 5, B);
  cfg.saved_activations = DType::bf16;
  GptModel half(cfg, cpu_device(), 5, B);

  // ln1 + qkv + attention output + ln2 (6 C per token), what attention saves, hidden x 2 (8 C)
  const double attention = static_cast<double>(
      cpu_device().attention_saved_floats(B, T, cfg.d_model, cfg.heads));
  const double per_block = 4.0 * (attention + 14.0 * B * T * cfg.d_model);
  const double saved = per_block / 2 * L - per_block;  // halved per block, one fp32 copy
  const double got = static_cast<double>(full.activation_bytes()) -
                     static_cast<double>(half.activation_bytes());
  EXPECT_NEAR(got, saved, 64.0 * 7 * L) << "64-byte rounding per kept tensor at most";

  const GradientGap gap = same_loss_gradient_gap(full, half, tok, tgt, B, T);
  EXPECT_GT(gap.difference, 0.0) << "backward did not read the rounded activations";
  EXPECT_LT(gap.difference, 2e-2 * gap.scale);
  std::printf("bf16 saved activations: %zu of %zu bytes; largest gradient difference %.3g of "
              "the largest gradient\n", half.activation_bytes(), full.activation_bytes(),
              gap.difference / gap.scale);
}

TEST(GptModel, CpuAttentionSavesLogSumExpsOrOnRequestProbabilities) {
  // The CPU's attention saves two floats per query row and recomputes the probabilities in
  // backward; DTRAIN_CPU_ATTENTION_PROBABILITIES=1 saves the T probabilities instead. The
  // model trains the same either way: the same loss bits, the same gradients up to rounding.
  GptConfig cfg = small_gpt(300);  // two query blocks of the CPU kernels (256 rows), the second partial
  cfg.layers = 3;
  cfg.vocab = 50;
  const int B = 2, T = cfg.seq_len, NH = cfg.heads, C = cfg.d_model;
  ASSERT_EQ(setenv("DTRAIN_CPU_ATTENTION_PROBABILITIES", "1", 1), 0);
  env::reload();  // read once per process otherwise
  CpuDevice saves_probabilities;
  ASSERT_EQ(unsetenv("DTRAIN_CPU_ATTENTION_PROBABILITIES"), 0);
  env::reload();
  CpuDevice saves_lse;
  EXPECT_EQ(saves_probabilities.attention_saved_floats(B, T, C, NH),
            static_cast<std::size_t>(B) * NH * T * T);
  EXPECT_EQ(saves_lse.attention_saved_floats(B, T, C, NH), 2u * B * NH * T);

  GptModel a(cfg, saves_probabilities, 5, B), b(cfg, saves_lse, 5, B);
  const double per_block = 4.0 * (static_cast<double>(B) * NH * T * T - 2.0 * B * NH * T);
  EXPECT_NEAR(static_cast<double>(a.activation_bytes()) - static_cast<double>(b.activation_bytes()),
              per_block * cfg.layers, 64.0 * cfg.layers)
      << "64-byte rounding per block at most";
  auto tok = tokens_for(B * T, cfg.vocab, 3), tgt = tokens_for(B * T, cfg.vocab, 4);
  const GradientGap gap = same_loss_gradient_gap(a, b, tok, tgt, B, T);
  EXPECT_GT(gap.scale, 0.0);
  EXPECT_LT(gap.difference, 1e-5 * gap.scale);
}
