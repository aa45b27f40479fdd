// Every op of the CUDA device against the CPU kernel on random inputs, fp32 (run with
// DTRAIN_CUDA_TF32=0 so GEMMs are exact fp32): |gpu - cpu| <= 1e-5 * max|cpu|. Gradient
// buffers start with random values, so accumulate-vs-overwrite mistakes show.
#include <cstdlib>
#include <limits>
#include <string>

#include "cuda_kernels_fixture.hpp"
#include "device/cpu/kernels.hpp"
#include "emulator_probe.hpp"
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

TEST_F(CudaKernels, GemmAllTransposes) {
  const int M = 37, N = 53, K = 71;
  for (int ta = 0; ta < 2; ++ta) {
    for (int tb = 0; tb < 2; ++tb) {
      // padded leading dimensions: the kernels must honour lda/ldb/ldc
      const int lda = (ta ? M : K) + 3, ldb = (tb ? K : N) + 5, ldc = N + 2;
      const int rows_a = ta ? K : M, rows_b = tb ? N : K;
      auto A = random_floats(static_cast<std::size_t>(rows_a) * lda, 10 + ta);
      auto B = random_floats(static_cast<std::size_t>(rows_b) * ldb, 20 + tb);
      auto C = random_floats(static_cast<std::size_t>(M) * ldc, 30);
      auto dA = up(A), dB = up(B), dC = up(C);
      cpu.gemm(ta, tb, M, N, K, 0.7f, A.data(), lda, B.data(), ldb, 0.3f, C.data(), ldc);
      gpu.gemm(ta, tb, M, N, K, 0.7f, dA.get(), lda, dB.get(), ldb, 0.3f, dC.get(), ldc);
      expect_close(dC.host(), C, kFp32Bound,
                   "gemm trans_a=" + std::to_string(ta) + " trans_b=" + std::to_string(tb));
    }
  }
}

TEST_F(CudaKernels, GemmWithoutInnerDimensionScalesC) {
  auto C = random_floats(6 * 9, 3);
  auto dC = up(C);
  cpu.gemm(false, false, 6, 7, 0, 1.0f, nullptr, 1, nullptr, 9, 0.5f, C.data(), 9);
  gpu.gemm(false, false, 6, 7, 0, 1.0f, nullptr, 1, nullptr, 9, 0.5f, dC.get(), 9);
  EXPECT_EQ(dC.host(), C);
  // beta 0 writes zeros without reading C (a gradient written over may start as NaN)
  auto d_nan = nans(6 * 9);
  cpu.gemm(false, false, 6, 7, 0, 1.0f, nullptr, 1, nullptr, 9, 0.0f, C.data(), 9);
  gpu.gemm(false, false, 6, 7, 0, 1.0f, nullptr, 1, nullptr, 9, 0.0f, d_nan.get(), 9);
  const auto got = d_nan.host();
  for (int i = 0; i < 6; ++i)
    for (int j = 0; j < 7; ++j) {
      EXPECT_EQ(C[i * 9 + j], 0.0f);
      EXPECT_EQ(got[i * 9 + j], 0.0f);
    }
}

// Also under 16-bit operand formats, against the CPU on rounded copies of the operands (as
// GemmsUnder16BitOperandsMultiplyRoundedCopies below): the copies cover the strides.
TEST_F(CudaKernels, GemmStridedBatched) {
  for (const DType fmt : {DType::f32, DType::bf16, DType::f16}) {
    gputest::OperandFormat scoped(gpu, fmt);
    const int M = 19, N = 23, K = 29, batch = 3;
    const std::int64_t sa = M * K + 7, sb = K * N + 11, sc = M * N + 13;
    auto A = random_floats(static_cast<std::size_t>(sa * batch), 4);
    auto B = random_floats(static_cast<std::size_t>(sb * batch), 5);
    auto C = random_floats(static_cast<std::size_t>(sc * batch), 6);
    auto dA = up(A), dB = up(B), dC = up(C);
    cpu.gemm_strided_batched(false, true, M, N, K, 1.5f, as_operands(fmt, A).data(), K, sa,
                             as_operands(fmt, B).data(), K, sb, 1.0f, C.data(), N, sc, batch);
    gpu.gemm_strided_batched(false, true, M, N, K, 1.5f, dA.get(), K, sa, dB.get(), K, sb, 1.0f,
                             dC.get(), N, sc, batch);
    expect_close(dC.host(), C, kFp32Bound,
                 std::string("gemm_strided_batched ") + dtrain::dtype_name(fmt));
  }
}

TEST_F(CudaKernels, LinearForwardAndBackward) {
  const int N = 300, C = 96, OC = 130;  // N > 256: several column-sum chunks
  auto inp = random_floats(N * C, 1), w = random_floats(OC * C, 2), bias = random_floats(OC, 3);
  auto out = random_floats(N * OC, 4);  // overwritten
  auto dinp = random_floats(N * C, 5), dw = random_floats(OC * C, 6),
       db = random_floats(OC, 7);  // accumulated into
  auto dout = random_floats(N * OC, 8);
  auto d_inp = up(inp), d_w = up(w), d_bias = up(bias), d_out = up(out), d_dinp = up(dinp),
       d_dw = up(dw), d_db = up(db), d_dout = up(dout);

  cpu.linear_forward(out.data(), inp.data(), w.data(), bias.data(), N, C, OC);
  gpu.linear_forward(d_out.get(), d_inp.get(), d_w.get(), d_bias.get(), N, C, OC);
  expect_close(d_out.host(), out, kFp32Bound, "linear_forward (bias)");
  cpu.linear_forward(out.data(), inp.data(), w.data(), nullptr, N, C, OC);
  gpu.linear_forward(d_out.get(), d_inp.get(), d_w.get(), nullptr, N, C, OC);
  expect_close(d_out.host(), out, kFp32Bound, "linear_forward (no bias)");
  // joining a residual stream (written over NaN), with a bias and without (never the epilogue);
  // the CPU's is its linear layer, then the residual added, bit for bit
  const auto residual = random_floats(N * OC, 9);
  auto d_residual = up(residual);
  for (const bool with_bias : {true, false}) {
    const std::string what = with_bias ? "linear_forward_residual (bias)" : "linear_forward_residual";
    std::vector<float> want(out.size()), got(out.size());
    cpu.linear_forward(want.data(), inp.data(), w.data(), with_bias ? bias.data() : nullptr, N, C,
                       OC);
    for (std::size_t i = 0; i < want.size(); ++i) want[i] = residual[i] + want[i];
    cpu.linear_forward_residual(got.data(), residual.data(), inp.data(), w.data(),
                                with_bias ? bias.data() : nullptr, N, C, OC);
    EXPECT_EQ(got, want) << what << " on the CPU";
    auto d_joined = nans(out.size());
    gpu.linear_forward_residual(d_joined.get(), d_residual.get(), d_inp.get(), d_w.get(),
                                with_bias ? d_bias.get() : nullptr, N, C, OC);
    expect_close(d_joined.host(), want, kFp32Bound, what);
  }

  cpu.linear_backward(dinp.data(), dw.data(), db.data(), dout.data(), inp.data(), w.data(), N, C,
                      OC);
  gpu.linear_backward(d_dinp.get(), d_dw.get(), d_db.get(), d_dout.get(), d_inp.get(), d_w.get(),
                      N, C, OC);
  expect_close(d_dinp.host(), dinp, kFp32Bound, "linear_backward dinp");
  expect_close(d_dw.host(), dw, kFp32Bound, "linear_backward dweight");
  expect_close(d_db.host(), db, kFp32Bound, "linear_backward dbias");
  // optional gradients left out
  cpu.linear_backward(nullptr, dw.data(), nullptr, dout.data(), inp.data(), w.data(), N, C, OC);
  gpu.linear_backward(nullptr, d_dw.get(), nullptr, d_dout.get(), d_inp.get(), d_w.get(), N, C,
                      OC);
  expect_close(d_dw.host(), dw, kFp32Bound, "linear_backward dweight only");
  expect_close(d_db.host(), db, kFp32Bound, "linear_backward dbias untouched");
  // dinp written over (the parameter gradients still add up)
  auto d_written = nans(static_cast<std::size_t>(N) * C);
  cpu.linear_backward(dinp.data(), dw.data(), db.data(), dout.data(), inp.data(), w.data(), N, C,
                      OC, kOverwrite);
  gpu.linear_backward(d_written.get(), d_dw.get(), d_db.get(), d_dout.get(), d_inp.get(),
                      d_w.get(), N, C, OC, kOverwrite);
  expect_close(d_written.host(), dinp, kFp32Bound, "linear_backward dinp written over");
  expect_close(d_dw.host(), dw, kFp32Bound, "linear_backward dweight (dinp written over)");
  expect_close(d_db.host(), db, kFp32Bound, "linear_backward dbias (dinp written over)");
}

// Under a 16-bit GEMM operand format the GEMMs multiply 16-bit copies of their operands: the
// CPU's fp32 kernels on operands rounded to the format first give the same values up to fp32
// accumulation order (products of 16-bit values are exact in fp32). The bias and its gradient
// stay fp32. Catches an operand left unrounded and linear_backward's shared copy of dout
// going stale.
TEST_F(CudaKernels, GemmsUnder16BitOperandsMultiplyRoundedCopies) {
  for (const DType fmt : {DType::bf16, DType::f16}) {
    gputest::OperandFormat scoped(gpu, fmt);
    const std::string tag = std::string(" ") + dtrain::dtype_name(fmt);
    auto rounded = [&](const std::vector<float>& v) { return as_operands(fmt, v); };
    const int N = 300, C = 96, OC = 130;
    auto inp = random_floats(N * C, 1), w = random_floats(OC * C, 2), bias = random_floats(OC, 3);
    auto dout = random_floats(N * OC, 8);
    const auto inp16 = rounded(inp), w16 = rounded(w), dout16 = rounded(dout);
    std::vector<float> out(static_cast<std::size_t>(N) * OC);
    auto dinp = random_floats(N * C, 5), dw = random_floats(OC * C, 6), db = random_floats(OC, 7);
    auto d_inp = up(inp), d_w = up(w), d_bias = up(bias), d_out = nans(out.size()),
         d_dinp = up(dinp), d_dw = up(dw), d_db = up(db), d_dout = up(dout);
    cpu.linear_forward(out.data(), inp16.data(), w16.data(), bias.data(), N, C, OC);
    gpu.linear_forward(d_out.get(), d_inp.get(), d_w.get(), d_bias.get(), N, C, OC);
    expect_close(d_out.host(), out, kFp32Bound, "linear_forward (bias)" + tag);
    cpu.linear_backward(dinp.data(), dw.data(), nullptr, dout16.data(), inp16.data(), w16.data(),
                        N, C, OC);
    cpu.linear_backward(nullptr, nullptr, db.data(), dout.data(), inp16.data(), w16.data(), N, C,
                        OC);
    gpu.linear_backward(d_dinp.get(), d_dw.get(), d_db.get(), d_dout.get(), d_inp.get(),
                        d_w.get(), N, C, OC);
    expect_close(d_dinp.host(), dinp, kFp32Bound, "linear_backward dinp" + tag);
    expect_close(d_dw.host(), dw, kFp32Bound, "linear_backward dweight" + tag);
    expect_close(d_db.host(), db, kFp32Bound, "linear_backward dbias" + tag);
  }
}

// linear_forward adds its bias in the GEMM's epilogue (one cuBLASLt call) when every pointer
// is 16-byte aligned and otherwise lays the bias down before the GEMM; both agree with the CPU.
// On the emulator, which counts cuBLASLt's calls, also: a plan (one heuristic query) per shape
// and alignment of the operands and of the bias, reused for the same case, none for misaligned
// pointers; and under DTRAIN_CUDA_EMU_LT=0 (no algorithm found), DTRAIN_CUDA_EMU_LT=refuse (the
// matmul refuses the algorithm found: the plan is retired) or DTRAIN_CUDA_GEMM_EPILOGUE=0 (no
// plans) every call takes the other path. (The emulator refuses a plan used with pointers
// less aligned than it was made for.) A residual added in the epilogue (C, beta 1) is a case of
// its own: one more plan, one call, the CPU's linear layer plus the residual. Under 16-bit
// operands, an output wanted only as 16-bit words is one too: the epilogue writes the words.
// (Before LinearForwardKeepsABoundedNumberOfEpiloguePlans, which fills the device's plans.)
TEST_F(CudaKernels, LinearForwardBiasInTheEpilogueOrBeforeTheGemm) {
  const int N = 70, C = 48, OC = 36;  // a shape no other test uses: its plans start here
  const int spare = 64;               // floats in front: operands 4, 16 or 256 bytes aligned
  auto inp = random_floats(N * C + spare, 11), w = random_floats(OC * C + spare, 12),
       bias = random_floats(OC + spare, 13);
  auto d_inp = up(inp), d_w = up(w), d_bias = up(bias);
  OnDevice<float> d_out(gpu, static_cast<std::size_t>(N) * OC + spare);
  const auto heuristics = dtrain::test::emulator_probe("dtrain_cuda_emu_lt_heuristics");
  const auto matmuls = dtrain::test::emulator_probe("dtrain_cuda_emu_lt_matmuls");
  auto off = [](const char* name) {
    const char* v = std::getenv(name);
    return v && std::string(v) == "0";
  };
  const char* lt = std::getenv("DTRAIN_CUDA_EMU_LT");
  const bool refused = lt && std::string(lt) == "refuse";
  const bool plans = !off("DTRAIN_CUDA_GEMM_EPILOGUE"),
             found = plans && !off("DTRAIN_CUDA_EMU_LT") && !refused;
  struct Case {
    int shift;           // floats past each allocation's 256-byte aligned start
    int bias_shift;      // the same for the bias
    int new_plan;        // 1: this call makes a plan (one heuristic query)
    int aligned;         // 1: every pointer 16-byte aligned, so the epilogue can run
  };
  const Case cases[] = {{0, 0, 1, 1}, {4, 4, 1, 1}, {0, 0, 0, 1}, {0, 4, 1, 1},
                        {1, 1, 0, 0}, {0, 1, 0, 0}, {4, 4, 0, 1}};
  std::vector<float> out(static_cast<std::size_t>(N) * OC);
  for (const Case& c : cases) {
    SCOPED_TRACE("operands " + std::to_string(c.shift) + ", bias " +
                 std::to_string(c.bias_shift) + " floats past 256-byte alignment");
    const std::size_t h0 = heuristics ? heuristics() : 0, m0 = matmuls ? matmuls() : 0;
    cpu.linear_forward(out.data(), inp.data() + c.shift, w.data() + c.shift,
                       bias.data() + c.bias_shift, N, C, OC);
    gpu.linear_forward(d_out.get() + c.shift, d_inp.get() + c.shift, d_w.get() + c.shift,
                       d_bias.get() + c.bias_shift, N, C, OC);
    const std::vector<float> all = d_out.host();
    expect_close(std::vector<float>(all.begin() + c.shift, all.begin() + c.shift + N * OC), out,
                 kFp32Bound, "linear_forward");
    if (heuristics && matmuls) {
      EXPECT_EQ(heuristics() - h0, static_cast<std::size_t>(plans ? c.new_plan : 0));
      EXPECT_EQ(matmuls() - m0, static_cast<std::size_t>(found ? c.aligned : 0));
    }
  }
  {
    auto residual = random_floats(N * OC, 14);
    auto d_residual = up(residual);
    cpu.linear_forward(out.data(), inp.data(), w.data(), bias.data(), N, C, OC);
    for (std::size_t i = 0; i < out.size(); ++i) out[i] += residual[i];
    const std::size_t h0 = heuristics ? heuristics() : 0, m0 = matmuls ? matmuls() : 0;
    gpu.linear_forward_residual(d_out.get(), d_residual.get(), d_inp.get(), d_w.get(),
                                d_bias.get(), N, C, OC);
    const std::vector<float> all = d_out.host();
    expect_close(std::vector<float>(all.begin(), all.begin() + N * OC), out, kFp32Bound,
                 "linear_forward_residual");
    if (heuristics && matmuls) {
      EXPECT_EQ(heuristics() - h0, plans ? 1u : 0u) << "residual";
      EXPECT_EQ(matmuls() - m0, found ? 1u : 0u) << "residual";
    }
  }
  gputest::OperandFormat scoped(gpu, DType::bf16);
  OnDevice<float> d_ref(gpu, static_cast<std::size_t>(N) * OC);
  OnDevice<std::uint16_t> d_want(gpu, d_ref.host().size()), d_words(gpu, d_ref.host().size());
  gpu.linear_forward(d_ref.get(), d_inp.get(), d_w.get(), d_bias.get(), N, C, OC);
  gpu.convert_to_16bit(d_want.get(), d_ref.get(), N * OC, DType::bf16);
  const std::size_t h0 = heuristics ? heuristics() : 0, m0 = matmuls ? matmuls() : 0;
  gpu.linear_forward(nullptr, d_inp.get(), d_w.get(), d_bias.get(), N, C, OC, nullptr,
                     d_words.get());
  EXPECT_EQ(d_words.host(), d_want.host()) << "bf16 words alone";
  if (heuristics && matmuls) {
    EXPECT_EQ(heuristics() - h0, plans ? 1u : 0u) << "bf16 words alone";
    EXPECT_EQ(matmuls() - m0, found ? 1u : 0u) << "bf16 words alone";
  }
}

// A caller that varies the shape without end gets correct results throughout, and on the
// emulator one sees that the number of plans is capped: past the cap a new shape makes none.
TEST_F(CudaKernels, LinearForwardKeepsABoundedNumberOfEpiloguePlans) {
  const int C = 8, OC = 12, shapes = 100;  // more than BiasGemm::kMaxPlans (64)
  auto inp = random_floats(shapes * C, 21), w = random_floats(OC * C, 22),
       bias = random_floats(OC, 23);
  auto d_inp = up(inp), d_w = up(w), d_bias = up(bias);
  OnDevice<float> d_out(gpu, static_cast<std::size_t>(shapes) * OC);
  std::vector<float> out(static_cast<std::size_t>(shapes) * OC);
  const auto heuristics = dtrain::test::emulator_probe("dtrain_cuda_emu_lt_heuristics");
  std::size_t last_new = 0;
  for (int N = 1; N <= shapes; ++N) {
    const std::size_t h0 = heuristics ? heuristics() : 0;
    cpu.linear_forward(out.data(), inp.data(), w.data(), bias.data(), N, C, OC);
    gpu.linear_forward(d_out.get(), d_inp.get(), d_w.get(), d_bias.get(), N, C, OC);
    const std::vector<float> all = d_out.host();
    EXPECT_LE(gputest::relative_error(std::vector<float>(all.begin(), all.begin() + N * OC),
                                      std::vector<float>(out.begin(), out.begin() + N * OC)),
              kFp32Bound)
        << "N = " << N;  // (NaN fails too)
    if (heuristics) last_new = heuristics() - h0;
  }
  if (heuristics) EXPECT_EQ(last_new, 0u) << "a plan was made past the cap";
}

// Bias gradients over more rows than one grid's 65535 chunks of 256: every chunk counted.
// Ones sum exactly in chunks of 256 (the CPU's running sum would stall at 2^24).
TEST_F(CudaKernels, ColumnSumsOverMoreChunksThanOneGrid) {
  const int N = (65535 + 2) * 256, OC = 2;
  std::vector<float> ones(static_cast<std::size_t>(N) * OC, 1.0f);
  OnDevice<float> d_dout(gpu, ones), d_db(gpu, static_cast<std::size_t>(OC));
  gpu.linear_backward(nullptr, nullptr, d_db.get(), d_dout.get(), nullptr, nullptr, N, 1, OC);
  for (float v : d_db.host()) EXPECT_EQ(v, static_cast<float>(N));
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
// whose maximum comes first.
TEST_F(CudaKernels, CrossEntropyForwardOfAnyRowLayout) {
  const int N = 24;
  for (const auto& [V, ld] : {std::pair{301, 320}, std::pair{301, 303}, std::pair{7, 9}}) {
    auto logits = random_floats(static_cast<std::size_t>(N) * ld, 4, -30.0f, 30.0f);
    for (int j = 0; j < V; ++j) {
      logits[j] = 0.25f * j;               // row 0 rises
      logits[ld + j] = 40.0f - 0.25f * j;  // row 1 falls
    }
    auto targets = random_ints(N, 5, 0, V);
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
