// Gradient checks of every CPU kernel (double instantiation, central differences), plus GEMM
// against a naive loop for every transpose combination.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <tuple>
#include <vector>

#include "device/cpu/kernels.hpp"
#include "device/half_bits.hpp"
#include "dtrain/device/device.hpp"
#include "dtrain/optim/optimizer.hpp"
#include "fd_check.hpp"

using namespace dtrain;
using namespace dtrain::test;
using std::vector;

namespace {
constexpr double kH = 1e-5;     // FD step in double
constexpr double kTol = 1e-6;   // relative error allowed
}  // namespace

// ---- GEMM ---------------------------------------------------------------------------
template <class T> void check_gemm(bool ta, bool tb) {
  const int M = 7, N = 5, K = 6;
  const int lda = (ta ? M : K) + 3, ldb = (tb ? K : N) + 2, ldc = N + 4;
  const int arows = ta ? K : M, brows = tb ? N : K;
  auto A = random_vec<T>(static_cast<std::size_t>(arows) * lda, 1);
  auto B = random_vec<T>(static_cast<std::size_t>(brows) * ldb, 2);
  auto C = random_vec<T>(static_cast<std::size_t>(M) * ldc, 3);
  auto ref = C;
  const T alpha = T(0.7), beta = T(-0.3);
  for (int i = 0; i < M; ++i)
    for (int j = 0; j < N; ++j) {
      double s = 0;
      for (int k = 0; k < K; ++k) {
        const double a = ta ? A[k * lda + i] : A[i * lda + k];
        const double b = tb ? B[j * ldb + k] : B[k * ldb + j];
        s += a * b;
      }
      ref[i * ldc + j] = static_cast<T>(alpha * s + beta * C[i * ldc + j]);
    }
  cpu::gemm<T>(ta, tb, M, N, K, alpha, A.data(), lda, B.data(), ldb, beta, C.data(), ldc);
  const double tol = std::is_same<T, float>::value ? 1e-5 : 1e-12;
  for (int i = 0; i < M; ++i)
    for (int j = 0; j < ldc; ++j)  // padding columns j >= N must be untouched too
      EXPECT_NEAR(C[i * ldc + j], ref[i * ldc + j], tol) << "ta=" << ta << " tb=" << tb;
}

TEST(CpuDevice, AvailableMemoryIsFreePhysicalMemory) {
  const auto page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  const std::size_t bytes = dtrain::cpu_device().available_memory();
  EXPECT_GT(bytes, 0u);
  EXPECT_LE(bytes, static_cast<std::size_t>(sysconf(_SC_PHYS_PAGES)) * page);
}

TEST(Gemm, AllTransposesFloatAndDouble) {
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      check_gemm<float>(ta, tb);
      check_gemm<double>(ta, tb);
    }
}

TEST(Gemm, StridedBatchedMatchesSingleCalls) {
  const int M = 4, N = 3, K = 5, batch = 3;
  const std::int64_t sa = M * K + 2, sb = K * N + 1, sc = M * N + 3;
  auto A = random_vec<double>(sa * batch, 4);
  auto B = random_vec<double>(sb * batch, 5);
  auto C = random_vec<double>(sc * batch, 6);
  auto ref = C;
  for (int i = 0; i < batch; ++i)
    cpu::gemm<double>(false, true, M, N, K, 1.5, A.data() + i * sa, K, B.data() + i * sb, K, 0.5,
                      ref.data() + i * sc, N);
  cpu::gemm_strided_batched<double>(false, true, M, N, K, 1.5, A.data(), K, sa, B.data(), K, sb,
                                    0.5, C.data(), N, sc, batch);
  for (std::size_t i = 0; i < C.size(); ++i) EXPECT_DOUBLE_EQ(C[i], ref[i]);
}

// ---- linear -------------------------------------------------------------------------
TEST(KernelGrad, Linear) {
  const int N = 5, C = 4, OC = 3;
  auto inp = random_vec<double>(N * C, 10), W = random_vec<double>(OC * C, 11);
  auto b = random_vec<double>(OC, 12), w = random_vec<double>(N * OC, 13);
  vector<double> out(N * OC);
  auto loss = [&] {
    cpu::linear_forward<double>(out.data(), inp.data(), W.data(), b.data(), N, C, OC);
    return dot(out, w);
  };
  loss();
  auto g0i = random_vec<double>(N * C, 14), g0w = random_vec<double>(OC * C, 15),
       g0b = random_vec<double>(OC, 16);
  auto di = g0i, dW = g0w, db = g0b;
  cpu::linear_backward<double>(di.data(), dW.data(), db.data(), w.data(), inp.data(), W.data(), N,
                               C, OC);
  fd_check("dinp", inp, minus(di, g0i), loss, kH, kTol);
  fd_check("dW", W, minus(dW, g0w), loss, kH, kTol);
  fd_check("db", b, minus(db, g0b), loss, kH, kTol);
  // No bias, no dinp: allowed (first layer, LM head).
  auto dW2 = g0w;
  cpu::linear_backward<double>(nullptr, dW2.data(), nullptr, w.data(), inp.data(), W.data(), N, C,
                               OC);
  for (int i = 0; i < OC * C; ++i) EXPECT_DOUBLE_EQ(dW2[i], dW[i]);
}

// ---- embeddings ---------------------------------------------------------------------
TEST(KernelGrad, EmbeddingWithVocabSlice) {
  const int N = 6, C = 3, start = 2, rows = 4;  // this shard owns tokens 2..5
  const std::int32_t tokens[N] = {3, 0, 5, 3, 7, 2};
  auto wte = random_vec<double>(rows * C, 20), w = random_vec<double>(N * C, 21);
  vector<double> out(N * C);
  auto loss = [&] {
    cpu::embedding_forward<double>(out.data(), tokens, wte.data(), N, C, start, rows);
    return dot(out, w);
  };
  loss();
  for (int c = 0; c < C; ++c) {
    EXPECT_EQ(out[1 * C + c], 0.0);  // token 0: not in this shard
    EXPECT_EQ(out[4 * C + c], 0.0);  // token 7: not in this shard
    EXPECT_EQ(out[0 * C + c], wte[(3 - start) * C + c]);
  }
  auto g0 = random_vec<double>(rows * C, 22), g = g0;
  cpu::embedding_backward<double>(g.data(), w.data(), tokens, N, C, start, rows);
  fd_check("dwte", wte, minus(g, g0), loss, kH, kTol);
}

TEST(KernelGrad, PositionalAdd) {
  const int B = 2, T = 3, C = 4;
  auto wpe = random_vec<double>(T * C, 30), base = random_vec<double>(B * T * C, 31);
  auto w = random_vec<double>(B * T * C, 32);
  vector<double> out;
  auto loss = [&] {
    out = base;
    cpu::positional_forward<double>(out.data(), wpe.data(), B, T, C);
    return dot(out, w);
  };
  loss();
  EXPECT_DOUBLE_EQ(out[1 * T * C + 2 * C + 1], base[1 * T * C + 2 * C + 1] + wpe[2 * C + 1]);
  auto g0 = random_vec<double>(T * C, 33), g = g0;
  cpu::positional_backward<double>(g.data(), w.data(), B, T, C);
  fd_check("dwpe", wpe, minus(g, g0), loss, kH, kTol);
}

// ---- layernorm ----------------------------------------------------------------------
TEST(KernelGrad, LayerNorm) {
  const int N = 4, C = 7;
  auto inp = random_vec<double>(N * C, 40), wt = random_vec<double>(C, 41);
  auto bs = random_vec<double>(C, 42), w = random_vec<double>(N * C, 43);
  for (int i = 0; i < C; ++i) inp[i] += 50.0;  // a row with a large mean
  vector<double> out(N * C), mean(N), rstd(N);
  auto loss = [&] {
    cpu::layernorm_forward<double>(out.data(), mean.data(), rstd.data(), inp.data(), wt.data(),
                                   bs.data(), N, C);
    return dot(out, w);
  };
  loss();
  // normalised rows: weight 1 / bias 0 would give mean 0, variance ~1
  auto g0i = random_vec<double>(N * C, 44), g0w = random_vec<double>(C, 45),
       g0b = random_vec<double>(C, 46);
  auto di = g0i, dw = g0w, db = g0b;
  cpu::layernorm_backward<double>(di.data(), dw.data(), db.data(), w.data(), inp.data(), wt.data(),
                                  mean.data(), rstd.data(), N, C);
  fd_check("dinp", inp, minus(di, g0i), loss, kH, kTol);
  fd_check("dweight", wt, minus(dw, g0w), loss, kH, kTol);
  fd_check("dbias", bs, minus(db, g0b), loss, kH, kTol);
}

TEST(KernelGrad, LayerNormNormalises) {
  const int N = 3, C = 64;
  auto inp = random_vec<float>(N * C, 47, 3.0f);
  vector<float> wt(C, 1.f), bs(C, 0.f), out(N * C), mean(N), rstd(N);
  cpu::layernorm_forward<float>(out.data(), mean.data(), rstd.data(), inp.data(), wt.data(),
                                bs.data(), N, C);
  for (int n = 0; n < N; ++n) {
    double m = 0, v = 0;
    for (int c = 0; c < C; ++c) m += out[n * C + c];
    m /= C;
    for (int c = 0; c < C; ++c) v += (out[n * C + c] - m) * (out[n * C + c] - m);
    EXPECT_NEAR(m, 0.0, 1e-5);
    EXPECT_NEAR(v / C, 1.0, 1e-3);
  }
}

// Rows a diverging run reaches: in fp32 sums, the squares overflowed from |x| ~ 7e17 (rstd 0:
// the row's output silently 0) and the sum from ~4e35 (NaN).
TEST(Kernels, LayerNormOfHugeRows) {
  const int C = 768;
  for (const float big : {1e18f, 1e20f, 1e30f}) {
    vector<float> inp(2 * C), wt(C, 1.f), bs(C, 0.f), out(2 * C), mean(2), rstd(2);
    for (int c = 0; c < C; ++c) {
      inp[c] = c % 2 ? big : -big;  // mean 0, standard deviation big
      inp[C + c] = 3e38f;           // constant: variance 0
    }
    cpu::layernorm_forward<float>(out.data(), mean.data(), rstd.data(), inp.data(), wt.data(), bs.data(), 2, C);
    EXPECT_NEAR(rstd[0] * big, 1.0f, 1e-5f) << big;
    for (int c = 0; c < C; ++c) {
      ASSERT_NEAR(out[c], c % 2 ? 1.0f : -1.0f, 1e-5f) << big << " column " << c;
      ASSERT_EQ(out[C + c], 0.0f) << "constant row, column " << c;
    }
    EXPECT_EQ(mean[1], 3e38f);
    vector<float> dout(2 * C, 1.f), dinp(2 * C, 0.f), dwt(C, 0.f), dbs(C, 0.f);
    cpu::layernorm_backward<float>(dinp.data(), dwt.data(), dbs.data(), dout.data(), inp.data(), wt.data(),
                                   mean.data(), rstd.data(), 2, C);
    for (float v : dinp) ASSERT_TRUE(std::isfinite(v)) << big;
  }
}

// ---- GELU ---------------------------------------------------------------------------
TEST(KernelGrad, Gelu) {
  const int n = 40;
  auto x = random_vec<double>(n, 50, 2.0), w = random_vec<double>(n, 51);
  vector<double> out(n);
  auto loss = [&] {
    cpu::gelu_forward<double>(out.data(), x.data(), n);
    return dot(out, w);
  };
  loss();
  EXPECT_NEAR(out[0], 0.5 * x[0] * (1 + std::tanh(0.7978845608 * (x[0] + 0.044715 * x[0] * x[0] * x[0]))), 1e-9);
  auto g0 = random_vec<double>(n, 52), g = g0;
  cpu::gelu_backward<double>(g.data(), x.data(), w.data(), n);
  fd_check("dinp", x, minus(g, g0), loss, kH, kTol);
}

TEST(KernelGrad, GeluFloatFastPathMatchesDouble) {
  // The fp32 path uses a vectorised tanh; it must agree with <cmath> to fp32 accuracy.
  const int n = 4001;
  vector<double> xd(n), od(n), gd(n, 0.0), one(n, 1.0);
  for (int i = 0; i < n; ++i) xd[i] = -20.0 + 40.0 * i / (n - 1);
  vector<float> xf(xd.begin(), xd.end()), of(n), gf(n, 0.f), onef(n, 1.f);
  for (int i = 0; i < n; ++i) xd[i] = xf[i];  // same inputs exactly
  cpu::gelu_forward<double>(od.data(), xd.data(), n);
  cpu::gelu_forward<float>(of.data(), xf.data(), n);
  cpu::gelu_backward<double>(gd.data(), xd.data(), one.data(), n);
  cpu::gelu_backward<float>(gf.data(), xf.data(), onef.data(), n);
  for (int i = 0; i < n; ++i) {
    EXPECT_NEAR(of[i], od[i], 4e-7 * std::max(1.0, std::abs(od[i]))) << "x = " << xd[i];
    EXPECT_NEAR(gf[i], gd[i], 1e-6) << "x = " << xd[i];
  }
  // A diverged run's NaNs stay NaN through the fast path, +inf stays +inf (and in a checking
  // build its exponent arithmetic stays defined: -fsanitize=undefined).
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  vector<float> bad{nan, -nan}, bad_out(2), bad_grad(2, 0.f), ones(2, 1.f);
  cpu::gelu_forward<float>(bad_out.data(), bad.data(), 2);
  cpu::gelu_backward<float>(bad_grad.data(), bad.data(), ones.data(), 2);
  for (int i = 0; i < 2; ++i) {
    EXPECT_TRUE(std::isnan(bad_out[i]));
    EXPECT_TRUE(std::isnan(bad_grad[i]));
  }
  vector<float> big{inf, -inf}, big_out(2);
  cpu::gelu_forward<float>(big_out.data(), big.data(), 2);
  EXPECT_EQ(big_out[0], inf);
  EXPECT_TRUE(big_out[1] == 0.0f || std::isnan(big_out[1]));
  // Finite but huge: the gradient is 1 (x > 0) or 0, not NaN (x * x overflowed from ~2e19).
  vector<float> huge{6e19f, 1e30f, 3e38f, -6e19f, -1e30f, -3e38f}, huge_grad(6, 0.f), six(6, 1.f);
  cpu::gelu_backward<float>(huge_grad.data(), huge.data(), six.data(), 6);
  for (int i = 0; i < 6; ++i) EXPECT_EQ(huge_grad[i], i < 3 ? 1.0f : 0.0f) << "x = " << huge[i];
}

// ---- attention ----------------------------------------------------------------------
using cpu::AttentionSaved;
class AttentionBlocks : public ::testing::TestWithParam<std::tuple<int, AttentionSaved>> {};

// Block sizes 1..T and the default, saving probabilities or log-sum-exps: the row-blocked
// GEMMs must give the same gradients.
TEST_P(AttentionBlocks, FiniteDifferences) {
  // Not a structured binding: lambdas capture those only from C++20.
  const int block = std::get<0>(GetParam());
  const AttentionSaved saves = std::get<1>(GetParam());
  const int B = 2, T = 5, C = 8, NH = 2;
  auto qkv = random_vec<double>(B * T * 3 * C, 60), w = random_vec<double>(B * T * C, 61);
  vector<double> out(B * T * C), saved(cpu::attention_saved_elems(saves, B, T, NH)),
      ws(cpu::attention_workspace_elems(T, block));
  auto loss = [&] {
    cpu::attention_forward<double>(out.data(), saved.data(), ws.data(), qkv.data(), B, T, C, NH,
                                   saves, block);
    return dot(out, w);
  };
  loss();
  auto g0 = random_vec<double>(qkv.size(), 62), g = g0;
  cpu::attention_backward<double>(g.data(), ws.data(), w.data(), qkv.data(), saved.data(), B, T,
                                  C, NH, saves, block);
  fd_check("dqkv", qkv, minus(g, g0), loss, kH, kTol);
}
INSTANTIATE_TEST_SUITE_P(KernelGrad, AttentionBlocks,
                         ::testing::Combine(::testing::Values(0, 1, 2, 3, 5),
                                            ::testing::Values(AttentionSaved::probabilities,
                                                              AttentionSaved::log_sum_exp)));

// The naive formula, per head and row; out and the probabilities both ways; causality.
TEST(KernelGrad, AttentionMatchesNaiveAndIsCausal) {
  const int B = 1, T = 6, C = 12, NH = 3, hs = C / NH;
  auto qkv = random_vec<double>(B * T * 3 * C, 63);
  vector<double> out(T * C), att(NH * T * T), lse(2 * NH * T),
      ws(cpu::attention_workspace_elems(T));
  cpu::attention_forward<double>(out.data(), att.data(), ws.data(), qkv.data(), B, T, C, NH,
                                 AttentionSaved::probabilities);
  vector<double> out_lse(T * C);
  cpu::attention_forward<double>(out_lse.data(), lse.data(), ws.data(), qkv.data(), B, T, C, NH,
                                 AttentionSaved::log_sum_exp);
  EXPECT_EQ(out_lse, out) << "the forward pass does not depend on what it saves";
  for (int h = 0; h < NH; ++h)
    for (int t = 0; t < T; ++t) {
      vector<double> s(t + 1);
      double mx = -1e300, z = 0;
      for (int j = 0; j <= t; ++j) {
        double d = 0;
        for (int k = 0; k < hs; ++k) d += qkv[t * 3 * C + h * hs + k] * qkv[j * 3 * C + C + h * hs + k];
        s[j] = d / std::sqrt(double(hs));
        mx = std::max(mx, s[j]);
      }
      for (int j = 0; j <= t; ++j) z += std::exp(s[j] - mx);
      const double* saved_lse = &lse[2 * (h * T + t)];
      EXPECT_EQ(saved_lse[0], double(halfbits::round_bf16(float(saved_lse[0]))))
          << "the head is exact in bf16";
      EXPECT_NEAR(saved_lse[0] + saved_lse[1], mx + std::log(z), 1e-12);
      for (int j = 0; j < T; ++j) {
        const double p = att[(h * T + t) * T + j];
        EXPECT_NEAR(p, j <= t ? std::exp(s[j] - mx) / z : 0.0, 1e-12);
        if (j > t) EXPECT_EQ(p, 0.0);
      }
      for (int k = 0; k < hs; ++k) {
        double y = 0;
        for (int j = 0; j <= t; ++j) y += std::exp(s[j] - mx) / z * qkv[j * 3 * C + 2 * C + h * hs + k];
        EXPECT_NEAR(out[t * C + h * hs + k], y, 1e-12);
      }
    }
  // Changing the last position's key/value leaves every earlier output unchanged.
  auto qkv2 = qkv;
  for (int c = C; c < 3 * C; ++c) qkv2[(T - 1) * 3 * C + c] += 1.0;
  vector<double> out2(T * C);
  cpu::attention_forward<double>(out2.data(), att.data(), ws.data(), qkv2.data(), B, T, C, NH,
                                 AttentionSaved::probabilities);
  for (int i = 0; i < (T - 1) * C; ++i) EXPECT_EQ(out[i], out2[i]);
}

// The float kernels in 64-row blocks, the last one partial, against double in one block, and
// backward from recomputed probabilities against backward from saved ones.
TEST(KernelGrad, AttentionFloatMatchesDouble) {
  const int B = 2, T = 150, C = 16, NH = 4, block = 64;
  auto qd = random_vec<double>(B * T * 3 * C, 64), dd = random_vec<double>(B * T * C, 65);
  vector<float> qf(qd.begin(), qd.end()), df(dd.begin(), dd.end());
  vector<double> od(B * T * C), ad(B * NH * T * T), wsd(cpu::attention_workspace_elems(T)),
      gd(qd.size(), 0.0);
  cpu::attention_forward<double>(od.data(), ad.data(), wsd.data(), qd.data(), B, T, C, NH,
                                 AttentionSaved::probabilities);
  cpu::attention_backward<double>(gd.data(), wsd.data(), dd.data(), qd.data(), ad.data(), B, T,
                                  C, NH, AttentionSaved::probabilities);
  for (const AttentionSaved saves : {AttentionSaved::probabilities, AttentionSaved::log_sum_exp}) {
    vector<float> of(B * T * C), sf(cpu::attention_saved_elems(saves, B, T, NH)),
        wsf(cpu::attention_workspace_elems(T, block)), gf(qd.size(), 0.0f);
    cpu::attention_forward<float>(of.data(), sf.data(), wsf.data(), qf.data(), B, T, C, NH, saves,
                                  block);
    cpu::attention_backward<float>(gf.data(), wsf.data(), df.data(), qf.data(), sf.data(), B, T,
                                   C, NH, saves, block);
    for (std::size_t i = 0; i < od.size(); ++i) EXPECT_NEAR(of[i], od[i], 1e-5);
    for (std::size_t i = 0; i < gd.size(); ++i) EXPECT_NEAR(gf[i], gd[i], 2e-5) << int(saves);
  }
}

// Large scores (q and k up to 100: scores of thousands, as in a run whose attention logits
// grow): backward from saved log-sum-exps agrees with backward from saved probabilities.
// Formed in fp32, the log-sum-exp lost log(sum) to rounding there: the two were 2.02 apart
// (largest gradient 2940); now 0.0107.
TEST(KernelGrad, AttentionLogSumExpAtLargeScores) {
  const int B = 1, T = 64, C = 32, NH = 2;
  auto q = random_vec<float>(B * T * 3 * C, 71, 100.0f), d = random_vec<float>(B * T * C, 72);
  vector<vector<float>> grads;
  for (const AttentionSaved saves : {AttentionSaved::probabilities, AttentionSaved::log_sum_exp}) {
    vector<float> out(B * T * C), saved(cpu::attention_saved_elems(saves, B, T, NH)),
        ws(cpu::attention_workspace_elems(T)), g(q.size(), 0.0f);
    cpu::attention_forward<float>(out.data(), saved.data(), ws.data(), q.data(), B, T, C, NH, saves);
    cpu::attention_backward<float>(g.data(), ws.data(), d.data(), q.data(), saved.data(), B, T, C, NH, saves);
    grads.push_back(g);
  }
  double largest = 0, worst = 0;
  for (std::size_t i = 0; i < q.size(); ++i) {
    largest = std::max(largest, std::fabs(double(grads[0][i])));
    worst = worse(worst, std::fabs(double(grads[1][i]) - grads[0][i]));
  }
  EXPECT_LT(worst, 1e-4 * largest) << "largest gradient " << largest << ", largest difference " << worst;
  std::printf("large scores: gradients of the two saved forms %.3g apart, largest %.3g\n", worst, largest);
}

// One query row against the keys and values of its positions (generation's key/value cache)
// gives what the forward pass over those positions gives its last row; later rows of the
// cache, NaN here, are never read.
TEST(Kernels, AttentionDecodeMatchesTheLastRowOfForward) {
  const int Tmax = 150, C = 16, NH = 4, ld = 3 * C;
  auto qd = random_vec<double>(Tmax * 3 * C, 68, 2.0);
  for (const int T : {1, 2, 63, 64, 65, 150}) {
    vector<double> od(T * C), ad(NH * T * T), wsd(cpu::attention_workspace_elems(T));
    cpu::attention_forward<double>(od.data(), ad.data(), wsd.data(), qd.data(), 1, T, C, NH,
                                   AttentionSaved::probabilities);
    vector<float> qf(qd.begin(), qd.end());
    for (std::size_t i = static_cast<std::size_t>(T) * ld; i < qf.size(); ++i)
      qf[i] = std::numeric_limits<float>::quiet_NaN();
    vector<float> out(C), ws(NH * T);
    const float* q = qf.data() + (T - 1) * ld;
    cpu::attention_decode(out.data(), ws.data(), q, qf.data() + C, qf.data() + 2 * C, T, C, NH, ld);
    for (int i = 0; i < C; ++i) EXPECT_NEAR(out[i], od[(T - 1) * C + i], 1e-5) << "T " << T;
  }
}

// Saved activations in 16 bits round both halves of each log-sum-exp: the head is exact in
// bf16, so the sum keeps about 16 bits and the gradients stay close; one bf16 value per row
// would not.
TEST(KernelGrad, AttentionLogSumExpSurvives16BitStorage) {
  const int B = 1, T = 100, C = 16, NH = 2;
  auto q = random_vec<double>(B * T * 3 * C, 66, 2.0), d = random_vec<double>(B * T * C, 67);
  vector<float> qf(q.begin(), q.end()), df(d.begin(), d.end()), out(B * T * C),
      lse(cpu::attention_saved_elems(AttentionSaved::log_sum_exp, B, T, NH)),
      ws(cpu::attention_workspace_elems(T)), exact(qf.size(), 0.0f);
  cpu::attention_forward<float>(out.data(), lse.data(), ws.data(), qf.data(), B, T, C, NH,
                                AttentionSaved::log_sum_exp);
  cpu::attention_backward<float>(exact.data(), ws.data(), df.data(), qf.data(), lse.data(), B, T,
                                 C, NH, AttentionSaved::log_sum_exp);
  // the largest gradient error, relative to the largest gradient, from these saved values
  auto error_from = [&](const vector<float>& saved) {
    vector<float> g(qf.size(), 0.0f);
    cpu::attention_backward<float>(g.data(), ws.data(), df.data(), qf.data(), saved.data(), B, T,
                                   C, NH, AttentionSaved::log_sum_exp);
    double scale = 0, worst = 0;
    for (std::size_t i = 0; i < g.size(); ++i) {
      scale = std::max(scale, double(std::fabs(exact[i])));
      worst = worse(worst, double(std::fabs(g[i] - exact[i])));
    }
    return worst / scale;
  };
  vector<float> halves = lse, whole = lse;
  for (float& x : halves) x = halfbits::round_bf16(x);
  for (std::size_t r = 0; r < whole.size(); r += 2) {
    whole[r] = halfbits::round_bf16(whole[r] + whole[r + 1]);
    whole[r + 1] = 0;
  }
  const double split = error_from(halves), single = error_from(whole);
  EXPECT_GT(split, 0.0) << "the rounding reached the gradients";
  EXPECT_LT(split, 1e-3);
  EXPECT_LT(split * 10, single);
}

// ---- input gradients written over -------------------------------------------------------
// Written over a buffer of NaN, an input gradient equals the one added into zeros, bit for
// bit: nothing of the old contents is read (linear: GEMM beta 0; attention: every query
// block adds into dK and dV, so the kernel clears dqkv first).
TEST(Kernels, BackwardWritesTheInputGradientOverOnRequest) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  {
    const int N = 5, C = 4, OC = 3;
    auto inp = random_vec<double>(N * C, 90), W = random_vec<double>(OC * C, 91),
         dout = random_vec<double>(N * OC, 92);
    vector<double> added(N * C, 0.0), written(N * C, nan), dW(OC * C, 0.0);
    cpu::linear_backward<double>(added.data(), dW.data(), nullptr, dout.data(), inp.data(),
                                 W.data(), N, C, OC);
    cpu::linear_backward<double>(written.data(), dW.data(), nullptr, dout.data(), inp.data(),
                                 W.data(), N, C, OC, /*accumulate_dinp=*/false);
    EXPECT_EQ(written, added) << "linear";
  }
  {
    const int n = 37;
    auto x = random_vec<double>(n, 93), dout = random_vec<double>(n, 94);
    vector<double> added(n, 0.0), written(n, nan);
    cpu::gelu_backward<double>(added.data(), x.data(), dout.data(), n);
    cpu::gelu_backward<double>(written.data(), x.data(), dout.data(), n, false);
    EXPECT_EQ(written, added) << "gelu, double";
    vector<float> xf(x.begin(), x.end()), df(dout.begin(), dout.end()), addedf(n, 0.0f),
        writtenf(n, std::numeric_limits<float>::quiet_NaN());
    cpu::gelu_backward<float>(addedf.data(), xf.data(), df.data(), n);
    cpu::gelu_backward<float>(writtenf.data(), xf.data(), df.data(), n, false);
    EXPECT_EQ(writtenf, addedf) << "gelu, float";
  }
  for (const int block : {0, 2}) {
    const int B = 2, T = 5, C = 8, NH = 2;
    auto qkv = random_vec<double>(B * T * 3 * C, 95), dout = random_vec<double>(B * T * C, 96);
    const AttentionSaved saves = AttentionSaved::log_sum_exp;
    vector<double> out(B * T * C), lse(cpu::attention_saved_elems(saves, B, T, NH)),
        ws(cpu::attention_workspace_elems(T, block));
    cpu::attention_forward<double>(out.data(), lse.data(), ws.data(), qkv.data(), B, T, C, NH,
                                   saves, block);
    vector<double> added(qkv.size(), 0.0), written(qkv.size(), nan);
    cpu::attention_backward<double>(added.data(), ws.data(), dout.data(), qkv.data(), lse.data(),
                                    B, T, C, NH, saves, block);
    cpu::attention_backward<double>(written.data(), ws.data(), dout.data(), qkv.data(),
                                    lse.data(), B, T, C, NH, saves, block, false);
    EXPECT_EQ(written, added) << "attention, block " << block;
  }
}

// ---- residual / elementwise ------------------------------------------------------------
TEST(Kernels, Elementwise) {
  auto a = random_vec<double>(100, 70), b = random_vec<double>(100, 71);
  vector<double> out(100);
  cpu::residual_forward<double>(out.data(), a.data(), b.data(), 100);
  for (int i = 0; i < 100; ++i) EXPECT_DOUBLE_EQ(out[i], a[i] + b[i]);
  cpu::accumulate<double>(out.data(), a.data(), 100);
  for (int i = 0; i < 100; ++i) EXPECT_DOUBLE_EQ(out[i], 2 * a[i] + b[i]);
  cpu::scale<double>(out.data(), 0.5, 100);
  EXPECT_DOUBLE_EQ(out[3], (2 * a[3] + b[3]) * 0.5);
  cpu::fill<double>(out.data(), 2.0, 100);
  EXPECT_DOUBLE_EQ(cpu::sum_squares<double>(out.data(), 100), 400.0);
  cpu::copy<double>(out.data(), b.data(), 100);
  EXPECT_DOUBLE_EQ(out[99], b[99]);
  // float sums of squares over many elements keep double accuracy
  vector<float> big(3000000, 0.1f);
  const double expect = 3000000.0 * double(0.1f) * double(0.1f);
  EXPECT_NEAR(cpu::sum_squares<float>(big.data(), big.size()), expect, expect * 1e-5);
}

// The global norm's kernel against a plain sum: every element counted once, with its own
// value, at lengths that end inside a group of four.
TEST(Kernels, SumSquaresOfEveryLength) {
  const auto x = random_vec<float>(4101, 72);
  for (const std::int64_t n : {0, 1, 2, 3, 5, 7, 8, 4097, 4101}) {
    long double want = 0;
    for (std::int64_t i = 0; i < n; ++i) want += static_cast<long double>(x[i]) * x[i];
    EXPECT_NEAR(cpu::sum_squares<float>(x.data(), n), static_cast<double>(want),
                1e-14 * static_cast<double>(want) + 1e-300)
        << "n = " << n;
  }
}

// ---- cross-entropy ----------------------------------------------------------------------
TEST(KernelGrad, CrossEntropyPaddedVocab) {
  const int N = 4, V = 7, Vp = 10;
  auto logits = random_vec<double>(N * Vp, 80, 2.0);
  const std::int32_t targets[N] = {0, 6, 3, 3};
  auto dl = random_vec<double>(N, 81);
  vector<double> losses(N), lse(N);
  auto loss = [&] {
    cpu::crossentropy_forward<double>(losses.data(), lse.data(), logits.data(), targets, N, V, Vp);
    return dot(losses, dl);
  };
  const double base = loss();
  // reference: log-softmax over the real vocabulary only
  for (int n = 0; n < N; ++n) {
    double z = 0;
    for (int j = 0; j < V; ++j) z += std::exp(logits[n * Vp + j]);
    EXPECT_NEAR(losses[n], std::log(z) - logits[n * Vp + targets[n]], 1e-12);
  }
  vector<double> dlogits(N * Vp, 123.0);  // backward writes, so junk must be overwritten
  cpu::crossentropy_backward<double>(dlogits.data(), logits.data(), lse.data(), targets, dl.data(),
                                     N, V, Vp);
  for (int n = 0; n < N; ++n)
    for (int j = V; j < Vp; ++j) EXPECT_EQ(dlogits[n * Vp + j], 0.0);
  fd_check("dlogits", logits, dlogits, loss, kH, kTol);
  // Padding columns never matter, whatever they hold (huge, NaN).
  for (int n = 0; n < N; ++n) {
    logits[n * Vp + V] = 1e300;
    logits[n * Vp + V + 1] = std::numeric_limits<double>::quiet_NaN();
  }
  EXPECT_DOUBLE_EQ(loss(), base);
  // In place (dlogits aliasing logits) gives the same gradient.
  auto inplace = logits;
  cpu::crossentropy_backward<double>(inplace.data(), inplace.data(), lse.data(), targets,
                                     dl.data(), N, V, Vp);
  for (int i = 0; i < N * Vp; ++i) EXPECT_DOUBLE_EQ(inplace[i], dlogits[i]);
}

TEST(KernelGrad, CrossEntropyStableForHugeLogits) {
  const int N = 1, V = 3, Vp = 3;
  vector<float> logits = {1000.f, 0.f, -1000.f}, losses(1), lse(1), dl = {1.f}, d(3);
  const std::int32_t t[1] = {1};
  cpu::crossentropy_forward<float>(losses.data(), lse.data(), logits.data(), t, N, V, Vp);
  EXPECT_NEAR(losses[0], 1000.f, 1e-3);
  cpu::crossentropy_backward<float>(d.data(), logits.data(), lse.data(), t, dl.data(), N, V, Vp);
  EXPECT_NEAR(d[0], 1.f, 1e-6);
  EXPECT_NEAR(d[1], -1.f, 1e-6);
  EXPECT_TRUE(std::isfinite(d[2]));
  // Equal logits far from 0 give ln(V) whatever their value: (max - target) + log(sum), where
  // max + log(sum) - target lost log(sum) to rounding (8 instead of 10.83 at 1e8).
  const int wide = 50304;
  vector<float> flat(wide), wide_loss(1), wide_lse(1);
  for (const float c : {1e4f, 1e8f, -1e30f}) {
    std::fill(flat.begin(), flat.end(), c);
    cpu::crossentropy_forward<float>(wide_loss.data(), wide_lse.data(), flat.data(), t, N, wide, wide);
    EXPECT_NEAR(wide_loss[0], std::log(double(wide)), 1e-5) << "logits " << c;
  }
}

// A masked (-inf) logit counts for nothing and gets no gradient; a NaN logit makes the loss
// NaN (divergence detection and loss scaling rely on it); fp32 agrees with double.
TEST(KernelGrad, CrossEntropyMaskedNaNAndSinglePrecision) {
  const int N = 3, V = 301, Vp = 320;
  auto wide = random_vec<double>(N * Vp, 82, 4.0);
  const std::int32_t t[N] = {5, 300, 17};
  vector<float> z(wide.begin(), wide.end()), losses(N), lse(N), dl = {0.5f, -1.5f, 2.0f};
  for (int j = 0; j < V; j += 3) z[j] = -std::numeric_limits<float>::infinity();  // row 0
  z[Vp + 40] = std::numeric_limits<float>::quiet_NaN();                             // row 1
  cpu::crossentropy_forward<float>(losses.data(), lse.data(), z.data(), t, N, V, Vp);
  double sum = 0;  // row 0 over its unmasked logits, in double
  for (int j = 0; j < V; ++j)
    if (j % 3 != 0) sum += std::exp(static_cast<double>(z[j]));
  EXPECT_NEAR(losses[0], std::log(sum) - z[t[0]], 1e-5);
  EXPECT_TRUE(std::isnan(losses[1]));
  vector<double> l2(N), lse2(N), d2(N * Vp), dl2(dl.begin(), dl.end());
  cpu::crossentropy_forward<double>(l2.data(), lse2.data(), wide.data(), t, N, V, Vp);
  EXPECT_NEAR(losses[2], l2[2], 1e-5 * std::fabs(l2[2]));  // row 2 unmasked in both
  vector<float> d(N * Vp);
  cpu::crossentropy_backward<float>(d.data(), z.data(), lse.data(), t, dl.data(), N, V, Vp);
  for (int j = 0; j < V; j += 3) EXPECT_EQ(d[j], 0.0f) << "masked logit " << j;
  cpu::crossentropy_backward<double>(d2.data(), wide.data(), lse2.data(), t, dl2.data(), N, V, Vp);
  // fp32's log-sum-exp (about 8 here) is good to an ulp of it, which exp passes on to every
  // probability: a few 1e-7 relative, times dl = 2 (1.7e-6 at 1.43 seen in a -O2 build).
  for (int j = 0; j < V; ++j)
    EXPECT_NEAR(d[2 * Vp + j], d2[2 * Vp + j], 3e-6 * std::max(1.0, std::fabs(d2[2 * Vp + j])))
        << "row 2, logit " << j;
}

// ---- optimisers ----------------------------------------------------------------------
TEST(Kernels, AdamWMatchesScalarReference) {
  const int n = 50;
  auto p = random_vec<double>(n, 90), g = random_vec<double>(n, 91);
  vector<double> m(n, 0.0), v(n, 0.0);
  auto rp = p;
  vector<double> rm(n, 0.0), rv(n, 0.0);
  const double lr = 1e-2, b1 = 0.9, b2 = 0.95, eps = 1e-8, wd = 0.1, gs = 0.5;
  for (int step = 1; step <= 3; ++step) {
    cpu::adamw<double>(p.data(), g.data(), m.data(), v.data(), n, lr, b1, b2, eps, wd, step, gs);
    for (int i = 0; i < n; ++i) {
      const double gi = g[i] * gs;
      rm[i] = b1 * rm[i] + (1 - b1) * gi;
      rv[i] = b2 * rv[i] + (1 - b2) * gi * gi;
      const double mh = rm[i] / (1 - std::pow(b1, step)), vh = rv[i] / (1 - std::pow(b2, step));
      rp[i] -= lr * (mh / (std::sqrt(vh) + eps) + wd * rp[i]);
    }
  }
  for (int i = 0; i < n; ++i) EXPECT_NEAR(p[i], rp[i], 1e-12);
}

// Single precision against the double reference over enough elements for the threaded path,
// late in a run (bias correction near 1); Adam's first step moves each weight by about lr.
TEST(Kernels, AdamWSinglePrecisionFollowsTheReference) {
  const int n = 65536 + 3;
  const auto g0 = random_vec<float>(n, 96);
  auto p = random_vec<float>(n, 97);
  vector<float> m(n, 0.0f), v(n, 0.0f);
  vector<double> rp(p.begin(), p.end()), rm(n, 0.0), rv(n, 0.0);
  const float lr = 1e-3f, b1 = 0.9f, b2 = 0.95f, eps = 1e-8f, wd = 0.1f;
  const vector<float> start = p;
  for (const long step : {1L, 2L, 1000L}) {
    vector<float> g(g0);
    for (int i = 0; i < n; i += 7) g[i] *= -3.0f;  // some gradients change sign and size
    cpu::adamw<float>(p.data(), g.data(), m.data(), v.data(), n, lr, b1, b2, eps, wd, step, 1.0f);
    for (int i = 0; i < n; ++i) {
      rm[i] = b1 * rm[i] + (1.0 - b1) * g[i];
      rv[i] = b2 * rv[i] + (1.0 - b2) * double(g[i]) * g[i];
      const double mh = rm[i] / (1 - std::pow(double(b1), step));
      const double vh = rv[i] / (1 - std::pow(double(b2), step));
      rp[i] -= lr * (mh / (std::sqrt(vh) + eps) + wd * rp[i]);
    }
    if (step == 1)
      for (int i = 0; i < n; i += 97)
        EXPECT_NEAR(std::fabs(p[i] - start[i]), lr, 0.05 * lr + lr * wd * std::fabs(start[i]));
  }
  for (int i = 0; i < n; ++i) ASSERT_NEAR(p[i], rp[i], 1e-6 * (1 + std::fabs(rp[i]))) << i;
}

// adamw_ranges: each range updated as its own adamw() would, at its offsets, with its decay;
// elements outside every range untouched.
TEST(Kernels, AdamWRangesAreAdamWCallsARange) {
  Device& dev = cpu_device();
  const int n = 64;
  auto p = random_vec<float>(n, 92), g = random_vec<float>(n, 93), m = random_vec<float>(n, 94);
  auto v = random_vec<float>(n, 95);
  for (float& x : v) x = std::fabs(x);
  auto wp = p, wm = m, wv = v;
  const std::vector<AdamWRange> ranges{{0, 10, 5, 7, 0.1f}, {20, 30, 40, 9, 0.0f}, {50, 3, 12, 0, 0.1f}};
  for (int step = 1; step <= 2; ++step) {
    dev.adamw_ranges(p.data(), g.data(), m.data(), v.data(), ranges.data(), ranges.size(), 1e-2f,
                     0.9f, 0.95f, 1e-8f, step, 0.5f);
    for (const AdamWRange& r : ranges)
      dev.adamw(wp.data() + r.param, g.data() + r.grad, wm.data() + r.state, wv.data() + r.state,
                r.n, 1e-2f, 0.9f, 0.95f, 1e-8f, r.weight_decay, step, 0.5f);
  }
  EXPECT_EQ(p, wp);
  EXPECT_EQ(m, wm);
  EXPECT_EQ(v, wv);
  EXPECT_NE(p, random_vec<float>(n, 92));
}

// Segments merge into one run where one ends where the next begins, whatever their decay;
// a gap or a step back starts a new run.
TEST(Optimizer, ContiguousRunsMergeAdjacentSegments) {
  using optim::Segment;
  const std::vector<Segment> segments{{0, 4, true}, {4, 2, false}, {6, 3, true},
                                      {10, 5, true}, {2, 1, false}, {3, 1, true}};
  std::vector<std::tuple<std::size_t, std::size_t, std::size_t>> runs;
  optim::for_each_contiguous_run(segments, [&](std::size_t offset, std::size_t n, std::size_t first) {
    runs.emplace_back(offset, n, first);
  });
  const std::vector<std::tuple<std::size_t, std::size_t, std::size_t>> want{
      {0, 9, 0}, {10, 5, 3}, {2, 2, 4}};
  EXPECT_EQ(runs, want);
  int calls = 0;
  optim::for_each_contiguous_run({}, [&](std::size_t, std::size_t, std::size_t) { ++calls; });
  EXPECT_EQ(calls, 0);
}

TEST(Kernels, SgdMomentum) {
  vector<double> p = {1.0, -2.0}, g = {0.5, 1.0}, mom = {0.0, 0.0};
  cpu::sgd<double>(p.data(), g.data(), mom.data(), 2, 0.1, 0.9, 0.0, 1.0);
  cpu::sgd<double>(p.data(), g.data(), mom.data(), 2, 0.1, 0.9, 0.0, 1.0);
  // mom1 = g, mom2 = 0.9 g + g = 1.9 g; p = p0 - 0.1 (g + 1.9 g) = p0 - 0.29 g
  EXPECT_NEAR(p[0], 1.0 - 0.29 * 0.5, 1e-14);
  EXPECT_NEAR(p[1], -2.0 - 0.29 * 1.0, 1e-14);
  EXPECT_NEAR(mom[1], 1.9, 1e-14);
  vector<double> q = {1.0};
  const double gq = 2.0;
  cpu::sgd<double>(q.data(), &gq, nullptr, 1, 0.1, 0.0, 0.5, 1.0);  // plain SGD + decay
  EXPECT_NEAR(q[0], 1.0 - 0.1 * (2.0 + 0.5), 1e-14);
}
