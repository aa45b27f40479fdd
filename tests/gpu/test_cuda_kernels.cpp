// Every op of the CUDA device against the CPU kernel on random inputs, fp32 (run with
// DTRAIN_CUDA_TF32=0 so GEMMs are exact fp32): |gpu - cpu| <= 1e-5 * max|cpu|. Gradient
// buffers start with random values, so accumulate-vs-overwrite mistakes show. The GEMMs and
// the linear layer: test_cuda_gemm_linear.cpp; the 16-bit inputs and outputs:
// test_cuda_16bit_inputs.cpp; backward's gradients as 16-bit words:
// test_cuda_16bit_gradients.cpp (all one binary).
#include <limits>
#include <string>

#include "cuda_kernels_fixture.hpp"
#include "device/cpu/kernels.hpp"
#include "gpu_test.hpp"

namespace {

using dtrain::Device;
using dtrain::DType;
using gputest::CudaKernels;
using gputest::expect_close;
using gputest::kFp32Bound;
using gputest::OnDevice;
using gputest::random_floats;
using gputest::random_ints;

TEST_F(CudaKernels, MemoryIsZeroFilledCopiedAndReused) {
  const std::size_t n = 100003;
  OnDevice<float> zeros(gpu, n);
  for (float x : zeros.host()) ASSERT_EQ(x, 0.0f);

  const auto data = random_floats(n, 1);
  OnDevice<float> a = up(data);
  OnDevice<float> b(gpu, n);
  gpu.copy(b.get(), a.get(), n * sizeof(float), dtrain::CopyKind::device_to_device);
  EXPECT_EQ(b.host(), data);
  gpu.zero(b.get() + 10, 20 * sizeof(float));
  const auto z = b.host();
  for (int i = 10; i < 30; ++i) EXPECT_EQ(z[i], 0.0f);
  EXPECT_EQ(z[9], data[9]);
  EXPECT_EQ(z[30], data[30]);

  // the caching allocator hands the same block back for the same size
  void* p = gpu.allocate(1 << 20);
  gpu.free(p);
  void* q = gpu.allocate(1 << 20);
  EXPECT_EQ(p, q);
  gpu.free(q);
}

TEST_F(CudaKernels, EmbeddingOfAVocabularyShard) {
  const int N = 257, C = 40, start = 10, rows = 40;  // tokens outside [10, 50) give zeros
  auto tokens = random_ints(N, 1, 0, 64);
  tokens[0] = tokens[1] = tokens[2] = 12;  // repeats add into one row
  auto wte = random_floats(rows * C, 2);
  auto out = random_floats(N * C, 3), dwte = random_floats(rows * C, 4),
       dout = random_floats(N * C, 5);
  auto d_tok = up(tokens);
  auto d_wte = up(wte), d_out = up(out), d_dwte = up(dwte), d_dout = up(dout);
  cpu.embedding_forward(out.data(), tokens.data(), wte.data(), N, C, start, rows);
  gpu.embedding_forward(d_out.get(), d_tok.get(), d_wte.get(), N, C, start, rows);
  EXPECT_EQ(d_out.host(), out) << "embedding_forward copies rows exactly";
  cpu.embedding_backward(dwte.data(), dout.data(), tokens.data(), N, C, start, rows);
  gpu.embedding_backward(d_dwte.get(), d_dout.get(), d_tok.get(), N, C, start, rows);
  // Each row adds its positions in increasing order on both devices: the same bits.
  EXPECT_EQ(d_dwte.host(), dwte) << "embedding_backward sums in the CPU's order";
}

TEST_F(CudaKernels, PositionalEmbedding) {
  const int B = 3, T = 50, C = 24;
  auto out = random_floats(B * T * C, 1), wpe = random_floats(T * C, 2),
       dwpe = random_floats(T * C, 3), dout = random_floats(B * T * C, 4);
  auto d_out = up(out), d_wpe = up(wpe), d_dwpe = up(dwpe), d_dout = up(dout);
  cpu.positional_forward(out.data(), wpe.data(), B, T, C);
  gpu.positional_forward(d_out.get(), d_wpe.get(), B, T, C);
  EXPECT_EQ(d_out.host(), out);
  cpu.positional_backward(dwpe.data(), dout.data(), B, T, C);
  gpu.positional_backward(d_dwpe.get(), d_dout.get(), B, T, C);
  EXPECT_EQ(d_dwpe.host(), dwpe) << "same summation order as the CPU";
}

// Rows of up to 1024 floats in four-float steps go one warp per row (100: lanes left idle;
// 768; 1024: the most a lane holds), others a block per row (99, 1040, and an input one float
// off 16-byte alignment).
TEST_F(CudaKernels, LayerNorm) {
  struct Case {
    int N, C, offset;
  };
  for (auto [N, C, offset] : {Case{64, 100, 0}, Case{300, 768, 0}, Case{20, 1024, 0},
                              Case{20, 1040, 0}, Case{33, 99, 0}, Case{40, 768, 1}}) {
    auto inp = random_floats(static_cast<std::size_t>(N) * C, 1, 2.0f, 4.0f);  // mean far from 0
    auto w = random_floats(C, 2), b = random_floats(C, 3);
    std::vector<float> out(static_cast<std::size_t>(N) * C), mean(N), rstd(N);
    auto dinp = random_floats(static_cast<std::size_t>(N) * C, 4),
         dw = random_floats(C, 5), db = random_floats(C, 6),
         dout = random_floats(static_cast<std::size_t>(N) * C, 7);
    std::vector<float> shifted(static_cast<std::size_t>(offset), 0.0f);
    shifted.insert(shifted.end(), inp.begin(), inp.end());
    auto d_inp_buffer = up(shifted), d_w = up(w), d_b = up(b), d_dinp = up(dinp), d_dw = up(dw),
         d_db = up(db), d_dout = up(dout);
    float* d_inp = d_inp_buffer.get() + offset;
    OnDevice<float> d_out(gpu, out.size()), d_mean(gpu, N), d_rstd(gpu, N);
    cpu.layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(), w.data(), b.data(),
                          N, C);
    gpu.layernorm_forward(d_out.get(), d_mean.get(), d_rstd.get(), d_inp, d_w.get(),
                          d_b.get(), N, C);
    const std::string tag = " N=" + std::to_string(N) + " C=" + std::to_string(C) +
                            (offset ? " unaligned" : "");
    expect_close(d_out.host(), out, kFp32Bound, "layernorm_forward out" + tag);
    expect_close(d_mean.host(), mean, kFp32Bound, "layernorm_forward mean" + tag);
    expect_close(d_rstd.host(), rstd, kFp32Bound, "layernorm_forward rstd" + tag);
    // backward from the CPU's saved statistics on both sides
    auto d_mean_cpu = up(mean), d_rstd_cpu = up(rstd);
    cpu.layernorm_backward(dinp.data(), dw.data(), db.data(), dout.data(), inp.data(), w.data(),
                           mean.data(), rstd.data(), N, C);
    gpu.layernorm_backward(d_dinp.get(), d_dw.get(), d_db.get(), d_dout.get(), d_inp,
                           d_w.get(), d_mean_cpu.get(), d_rstd_cpu.get(), N, C);
    expect_close(d_dinp.host(), dinp, kFp32Bound, "layernorm_backward dinp" + tag);
    expect_close(d_dw.host(), dw, kFp32Bound, "layernorm_backward dweight" + tag);
    expect_close(d_db.host(), db, kFp32Bound, "layernorm_backward dbias" + tag);
  }
}

TEST_F(CudaKernels, Gelu) {
  const std::int64_t n = 10007;
  auto x = random_floats(n, 1, -4.0f, 4.0f);
  std::vector<float> out(n);
  auto dinp = random_floats(n, 2), dout = random_floats(n, 3);
  auto d_x = up(x), d_dinp = up(dinp), d_dout = up(dout);
  OnDevice<float> d_out(gpu, n);
  cpu.gelu_forward(out.data(), x.data(), n);
  gpu.gelu_forward(d_out.get(), d_x.get(), n);
  expect_close(d_out.host(), out, kFp32Bound, "gelu_forward");
  cpu.gelu_backward(dinp.data(), x.data(), dout.data(), n);
  gpu.gelu_backward(d_dinp.get(), d_x.get(), d_dout.get(), n);
  expect_close(d_dinp.host(), dinp, kFp32Bound, "gelu_backward");
  auto d_written = nans(n);
  cpu.gelu_backward(dinp.data(), x.data(), dout.data(), n, kOverwrite);
  gpu.gelu_backward(d_written.get(), d_x.get(), d_dout.get(), n, kOverwrite);
  expect_close(d_written.host(), dinp, kFp32Bound, "gelu_backward written over");
}

TEST_F(CudaKernels, CausalAttention) {
  namespace cpu_kernels = dtrain::cpu;
  constexpr auto kProbabilities = cpu_kernels::AttentionSaved::probabilities;
  struct Shape {
    int B, T, C, NH;
  };
  // T = 67: neither a multiple of a warp nor of a 64-row block. On the emulator
  // (96 KiB of L2) the heads go in groups of 2 at T = 67, the last of NH = 3 alone, and one
  // by one at T = 128.
  for (const Shape s : {Shape{2, 67, 48, 4}, Shape{1, 67, 48, 3}, Shape{1, 128, 64, 2}}) {
    const std::size_t nqkv = static_cast<std::size_t>(s.B) * s.T * 3 * s.C;
    const std::size_t nout = static_cast<std::size_t>(s.B) * s.T * s.C;
    const std::size_t natt = static_cast<std::size_t>(s.B) * s.NH * s.T * s.T;
    auto qkv = random_floats(nqkv, 1, -2.0f, 2.0f);
    std::vector<float> out(nout), att(natt);
    auto dqkv = random_floats(nqkv, 2), dout = random_floats(nout, 3);
    std::vector<float> ws(cpu_kernels::attention_workspace_elems(s.T));
    auto d_qkv = up(qkv), d_dqkv = up(dqkv), d_dout = up(dout);
    OnDevice<float> d_out(gpu, nout), d_att(gpu, natt),
        d_ws(gpu, std::max<std::size_t>(1, gpu.attention_workspace_floats(s.T)));
    // The CPU device saves log-sum-exps; its kernels save the probabilities on request.
    cpu_kernels::attention_forward<float>(out.data(), att.data(), ws.data(), qkv.data(), s.B, s.T,
                                          s.C, s.NH, kProbabilities);
    gpu.attention_forward(d_out.get(), d_att.get(), d_ws.get(), d_qkv.get(), s.B, s.T, s.C,
                          s.NH);
    const std::string tag = " T=" + std::to_string(s.T) + " NH=" + std::to_string(s.NH);
    expect_close(d_out.host(), out, kFp32Bound, "attention_forward out" + tag);
    const auto g_att = d_att.host();
    expect_close(g_att, att, kFp32Bound, "attention_forward probabilities" + tag);
    for (std::size_t m = 0; m < static_cast<std::size_t>(s.B * s.NH); ++m)  // masked: exact 0
      for (int t = 0; t < s.T; ++t)
        for (int j = t + 1; j < s.T; ++j)
          ASSERT_EQ(g_att[(m * s.T + t) * s.T + j], 0.0f);
    cpu_kernels::attention_backward<float>(dqkv.data(), ws.data(), dout.data(), qkv.data(),
                                           att.data(), s.B, s.T, s.C, s.NH, kProbabilities);
    gpu.attention_backward(d_dqkv.get(), d_ws.get(), d_dout.get(), d_qkv.get(), d_out.get(),
                           d_att.get(), s.B, s.T, s.C, s.NH);
    expect_close(d_dqkv.host(), dqkv, kFp32Bound, "attention_backward dqkv" + tag);
    auto d_written = nans(nqkv);
    cpu_kernels::attention_backward<float>(dqkv.data(), ws.data(), dout.data(), qkv.data(),
                                           att.data(), s.B, s.T, s.C, s.NH, kProbabilities, 0,
                                           /*accumulate=*/false);
    gpu.attention_backward(d_written.get(), d_ws.get(), d_dout.get(), d_qkv.get(), d_out.get(),
                           d_att.get(), s.B, s.T, s.C, s.NH, kOverwrite);
    expect_close(d_written.host(), dqkv, kFp32Bound, "attention_backward written over" + tag);
  }
}

// One query row against a cache of T positions, rows ld apart (generation), at T below, at
// and above a block's 256 threads; cache rows past T are NaN and must not be read.
TEST_F(CudaKernels, AttentionDecode) {
  const int C = 48, NH = 3, ld = 3 * C, Tmax = 300;
  auto cache = random_floats(static_cast<std::size_t>(Tmax) * ld, 1, -2.0f, 2.0f);
  for (const int T : {1, 31, 256, 257, 300}) {
    auto rows = cache;
    for (std::size_t i = static_cast<std::size_t>(T) * ld; i < rows.size(); ++i)
      rows[i] = std::numeric_limits<float>::quiet_NaN();
    auto q = random_floats(C, 2 + T, -2.0f, 2.0f);
    std::vector<float> out(C), ws(static_cast<std::size_t>(NH) * T);
    cpu.attention_decode(out.data(), ws.data(), q.data(), rows.data() + C, rows.data() + 2 * C,
                         T, C, NH, ld);
    auto d_rows = up(rows), d_q = up(q), d_out = nans(C);
    OnDevice<float> d_ws(gpu, ws.size());
    gpu.attention_decode(d_out.get(), d_ws.get(), d_q.get(), d_rows.get() + C,
                         d_rows.get() + 2 * C, T, C, NH, ld);
    expect_close(d_out.host(), out, kFp32Bound, "attention_decode T=" + std::to_string(T));
  }
}

// The fused kernels of 16-bit GEMM operands against the CPU's fp32 kernels, within the
// format's precision: Q, K, V, the probabilities, dout and the score gradients are rounded
// to 16 bits as GEMM operands. Head sizes 16 to 64; T below, at and past a 64-row block.
// Backward again after the saved log-sum-exp went through 16-bit saved activations' rounding.
TEST_F(CudaKernels, FusedAttentionUnder16BitOperands) {
  struct Shape {
    int B, T, C, NH;
  };
  struct Format {
    DType fmt;
    double bound, saved_bound;  // against the CPU; after rounding the saved values
  };
  for (const Format f : {Format{DType::bf16, 1e-2, 1e-3}, Format{DType::f16, 1.5e-3, 1.5e-4}}) {
    gputest::OperandFormat scoped(gpu, f.fmt);
    for (const Shape s : {Shape{2, 67, 64, 4}, Shape{1, 130, 96, 3}, Shape{1, 64, 48, 1},
                          Shape{1, 40, 128, 2}}) {
      const std::size_t nqkv = static_cast<std::size_t>(s.B) * s.T * 3 * s.C;
      const std::size_t nout = static_cast<std::size_t>(s.B) * s.T * s.C;
      const std::size_t nsaved = gpu.attention_saved_floats(s.B, s.T, s.C, s.NH);
      ASSERT_EQ(nsaved, 2u * s.B * s.NH * s.T) << "one log-sum-exp (two floats) per row";
      auto qkv = random_floats(nqkv, 1, -2.0f, 2.0f);
      std::vector<float> out(nout), att(cpu.attention_saved_floats(s.B, s.T, s.C, s.NH));
      auto dqkv = random_floats(nqkv, 2), dout = random_floats(nout, 3);
      std::vector<float> ws(cpu.attention_workspace_floats(s.T));
      auto d_qkv = up(qkv), d_dout = up(dout);
      OnDevice<float> d_out(gpu, nout), d_saved(gpu, nsaved), d_ws(gpu, 1);
      cpu.attention_forward(out.data(), att.data(), ws.data(), qkv.data(), s.B, s.T, s.C, s.NH);
      gpu.attention_forward(d_out.get(), d_saved.get(), d_ws.get(), d_qkv.get(), s.B, s.T, s.C,
                            s.NH);
      const std::string tag = std::string(" ") + dtrain::dtype_name(f.fmt) +
                              " hs=" + std::to_string(s.C / s.NH) + " T=" + std::to_string(s.T);
      expect_close(d_out.host(), out, f.bound, "fused attention out" + tag);
      {  // rows that are not 16-byte aligned are read a float at a time: the same output
        OnDevice<float> shifted(gpu, nqkv + 1), d_out2(gpu, nout), d_saved2(gpu, nsaved);
        gpu.copy(shifted.get() + 1, d_qkv.get(), nqkv * sizeof(float),
                 dtrain::CopyKind::device_to_device);
        gpu.attention_forward(d_out2.get(), d_saved2.get(), d_ws.get(), shifted.get() + 1, s.B,
                              s.T, s.C, s.NH);
        EXPECT_TRUE(d_out2.host() == d_out.host()) << "fused attention from unaligned rows" << tag;
      }
      auto d_dqkv = up(dqkv);
      gpu.attention_backward(d_dqkv.get(), d_ws.get(), d_dout.get(), d_qkv.get(), d_out.get(),
                             d_saved.get(), s.B, s.T, s.C, s.NH);
      const auto fused = d_dqkv.host();
      cpu.attention_backward(dqkv.data(), ws.data(), dout.data(), qkv.data(), out.data(),
                             att.data(), s.B, s.T, s.C, s.NH);
      expect_close(fused, dqkv, f.bound, "fused attention dqkv" + tag);
      auto d_written = nans(nqkv);
      gpu.attention_backward(d_written.get(), d_ws.get(), d_dout.get(), d_qkv.get(), d_out.get(),
                             d_saved.get(), s.B, s.T, s.C, s.NH, kOverwrite);
      cpu.attention_backward(dqkv.data(), ws.data(), dout.data(), qkv.data(), out.data(),
                             att.data(), s.B, s.T, s.C, s.NH, kOverwrite);
      expect_close(d_written.host(), dqkv, f.bound, "fused attention written over" + tag);

      OnDevice<std::uint16_t> rounded(gpu, nsaved);
      gpu.convert_to_16bit(rounded.get(), d_saved.get(), static_cast<std::int64_t>(nsaved), f.fmt);
      gpu.convert_from_16bit(d_saved.get(), rounded.get(), static_cast<std::int64_t>(nsaved), f.fmt);
      auto d_dqkv2 = up(random_floats(nqkv, 2));
      gpu.attention_backward(d_dqkv2.get(), d_ws.get(), d_dout.get(), d_qkv.get(), d_out.get(),
                             d_saved.get(), s.B, s.T, s.C, s.NH);
      expect_close(d_dqkv2.host(), fused, f.saved_bound, "... from a 16-bit saved log-sum-exp" + tag);
    }
    // a head size the fused kernels do not serve: the probabilities are saved
    EXPECT_EQ(gpu.attention_saved_floats(2, 10, 48, 2), 2u * 2 * 10 * 10);
  }
  EXPECT_EQ(gpu.attention_saved_floats(2, 10, 64, 4), 2u * 4 * 10 * 10);
}

TEST_F(CudaKernels, Elementwise) {
  const std::int64_t n = 1000003;
  auto a = random_floats(n, 1), b = random_floats(n, 2);
  auto d_a = up(a), d_b = up(b);
  OnDevice<float> d_out(gpu, n);
  std::vector<float> out(n);
  cpu.residual_forward(out.data(), a.data(), b.data(), n);
  gpu.residual_forward(d_out.get(), d_a.get(), d_b.get(), n);
  EXPECT_EQ(d_out.host(), out);
  cpu.accumulate(a.data(), b.data(), n);
  gpu.accumulate(d_a.get(), d_b.get(), n);
  EXPECT_EQ(d_a.host(), a);
  cpu.scale(a.data(), 0.37f, n);
  gpu.scale(d_a.get(), 0.37f, n);
  EXPECT_EQ(d_a.host(), a);
  cpu.copy_floats(out.data(), a.data(), n);
  gpu.copy_floats(d_out.get(), d_a.get(), n);
  EXPECT_EQ(d_out.host(), out);
  cpu.fill(out.data() + 5, -2.5f, 1000);
  gpu.fill(d_out.get() + 5, -2.5f, 1000);
  EXPECT_EQ(d_out.host(), out);
  // sum of squares in double: only the summation order differs
  const double want = cpu.sum_squares(a.data(), n), got = gpu.sum_squares(d_a.get(), n);
  EXPECT_NEAR(got, want, 1e-12 * want);
  EXPECT_EQ(gpu.sum_squares(d_a.get(), 0), 0.0);
  // many runs at once (the gradient norm): each as its own sum_squares, empty runs give 0,
  // about 333 000 runs (more than one grid's 65535 blocks) all get their sums, and runs
  // longer than the device cuts into pieces (the whole array; 65536 + 1) are summed whole
  std::vector<std::int64_t> starts{0, 5}, lengths{n, 65537};
  for (std::int64_t at = 0; at + 7 <= n; at += 3) {  // overlapping runs are allowed
    starts.push_back(at);
    lengths.push_back(at % 5 == 0 ? 0 : 7);
  }
  std::vector<double> sums(starts.size(), -1.0);
  gpu.sum_squares_runs(d_a.get(), starts.data(), lengths.data(), starts.size(), sums.data());
  for (std::size_t i = 0; i < sums.size(); ++i) {
    const double w = cpu.sum_squares(a.data() + starts[i], lengths[i]);
    ASSERT_NEAR(sums[i], w, 1e-12 * w) << "run " << i;
  }
}

TEST_F(CudaKernels, CrossEntropy) {
  const int N = 50, V = 300, Vp = 320;
  auto logits = random_floats(static_cast<std::size_t>(N) * Vp, 1, -4.0f, 4.0f);
  auto targets = random_ints(N, 2, 0, V);
  auto dlosses = random_floats(N, 3);
  std::vector<float> losses(N), lse(N), dlogits(logits.size());
  auto d_logits = up(logits), d_dlosses = up(dlosses);
  auto d_targets = up(targets);
  OnDevice<float> d_losses(gpu, N), d_lse(gpu, N), d_dlogits(gpu, logits.size());
  cpu.crossentropy_forward(losses.data(), lse.data(), logits.data(), targets.data(), N, V, Vp);
  gpu.crossentropy_forward(d_losses.get(), d_lse.get(), d_logits.get(), d_targets.get(), N, V, Vp);
  expect_close(d_losses.host(), losses, kFp32Bound, "crossentropy_forward losses");
  expect_close(d_lse.host(), lse, kFp32Bound, "crossentropy_forward lse");
  cpu.crossentropy_backward(dlogits.data(), logits.data(), lse.data(), targets.data(),
                            dlosses.data(), N, V, Vp);
  gpu.crossentropy_backward(d_dlogits.get(), d_logits.get(), d_lse.get(), d_targets.get(),
                            d_dlosses.get(), N, V, Vp);
  expect_close(d_dlogits.host(), dlogits, kFp32Bound, "crossentropy_backward");
  // in place over the logits, as the model calls it
  gpu.crossentropy_backward(d_logits.get(), d_logits.get(), d_lse.get(), d_targets.get(),
                            d_dlosses.get(), N, V, Vp);
  expect_close(d_logits.host(), dlogits, kFp32Bound, "crossentropy_backward in place");
}

// The forward reads a row once (a running maximum and sum), four floats at a time where the
// row is 16-byte aligned: a vocabulary with a tail of single floats, rows of every alignment
// (ld 303), and rows where each column is a new maximum (every step rescales the sum) or
// whose maximum comes first, and a row masked with -inf (where a thread's first element is
// -inf, exp(-inf - -inf) made the sum NaN).
TEST_F(CudaKernels, CrossEntropyForwardOfAnyRowLayout) {
  const int N = 24;
  for (const auto& [V, ld] : {std::pair{301, 320}, std::pair{301, 303}, std::pair{7, 9}}) {
    auto logits = random_floats(static_cast<std::size_t>(N) * ld, 4, -30.0f, 30.0f);
    for (int j = 0; j < V; ++j) {
      logits[j] = 0.25f * j;               // row 0 rises
      logits[ld + j] = 40.0f - 0.25f * j;  // row 1 falls
      if (j % 3 != 1) logits[2 * ld + j] = -INFINITY;  // row 2: two thirds masked
    }
    auto targets = random_ints(N, 5, 0, V);
    targets[2] = 1;
    std::vector<float> losses(N), lse(N);
    auto d_logits = up(logits);
    auto d_targets = up(targets);
    OnDevice<float> d_losses(gpu, N), d_lse(gpu, N);
    cpu.crossentropy_forward(losses.data(), lse.data(), logits.data(), targets.data(), N, V, ld);
    gpu.crossentropy_forward(d_losses.get(), d_lse.get(), d_logits.get(), d_targets.get(), N, V, ld);
    const std::string tag = " V " + std::to_string(V) + " ld " + std::to_string(ld);
    expect_close(d_losses.host(), losses, kFp32Bound, "crossentropy_forward losses" + tag);
    expect_close(d_lse.host(), lse, kFp32Bound, "crossentropy_forward lse" + tag);
  }
}

TEST_F(CudaKernels, CrossEntropyOfVocabularyShards) {
  const int N = 40, ld = 128;
  auto targets = random_ints(N, 2, 0, 400);
  auto dlosses = random_floats(N, 3);
  auto d_targets = up(targets);
  auto d_dlosses = up(dlosses);
  struct Shard {
    int start, V;
  };
  for (const Shard sh : {Shard{100, 120}, Shard{0, 128}, Shard{300, 0}}) {
    const std::string tag = " start=" + std::to_string(sh.start) + " V=" + std::to_string(sh.V);
    auto logits = random_floats(static_cast<std::size_t>(N) * ld, 1, -4.0f, 4.0f);
    std::vector<float> mx(N), tl(N), se(N), losses(N), lse(N), dl(logits.size());
    auto d_logits = up(logits);
    OnDevice<float> d_mx(gpu, N), d_tl(gpu, N), d_se(gpu, N), d_losses(gpu, N), d_lse(gpu, N);
    cpu.crossentropy_shard_stats(mx.data(), tl.data(), logits.data(), targets.data(), N, sh.V, ld,
                                 sh.start);
    gpu.crossentropy_shard_stats(d_mx.get(), d_tl.get(), d_logits.get(), d_targets.get(), N, sh.V,
                                 ld, sh.start);
    const auto g_mx = d_mx.host();
    if (sh.V == 0) {
      for (int n = 0; n < N; ++n) EXPECT_EQ(g_mx[n], -std::numeric_limits<float>::infinity());
    } else {
      EXPECT_EQ(g_mx, mx) << "max is exact" << tag;
    }
    EXPECT_EQ(d_tl.host(), tl) << "target logit is exact" << tag;
    if (sh.V == 0) continue;
    cpu.crossentropy_shard_sumexp(se.data(), logits.data(), mx.data(), N, sh.V, ld);
    gpu.crossentropy_shard_sumexp(d_se.get(), d_logits.get(), d_mx.get(), N, sh.V, ld);
    expect_close(d_se.host(), se, kFp32Bound, "crossentropy_shard_sumexp" + tag);
    auto d_se_cpu = up(se);
    cpu.crossentropy_shard_finish(losses.data(), lse.data(), mx.data(), se.data(), tl.data(), N);
    gpu.crossentropy_shard_finish(d_losses.get(), d_lse.get(), d_mx.get(), d_se_cpu.get(),
                                  d_tl.get(), N);
    expect_close(d_losses.host(), losses, kFp32Bound, "crossentropy_shard_finish losses" + tag);
    expect_close(d_lse.host(), lse, kFp32Bound, "crossentropy_shard_finish lse" + tag);
    auto d_lse_cpu = up(lse);
    cpu.crossentropy_shard_backward(logits.data(), logits.data(), lse.data(), targets.data(),
                                    dlosses.data(), N, sh.V, ld, sh.start);
    gpu.crossentropy_shard_backward(d_logits.get(), d_logits.get(), d_lse_cpu.get(),
                                    d_targets.get(), d_dlosses.get(), N, sh.V, ld, sh.start);
    expect_close(d_logits.host(), logits, kFp32Bound, "crossentropy_shard_backward" + tag);
  }
}

TEST_F(CudaKernels, AdamW) {
  const std::int64_t n = 10001;
  auto p = random_floats(n, 1), g = random_floats(n, 2), m = random_floats(n, 3);
  auto v = random_floats(n, 4, 0.0f, 0.01f);
  auto d_p = up(p), d_g = up(g), d_m = up(m), d_v = up(v);
  for (int step = 1; step <= 3; ++step) {
    cpu.adamw(p.data(), g.data(), m.data(), v.data(), n, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, step,
              0.5f);
    gpu.adamw(d_p.get(), d_g.get(), d_m.get(), d_v.get(), n, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f,
              step, 0.5f);
  }
  expect_close(d_p.host(), p, kFp32Bound, "adamw param");
  expect_close(d_m.host(), m, kFp32Bound, "adamw m");
  expect_close(d_v.host(), v, kFp32Bound, "adamw v");
}

// adamw_ranges in batched launches: bit for bit the ranges' own adamw calls, over more ranges
// than one launch takes (40), empty ones, and one longer than its blocks cover in one sweep.
TEST_F(CudaKernels, AdamWRangesMatchOneCallARange) {
  std::vector<dtrain::AdamWRange> ranges;
  std::int64_t param = 0, state = 0;
  for (int i = 0; i < 40; ++i) {
    const std::int64_t n = i == 7 ? 600000 : (i % 5 == 0 ? 0 : 37 * i + 1);
    ranges.push_back({param, param + 3, state, n, i % 2 ? 0.1f : 0.0f});
    param += n + 5;
    state += n;
  }
  const auto np = static_cast<std::size_t>(param + 8), ns = static_cast<std::size_t>(state);
  const auto p = random_floats(np, 1), g = random_floats(np, 2), m = random_floats(ns, 3);
  const auto v = random_floats(ns, 4, 0.0f, 0.01f);
  auto d_p = up(p), d_g = up(g), d_m = up(m), d_v = up(v);
  auto w_p = up(p), w_m = up(m), w_v = up(v);
  for (int step = 1; step <= 2; ++step) {
    gpu.adamw_ranges(d_p.get(), d_g.get(), d_m.get(), d_v.get(), ranges.data(), ranges.size(),
                     1e-2f, 0.9f, 0.95f, 1e-8f, step, 0.5f);
    for (const dtrain::AdamWRange& r : ranges)
      gpu.adamw(w_p.get() + r.param, d_g.get() + r.grad, w_m.get() + r.state,
                w_v.get() + r.state, r.n, 1e-2f, 0.9f, 0.95f, 1e-8f, r.weight_decay, step, 0.5f);
  }
  EXPECT_EQ(d_p.host(), w_p.host());
  EXPECT_EQ(d_m.host(), w_m.host());
  EXPECT_EQ(d_v.host(), w_v.host());
  EXPECT_NE(d_p.host(), p);
}

TEST_F(CudaKernels, Sgd) {
  const std::int64_t n = 10001;
  auto p = random_floats(n, 1), g = random_floats(n, 2), mom = random_floats(n, 3);
  auto d_p = up(p), d_g = up(g), d_mom = up(mom);
  cpu.sgd(p.data(), g.data(), mom.data(), n, 0.1f, 0.9f, 0.01f, 2.0f);
  gpu.sgd(d_p.get(), d_g.get(), d_mom.get(), n, 0.1f, 0.9f, 0.01f, 2.0f);
  expect_close(d_p.host(), p, kFp32Bound, "sgd momentum param");
  expect_close(d_mom.host(), mom, kFp32Bound, "sgd momentum buffer");
  cpu.sgd(p.data(), g.data(), nullptr, n, 0.1f, 0.0f, 0.01f, 1.0f);
  gpu.sgd(d_p.get(), d_g.get(), nullptr, n, 0.1f, 0.0f, 0.01f, 1.0f);
  expect_close(d_p.host(), p, kFp32Bound, "sgd plain");
}

}  // namespace
