// The single-process pieces of tensor parallelism: vocabulary-parallel cross-entropy kernels
// (shards reduced by hand must give the fused loss and gradient), the vocabulary split, and
// the local-to-logical index map of sliced parameters.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "device/cpu/kernels.hpp"
#include "dtrain/nn/parameters.hpp"
#include "dtrain/nn/tensor_parallel.hpp"
#include "fd_check.hpp"

using namespace dtrain;
using dtrain::test::random_vec;
using std::vector;

TEST(VocabShard, EvenSplitWithCommonPadding) {
  int next = 0;
  for (int r = 0; r < 4; ++r) {
    const nn::VocabShard s = nn::vocab_shard(257, 4, r);
    EXPECT_EQ(s.start, next);
    EXPECT_EQ(s.rows, r == 0 ? 65 : 64);
    EXPECT_EQ(s.padded_rows, 128);
    next += s.rows;
  }
  EXPECT_EQ(next, 257);
  EXPECT_EQ(nn::vocab_shard(50257, 1, 0).padded_rows, 50304);  // as GptConfig::padded_vocab()
  EXPECT_THROW(nn::vocab_shard(3, 4, 0), Error);
}

// Splits a [N, V] problem into P shards with the layout of vocab_shard, runs the shard kernels
// with the cross-shard reductions done here, and compares with the fused kernels.
void check_shards(int P) {
  const int N = 5, V = 37;
  auto full = random_vec<double>(static_cast<std::size_t>(N) * V, 11);
  for (auto& z : full) z *= 8;  // spread the logits so the max matters
  const std::int32_t targets[N] = {0, 36, 12, 19, 25};
  const int Vp = 64;
  vector<double> padded(static_cast<std::size_t>(N) * Vp, 1e9);  // padding must be ignored
  for (int n = 0; n < N; ++n)
    for (int j = 0; j < V; ++j) padded[n * Vp + j] = full[n * V + j];
  vector<double> ref_loss(N), ref_lse(N), ref_d(padded.size());
  const vector<double> dl = random_vec<double>(N, 12);  // a row reading another's would show
  cpu::crossentropy_forward<double>(ref_loss.data(), ref_lse.data(), padded.data(), targets, N, V,
                                    Vp);
  cpu::crossentropy_backward<double>(ref_d.data(), padded.data(), ref_lse.data(), targets,
                                     dl.data(), N, V, Vp);

  vector<nn::VocabShard> sh;
  vector<vector<double>> logits;
  for (int r = 0; r < P; ++r) {
    sh.push_back(nn::vocab_shard(V, P, r));
    const int ld = sh[r].padded_rows;
    // +1e9 in the padding: a kernel reading past sh[r].rows would change the max and the sums
    vector<double> z(static_cast<std::size_t>(N) * ld, 1e9);
    for (int n = 0; n < N; ++n)
      for (int j = 0; j < sh[r].rows; ++j) z[n * ld + j] = full[n * V + sh[r].start + j];
    logits.push_back(z);
  }
  vector<double> mx(N, -std::numeric_limits<double>::infinity()), sum(N, 0), tgt(N, 0);
  for (int r = 0; r < P; ++r) {
    vector<double> m(N), t(N);
    cpu::crossentropy_shard_stats<double>(m.data(), t.data(), logits[r].data(), targets, N,
                                          sh[r].rows, sh[r].padded_rows, sh[r].start);
    for (int n = 0; n < N; ++n) {
      mx[n] = std::max(mx[n], m[n]);
      tgt[n] += t[n];
    }
  }
  for (int r = 0; r < P; ++r) {
    vector<double> s(N);
    cpu::crossentropy_shard_sumexp<double>(s.data(), logits[r].data(), mx.data(), N, sh[r].rows,
                                           sh[r].padded_rows);
    for (int n = 0; n < N; ++n) sum[n] += s[n];
  }
  vector<double> loss(N), lse(N);
  cpu::crossentropy_shard_finish<double>(loss.data(), lse.data(), mx.data(), sum.data(),
                                         tgt.data(), N);
  for (int n = 0; n < N; ++n) {
    EXPECT_NEAR(loss[n], ref_loss[n], 1e-12) << "P=" << P << " n=" << n;
    EXPECT_NEAR(lse[n], ref_lse[n], 1e-12);
  }
  for (int r = 0; r < P; ++r) {
    const int ld = sh[r].padded_rows;
    vector<double> d(logits[r]);  // in place, as the model does
    cpu::crossentropy_shard_backward<double>(d.data(), d.data(), lse.data(), targets, dl.data(),
                                             N, sh[r].rows, ld, sh[r].start);
    for (int n = 0; n < N; ++n)
      for (int j = 0; j < ld; ++j) {
        const double want = j < sh[r].rows ? ref_d[n * Vp + sh[r].start + j] : 0.0;
        EXPECT_NEAR(d[n * ld + j], want, 1e-14) << "P=" << P << " rank " << r;
      }
  }
}

TEST(VocabParallelCrossEntropy, ShardsReducedByHandEqualTheFusedKernel) {
  for (int P : {1, 2, 3, 4, 8}) check_shards(P);
}

// A shard of no rows (vocabulary smaller than the group) has maximum -inf and sum 0, which
// the reduction over shards ignores.
TEST(VocabParallelCrossEntropy, AnEmptyShardAddsNothing) {
  const int N = 2, ld = 64;
  const vector<float> z(static_cast<std::size_t>(N) * ld, 5.0f);
  const std::int32_t targets[N] = {0, 3};
  vector<float> mx(N, 0.0f), tl(N, 7.0f), se(N, 7.0f);
  cpu::crossentropy_shard_stats<float>(mx.data(), tl.data(), z.data(), targets, N, 0, ld, 10);
  const float neg_inf = -std::numeric_limits<float>::infinity();
  for (int n = 0; n < N; ++n) {
    EXPECT_EQ(mx[n], neg_inf);
    EXPECT_EQ(tl[n], 0.0f);  // the target is another shard's
  }
  const vector<float> global_max(N, 1.0f);
  cpu::crossentropy_shard_sumexp<float>(se.data(), z.data(), global_max.data(), N, 0, ld);
  for (int n = 0; n < N; ++n) EXPECT_EQ(se[n], 0.0f);
}

TEST(ParamInfo, LogicalIndexOfBlockedAndColumnSlices) {
  ParameterStore ps(cpu_device());
  // q|k|v rows of a [3*4, 2] tensor, rank 1 of 2: rows 2-3, 6-7, 10-11
  const ParamInfo& qkv = ps[ps.add_slice("qkv", {12, 2}, {6, 2}, {2, 0}, true, true, 0, 3)];
  const vector<std::size_t> rows = {2, 3, 6, 7, 10, 11};
  for (std::size_t i = 0; i < qkv.local_numel(); ++i)
    EXPECT_EQ(qkv.logical_index(i), rows[i / 2] * 2 + i % 2);
  // columns 4-5 of a [3, 6] tensor
  const ParamInfo& col = ps[ps.add_slice("col", {3, 6}, {3, 2}, {0, 4}, true, true)];
  for (std::size_t i = 0; i < col.local_numel(); ++i)
    EXPECT_EQ(col.logical_index(i), (i / 2) * 6 + 4 + i % 2);
  EXPECT_THROW(ps.add_slice("bad", {4, 4}, {2, 4}, {3, 0}, true, true), Error);
  // init keyed by logical index: the slice holds the same values as the whole tensor
  const ParamInfo& whole = ps[ps.add("qkv_whole", {12, 2}, true)];
  (void)whole;
  ps.allocate();
  // (re-fetch: infos may move while registering)
  const ParamInfo& a = ps.at("qkv");
  const ParamInfo& w = ps.at("qkv_whole");
  ps.init_normal(a, 5, 0.0f, 1.0f);
  ParameterStore ref(cpu_device());
  ref.add("qkv", {12, 2}, true);
  ref.allocate();
  ref.init_normal(ref.at("qkv"), 5, 0.0f, 1.0f);
  for (std::size_t i = 0; i < a.local_numel(); ++i)
    EXPECT_EQ(ps.param(a)[i], ref.param(ref.at("qkv"))[a.logical_index(i)]);
  EXPECT_EQ(w.numel, 24u);
}

// A residual joins a row-parallel layer's output in the layer's call only where the layer is
// whole on the rank: split over a group, each rank's output is a partial sum, and adding the
// residual to each would count it once per rank. Refused before anything is read; whole, it
// is the layer's output plus the residual.
TEST(RowParallelLinear, ResidualJoinsOnlyAWholeLayer) {
  nn::RowParallelLinear split;
  split.prefix = "h.0.mlp.c_proj";
  split.in = 8;
  split.in_local = 4;
  split.out = 2;
  vector<float> y(2), residual(2), x(4);
  EXPECT_THROW(split.forward_residual(cpu_device(), y.data(), residual.data(), x.data(), 1),
               Error);
  nn::RowParallelLinear whole = split;
  whole.in_local = whole.in = 2;
  vector<float> w = {1.0f, 2.0f, 3.0f, 4.0f}, b = {0.5f, -0.5f}, in = {1.0f, -1.0f};
  whole.w = w.data();
  whole.b = b.data();
  residual = {10.0f, 20.0f};
  whole.forward_residual(cpu_device(), y.data(), residual.data(), in.data(), 1);
  EXPECT_EQ(y, (vector<float>{10.0f + (1.0f - 2.0f + 0.5f), 20.0f + (3.0f - 4.0f - 0.5f)}));
}
