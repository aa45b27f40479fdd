// The CUDA device's GEMMs and linear layer against the CPU kernels on random inputs, fp32
// (run with DTRAIN_CUDA_TF32=0 so GEMMs are exact fp32) and under 16-bit operand formats; the
// bias and the residual in cuBLASLt's epilogue, its plans and its fallbacks; column sums.
// Gradient buffers start with random values, so accumulate-vs-overwrite mistakes show.
#include <cstdlib>
#include <string>

#include "cuda_kernels_fixture.hpp"
#include "emulator_probe.hpp"
#include "gpu_test.hpp"

namespace {

using dtrain::DType;
using gputest::CudaKernels;
using gputest::expect_close;
using gputest::kFp32Bound;
using gputest::OnDevice;
using gputest::random_floats;

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
// pointers; and under DTRAIN_CUDA_EMU_LT=0 (no algorithm found), =invalid (an fp32 bias with a
// 16-bit D turned down: the fp32 epilogue's result is rounded after it), =refuse (the matmul
// refuses the algorithm found: the plan is retired) or DTRAIN_CUDA_GEMM_EPILOGUE=0 (no
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
  // cuBLASLt may take another algorithm for a 16-bit output: a word may be one unit off.
  gputest::expect_gemm_words_match_rounding(d_words.host(), d_want.host(), DType::bf16, "bf16 words alone");
  if (heuristics && matmuls) {
    EXPECT_EQ(heuristics() - h0, plans ? 1u : 0u) << "bf16 words alone";
    // (Under =invalid the 16-bit plan is turned down and the fp32 plan's matmul writes the
    // result that is rounded after it: one matmul either way.)
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

}  // namespace
