// Tensor parallelism against the single-process model: the world is the TP group (2 or 4
// ranks), or a TP=2 x DP=2 grid at 4 ranks. The reference runs in the same process on a
// communicator of the rank alone, with the same weights and batch; every parallel layout must
// reproduce its losses, gradients and gradient norms.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "dtrain/comm/process_grid.hpp"
#include "dtrain/core/error.hpp"
#include "dtrain/nn/gpt.hpp"
#include "dtrain/nn/tensor_parallel.hpp"
#include "dtrain/optim/optimizer.hpp"
#include "nn/tp_comm.hpp"
#include "test_support.hpp"

using namespace dtrain;
using dtrain::test::world;

namespace {

constexpr std::uint64_t kSeed = 1234;

GptConfig tiny(int vocab = 128, bool tied = true) {
  GptConfig c;
  c.layers = 2;
  c.heads = 4;
  c.d_model = 32;
  c.seq_len = 16;
  c.vocab = vocab;
  c.tie_embeddings = tied;
  return c;
}

// Sequences [first, first + B) of step `step`: a pseudo-random start token, then a fixed
// bigram rule (learnable within a few steps); targets are the next tokens.
struct Batch {
  std::vector<std::int32_t> tokens, targets;
};
Batch make_batch(int step, int first, int B, int T, int V) {
  Batch b;
  for (int s = first; s < first + B; ++s) {
    std::uint64_t x = 0x9e3779b97f4a7c15ULL * static_cast<std::uint64_t>(step * 131 + s + 1);
    x ^= x >> 29;
    std::vector<std::int32_t> seq(static_cast<std::size_t>(T) + 1);
    seq[0] = static_cast<std::int32_t>(x % static_cast<std::uint64_t>(V));
    for (std::size_t t = 1; t < seq.size(); ++t) seq[t] = (seq[t - 1] * 5 + 3) % V;
    b.tokens.insert(b.tokens.end(), seq.begin(), seq.end() - 1);
    b.targets.insert(b.targets.end(), seq.begin() + 1, seq.end());
  }
  return b;
}

struct Curve {
  std::vector<double> loss, grad_norm;
};

// `steps` AdamW steps of the model on tp (null: alone), each on the global batch of
// micro * dp sequences, this rank taking its dp share; gradients averaged over dp, clipped
// to norm 1 by the TP-global norm.
Curve train(const GptConfig& cfg, Communicator* tp, bool sp, Communicator* dp, int steps,
            int micro) {
  Device& dev = cpu_device();
  GptModel m(cfg, dev, kSeed, micro, tp, sp);
  ParameterStore& ps = m.parameters();
  std::vector<optim::Segment> segs;
  for (const ParamInfo& p : ps) segs.push_back({p.offset, p.numel, p.decay});
  optim::AdamW opt(dev, segs, ps.numel(), optim::AdamWConfig{});
  const int dp_rank = dp ? dp->rank() : 0, dp_size = dp ? dp->size() : 1;
  Curve c;
  for (int s = 0; s < steps; ++s) {
    ps.zero_grads();
    const Batch b = make_batch(s, dp_rank * micro, micro, cfg.seq_len, cfg.vocab);
    double loss = m.forward(b.tokens.data(), b.targets.data(), micro, cfg.seq_len);
    m.backward(1.0f);
    if (dp_size > 1) {
      dp->all_reduce(ps.grads(), ps.grads(), ps.numel(), DType::f32, ReduceOp::avg);
      dp->all_reduce(&loss, &loss, 1, DType::f64, ReduceOp::avg);
    }
    const double norm = std::sqrt(nn::grad_sum_squares(ps, dev, tp));
    opt.step(ps.params(), ps.grads(), 3e-3f, optim::clip_factor(norm, 1.0));
    c.loss.push_back(loss);
    c.grad_norm.push_back(norm);
  }
  return c;
}

void expect_same_curve(const Curve& got, const Curve& ref, const std::string& what) {
  ASSERT_EQ(got.loss.size(), ref.loss.size());
  for (std::size_t i = 0; i < ref.loss.size(); ++i) {
    EXPECT_NEAR(got.loss[i], ref.loss[i], 1e-5 * std::fabs(ref.loss[i]))
        << what << ", step " << i + 1;
    EXPECT_NEAR(got.grad_norm[i], ref.grad_norm[i], 1e-5 * ref.grad_norm[i] + 1e-9)
        << what << " gradient norm, step " << i + 1;
  }
  EXPECT_LT(ref.loss.back(), ref.loss.front() - 0.1) << "the reference must learn";
}

// The logical tensor of parameter p from this rank's arena `base`, assembled over tp.
// Replicated parameters come from this rank; all_equal says whether every TP rank holds
// exactly the same values.
std::vector<float> logical(const ParamInfo& p, const float* base, Communicator* tp,
                           bool* all_equal = nullptr) {
  std::vector<float> out(p.logical_numel(), 0.0f);
  for (std::size_t i = 0; i < p.local_numel(); ++i) out[p.logical_index(i)] = base[p.offset + i];
  const bool group = tp && tp->size() > 1;
  if (group && p.tp_sharded) {
    // every logical element lives on exactly one rank: the sum is exact
    tp->all_reduce(out.data(), out.data(), out.size(), DType::f32, ReduceOp::sum);
  }
  if (all_equal) {
    *all_equal = true;
    if (group && !p.tp_sharded) {
      std::vector<float> mx(out), mn(out);
      tp->all_reduce(mx.data(), mx.data(), mx.size(), DType::f32, ReduceOp::max);
      tp->all_reduce(mn.data(), mn.data(), mn.size(), DType::f32, ReduceOp::min);
      *all_equal = mx == out && mn == out;
    }
  }
  return out;
}

// max |a - b| <= tol * max |b| + floor over the tensor
void expect_close(const std::vector<float>& a, const std::vector<float>& b, double tol,
                  const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  double scale = 0, err = 0;
  std::size_t worst = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    scale = std::max(scale, std::fabs(static_cast<double>(b[i])));
    const double e = std::fabs(static_cast<double>(a[i]) - b[i]);
    if (!(e <= err)) {  // a NaN is the worst
      if (std::isnan(err)) continue;
      err = e;
      worst = i;
    }
  }
  EXPECT_LE(err, tol * scale + 1e-9) << what << ": max difference " << err << " at element "
                                     << worst << " (tensor max " << scale << ")";
}

// One forward/backward of cfg at TP = world (optionally SP) and alone; compares the initial
// weights (bitwise), the loss and every logical gradient.
void compare_one_step(const GptConfig& cfg, bool sp) {
  Device& dev = cpu_device();
  const int B = 2;
  const Batch b = make_batch(7, 0, B, cfg.seq_len, cfg.vocab);
  GptModel par(cfg, dev, kSeed, B, &world(), sp);
  GptModel ref(cfg, dev, kSeed, B);
  const std::string tag = std::string(sp ? "SP " : "") + "vocab " + std::to_string(cfg.vocab) +
                          (cfg.tie_embeddings ? " tied" : " untied");
  for (const ParamInfo& p : par.parameters()) {
    const ParamInfo& q = ref.parameters().at(p.name);
    ASSERT_EQ(p.shape, q.shape) << p.name;
    bool same = false;
    EXPECT_EQ(logical(p, par.parameters().params(), &world(), &same),
              logical(q, ref.parameters().params(), nullptr))
        << tag << ": initial " << p.name;
    EXPECT_TRUE(same) << p.name;
  }
  const double lp = par.forward(b.tokens.data(), b.targets.data(), B, cfg.seq_len);
  const double lr = ref.forward(b.tokens.data(), b.targets.data(), B, cfg.seq_len);
  EXPECT_NEAR(lp, lr, 1e-5 * lr) << tag;
  par.parameters().zero_grads();
  ref.parameters().zero_grads();
  par.backward(1.0f);
  ref.backward(1.0f);
  for (const ParamInfo& p : par.parameters()) {
    bool same = false;
    const std::vector<float> g = logical(p, par.parameters().grads(), &world(), &same);
    expect_close(g, logical(ref.parameters().at(p.name), ref.parameters().grads(), nullptr), 1e-5,
                 tag + ": grad " + p.name);
    EXPECT_TRUE(same) << tag << ": replicated gradient of " << p.name
                      << " differs between TP ranks";
    // a vocabulary shard's padding rows hold zeros and get none (the norm counts them)
    for (std::size_t i = p.local_numel(); i < p.numel; ++i) {
      ASSERT_EQ(par.parameters().params()[p.offset + i], 0.0f) << tag << ": padding of " << p.name;
      ASSERT_EQ(par.parameters().grads()[p.offset + i], 0.0f) << tag << ": padding of " << p.name;
    }
  }
  const double n2p = nn::grad_sum_squares(par.parameters(), dev, &world());
  const double n2r = nn::grad_sum_squares(ref.parameters(), dev, nullptr);
  EXPECT_NEAR(n2p, n2r, 2e-5 * n2r) << tag;
}

}  // namespace

TEST(TensorParallel, InitialWeightsLossAndGradientsMatchSingleRank) {
  compare_one_step(tiny(), false);
  compare_one_step(tiny(128, false), false);  // untied: lm_head is vocabulary-parallel too
}

TEST(TensorParallel, SequenceParallelGradientsMatchSingleRank) {
  compare_one_step(tiny(), true);
  compare_one_step(tiny(128, false), true);
}

TEST(TensorParallel, PaddedVocabularyNeverChangesTheLoss) {
  // 257 rows split 129/128 (TP=2) or 65/64/64/64 (TP=4), each padded to 192 / 128 columns
  compare_one_step(tiny(257), false);
  compare_one_step(tiny(257), true);
  compare_one_step(tiny(257, false), false);  // lm_head padded as well
  const nn::VocabShard s = nn::vocab_shard(257, world().size(), world().rank());
  EXPECT_GE(s.rows, 257 / world().size());
  EXPECT_EQ(s.padded_rows % 64, 0);
}

TEST(TensorParallel, LossCurveMatchesSingleRank) {
  const GptConfig cfg = tiny();
  const Curve ref = train(cfg, nullptr, false, nullptr, 20, 2);
  expect_same_curve(train(cfg, &world(), false, nullptr, 20, 2), ref, "TP");
  expect_same_curve(train(cfg, &world(), true, nullptr, 20, 2), ref, "TP+SP");
}

// Generation's key/value cache split by heads: each rank's vocabulary shard of the logits
// decode() gives, for the first rows and then one row at a time, equals those columns of the
// single-rank model's decode (with and without sequence parallelism, which decode ignores).
TEST(TensorParallel, DecodeMatchesSingleRank) {
  for (const bool sp : {false, true}) {
    for (const bool tied : {true, false}) {
      const GptConfig cfg = tiny(257, tied);
      GptModel par(cfg, cpu_device(), kSeed, 1, &world(), sp);
      GptModel ref(cfg, cpu_device(), kSeed, 1);
      const Batch b = make_batch(3, 0, 1, cfg.seq_len, cfg.vocab);
      const nn::VocabShard mine = par.vocab_shard();
      for (int length = 5; length <= cfg.seq_len; ++length) {
        const int n = length == 5 ? 5 : 1;
        const std::int32_t* first = b.tokens.data() + length - n;
        const float* got = par.decode(first, n);
        const float* want = ref.decode(first, n) + mine.start;
        expect_close(std::vector<float>(got, got + mine.rows),
                     std::vector<float>(want, want + mine.rows), 1e-5,
                     std::string(sp ? "SP " : "") + (tied ? "tied" : "untied") + " length " +
                         std::to_string(length));
      }
    }
  }
}

TEST(TensorParallel, TensorTimesDataParallelMatchesSingleRank) {
  if (world().size() != 4) GTEST_SKIP() << "needs 4 ranks (TP=2 x DP=2)";
  GridShape shape;
  shape.tp = 2;
  ProcessGrid grid(world(), shape);
  ASSERT_EQ(grid.dp_size(), 2);
  const GptConfig cfg = tiny();
  const Curve ref = train(cfg, nullptr, false, nullptr, 20, 4);  // the whole global batch
  expect_same_curve(train(cfg, &grid.tp(), false, &grid.dp(), 20, 2), ref, "TP2xDP2");
  expect_same_curve(train(cfg, &grid.tp(), true, &grid.dp(), 20, 2), ref, "TP2xDP2+SP");
}

TEST(TensorParallel, TwoAllReducesPerBlockInEachDirection) {
  if (world().size() == 1) GTEST_SKIP() << "a group of one communicates nothing";
  const int B = 2;
  auto measure = [&](int layers, bool sp, nn::TpCommStats& fwd, nn::TpCommStats& bwd,
                     std::uint64_t& fwd_sent) {
    GptConfig cfg = tiny();
    cfg.layers = layers;
    GptModel m(cfg, cpu_device(), kSeed, B, &world(), sp);
    const Batch b = make_batch(0, 0, B, cfg.seq_len, cfg.vocab);
    const std::uint64_t sent0 = world().bytes_sent();
    m.forward(b.tokens.data(), b.targets.data(), B, cfg.seq_len);
    fwd = m.tp_comm_stats();
    fwd_sent = world().bytes_sent() - sent0;
    m.backward(1.0f);
    bwd = m.tp_comm_stats() - fwd;
  };
  const std::uint64_t NC4 = static_cast<std::uint64_t>(B) * 16 * 32 * sizeof(float);
  nn::TpCommStats f1, b1, f2, b2;
  std::uint64_t s1 = 0, s2 = 0;
  measure(1, false, f1, b1, s1);
  measure(2, false, f2, b2, s2);
  const nn::TpCommStats fb = f2 - f1, bb = b2 - b1;  // one block
  EXPECT_EQ(fb.all_reduces, 2u);
  EXPECT_EQ(bb.all_reduces, 2u);
  EXPECT_EQ(fb.all_gathers + fb.reduce_scatters + bb.all_gathers + bb.reduce_scatters, 0u);
  EXPECT_EQ(fb.tensor_bytes, 2 * NC4);  // Megatron: 2 all-reduces of B*T*C per block
  EXPECT_EQ(bb.tensor_bytes, 2 * NC4);
  EXPECT_EQ(s2 - s1, 2 * NC4);  // the communicator counts the same bytes
  // outside the blocks: embedding + max + (sum-exp, target) forward, LM-head input backward
  EXPECT_EQ(f2.all_reduces, 2u * 2 + 3);
  EXPECT_EQ(b2.all_reduces, 2u * 2 + 1);

  // sequence parallel: each all-reduce becomes an all-gather + reduce-scatter pair of the
  // same volume; backward re-gathers the LayerNorm outputs and reduces the LayerNorm grads
  nn::TpCommStats g1, c1, g2, c2;
  measure(1, true, g1, c1, s1);
  measure(2, true, g2, c2, s2);
  const nn::TpCommStats fs = g2 - g1, bs = c2 - c1;
  EXPECT_EQ(fs.all_reduces, 0u);
  EXPECT_EQ(fs.all_gathers, 2u);
  EXPECT_EQ(fs.reduce_scatters, 2u);
  EXPECT_EQ(fs.tensor_bytes, 4 * NC4);
  EXPECT_EQ(fs.ring_bytes, fb.ring_bytes);  // same volume on the wire as the all-reduces
  EXPECT_EQ(bs.all_gathers, 4u);
  EXPECT_EQ(bs.reduce_scatters, 2u);
  EXPECT_EQ(bs.all_reduces, 1u);  // LayerNorm gradients of the block (4 * C floats)
  // backward moves half as much again as without SP, plus the LayerNorm gradients
  const std::uint64_t C4 = 32 * sizeof(float);
  EXPECT_EQ(bs.tensor_bytes, 6 * NC4 + 4 * C4);
  auto ring = [&](std::uint64_t bytes, double fraction) {  // as TpGroup rounds each call
    const int p = world().size();
    return static_cast<std::uint64_t>(static_cast<double>(bytes) * fraction * (p - 1) / p + 0.5);
  };
  EXPECT_EQ(bb.ring_bytes, 2 * ring(NC4, 2.0));
  EXPECT_EQ(bs.ring_bytes, 6 * ring(NC4, 1.0) + ring(4 * C4, 2.0));
  // outside the blocks: the loss's two all-reduces, the embedding's reduce-scatter and the
  // LM head input's all-gather forward; backward the mirror images and ln_f's gradients
  EXPECT_EQ(g2.all_reduces, 2u);
  EXPECT_EQ(g2.all_gathers, 2u * 2 + 1);
  EXPECT_EQ(g2.reduce_scatters, 2u * 2 + 1);
  EXPECT_EQ(c2.all_reduces, 2u * 1 + 1);
  EXPECT_EQ(c2.all_gathers, 2u * 4 + 1);
  EXPECT_EQ(c2.reduce_scatters, 2u * 2 + 1);
}

TEST(TensorParallel, InvalidSplitsThrowOnEveryRankBeforeCommunicating) {
  const int P = world().size();
  if (P == 1) GTEST_SKIP() << "every split is valid on a group of one";
  auto expect_invalid = [&](const GptConfig& cfg, bool sp, const std::string& needle) {
    try {
      GptModel m(cfg, cpu_device(), kSeed, 2, &world(), sp);
      ADD_FAILURE() << "no error for " << needle;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), Errc::invalid_config);
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  GptConfig heads = tiny();
  heads.heads = P == 2 ? 1 : 2;  // d_model 32 stays divisible by heads
  expect_invalid(heads, false, "heads");
  GptConfig vocab = tiny(P - 1 > 1 ? P - 1 : 2);
  if (vocab.vocab < P) expect_invalid(vocab, false, "vocab");
  GptConfig seq = tiny();
  seq.seq_len = P + 1;
  expect_invalid(seq, true, "seq-len");
  EXPECT_THROW(tiny().validate_tp(3 * P, false), Error);  // 4 heads over 3P ranks
  // under SP, rows that do not split evenly over the group are refused before any collective
  GptModel sp(tiny(), cpu_device(), kSeed, 2, &world(), true);
  const Batch odd = make_batch(0, 0, 1, 3, 128);  // 3 rows over P = 2 or 4 ranks
  try {
    sp.forward(odd.tokens.data(), odd.targets.data(), 1, 3);
    ADD_FAILURE() << "no error for 3 rows under sequence parallelism";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::invalid_argument);
    EXPECT_NE(std::string(e.what()).find("divisible by --tp"), std::string::npos) << e.what();
  }
  // Nobody hung in a collective: all ranks get here.
  world().barrier();
}

TEST(TensorParallel, ConjugatePairsAreDualAndNoOpsOnAGroupOfOne) {
  Device& dev = cpu_device();
  nn::TpGroup g(&world(), dev);
  const int P = g.size(), r = g.rank();
  const std::size_t n = 6;
  std::vector<float> full(n * P), shard(n), back(n * P);
  for (std::size_t i = 0; i < full.size(); ++i) full[i] = static_cast<float>(i + 100 * r);
  // split keeps this rank's rows; its backward gathers them all back
  nn::tp::split_to_sequence_fwd(g, dev, full.data(), shard.data(), n);
  for (std::size_t i = 0; i < n; ++i) EXPECT_EQ(shard[i], full[r * n + i]);
  nn::tp::split_to_sequence_bwd(g, shard.data(), back.data(), n);
  for (int q = 0; q < P; ++q)
    for (std::size_t i = 0; i < n; ++i)
      EXPECT_EQ(back[q * n + i], static_cast<float>(q * n + i + 100 * q));
  // reduce-scatter then all-gather equals an all-reduce
  std::vector<float> ar(full);
  nn::tp::reduce_from_region_fwd(g, ar.data(), ar.size());
  nn::tp::reduce_scatter_to_sequence_fwd(g, full.data(), shard.data(), n);
  nn::tp::reduce_scatter_to_sequence_bwd(g, shard.data(), back.data(), n);
  EXPECT_EQ(back, ar);
  nn::tp::gather_from_sequence_bwd(g, full.data(), shard.data(), n);
  for (std::size_t i = 0; i < n; ++i) EXPECT_EQ(shard[i], ar[r * n + i]);
  // a group of one: nothing is communicated or counted
  nn::TpGroup one(nullptr, dev);
  std::vector<float> x(full);
  nn::tp::copy_to_region_bwd(one, x.data(), x.size());
  EXPECT_EQ(x, full);
  EXPECT_EQ(one.stats().all_reduces + one.stats().all_gathers + one.stats().reduce_scatters, 0u);
}
