// The CUDA device reading 16-bit copies a caller already has (the "...16" arguments of
// Device): each gives exactly what the fp32 values it stands for give, and is what is read.
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "cuda_kernels_fixture.hpp"
#include "gpu_test.hpp"

namespace {

using dtrain::Device;
using dtrain::DType;
using gputest::AttentionShape;
using gputest::CudaKernels;
using gputest::OnDevice;
using gputest::random_floats;
using gputest::random_ints;

// A caller's 16-bit copy of a linear layer's input (inp16) or output gradient (dout16) is the
// GEMM operand as it is: the same results bit for bit as rounding inp / dout, with and
// without a bias, and backward also without the fp32 values; a copy of other values changes
// them (it is what is read). Under fp32 operands inp16 is ignored and backward needs inp; the
// CPU multiplies fp32 and needs them too.
TEST_F(CudaKernels, LinearLayerReadsTheCallersSixteenBitOperands) {
  const int N = 300, C = 96, OC = 130;
  const std::size_t NC = static_cast<std::size_t>(N) * C;
  auto d_inp = up(random_floats(NC, 1)), d_other = up(random_floats(NC, 9));
  auto d_w = up(random_floats(OC * C, 2)), d_bias = up(random_floats(OC, 3));
  auto d_dout = up(random_floats(N * OC, 8));
  const auto dinp0 = random_floats(NC, 5), dw0 = random_floats(OC * C, 6),
             db0 = random_floats(OC, 7);
  OnDevice<float> d_ref(gpu, static_cast<std::size_t>(N) * OC), d_got(gpu, d_ref.host().size());
  OnDevice<std::uint16_t> d_inp16(gpu, NC), d_other16(gpu, NC);
  OnDevice<std::uint16_t> d_dout16(gpu, static_cast<std::size_t>(N) * OC);
  EXPECT_EQ(gpu.gemm_operand_format(), DType::f32);
  {
    gputest::OperandFormat scoped(cpu, DType::bf16);
    EXPECT_EQ(cpu.gemm_operand_format(), DType::f32) << "the CPU multiplies fp32";
  }
  for (const DType fmt : {DType::bf16, DType::f16}) {
    gputest::OperandFormat scoped(gpu, fmt);
    const std::string tag = std::string(" ") + dtrain::dtype_name(fmt);
    EXPECT_EQ(gpu.gemm_operand_format(), fmt);
    gpu.convert_to_16bit(d_inp16.get(), d_inp.get(), static_cast<std::int64_t>(NC), fmt);
    gpu.convert_to_16bit(d_dout16.get(), d_dout.get(), static_cast<std::int64_t>(N) * OC, fmt);
    gpu.convert_to_16bit(d_other16.get(), d_other.get(), static_cast<std::int64_t>(NC), fmt);
    for (float* bias : {d_bias.get(), static_cast<float*>(nullptr)}) {
      const std::string what = "linear_forward" + tag + (bias ? " (bias)" : "");
      gpu.linear_forward(d_ref.get(), d_inp.get(), d_w.get(), bias, N, C, OC);
      gpu.linear_forward(d_got.get(), d_inp.get(), d_w.get(), bias, N, C, OC, d_inp16.get());
      EXPECT_EQ(d_got.host(), d_ref.host()) << what;
      gpu.linear_forward(d_got.get(), d_inp.get(), d_w.get(), bias, N, C, OC, d_other16.get());
      EXPECT_NE(d_got.host(), d_ref.host()) << what << ": inp16 was not read";
    }
    for (const bool with_dinp : {true, false}) {
      const std::string what = "linear_backward" + tag + (with_dinp ? "" : " (dweight only)");
      auto r_dinp = up(dinp0), r_dw = up(dw0), r_db = up(db0);
      auto g_dinp = up(dinp0), g_dw = up(dw0), g_db = up(db0), o_dw = up(dw0);
      gpu.linear_backward(with_dinp ? r_dinp.get() : nullptr, r_dw.get(), r_db.get(),
                          d_dout.get(), d_inp.get(), d_w.get(), N, C, OC);
      gpu.linear_backward(with_dinp ? g_dinp.get() : nullptr, g_dw.get(), g_db.get(),
                          d_dout.get(), nullptr, d_w.get(), N, C, OC,
                          Device::GradWrite::accumulate, d_inp16.get());
      EXPECT_EQ(g_dinp.host(), r_dinp.host()) << what;
      EXPECT_EQ(g_dw.host(), r_dw.host()) << what;
      EXPECT_EQ(g_db.host(), r_db.host()) << what;
      gpu.linear_backward(nullptr, o_dw.get(), nullptr, d_dout.get(), nullptr, d_w.get(), N, C,
                          OC, Device::GradWrite::accumulate, d_other16.get());
      EXPECT_NE(o_dw.host(), r_dw.host()) << what << ": inp16 was not read";
      // dout16 alone (no bias gradient: that sums the fp32 dout)
      auto r2_dinp = up(dinp0), r2_dw = up(dw0), g2_dinp = up(dinp0), g2_dw = up(dw0);
      gpu.linear_backward(with_dinp ? r2_dinp.get() : nullptr, r2_dw.get(), nullptr,
                          d_dout.get(), d_inp.get(), d_w.get(), N, C, OC);
      gpu.linear_backward(with_dinp ? g2_dinp.get() : nullptr, g2_dw.get(), nullptr, nullptr,
                          nullptr, d_w.get(), N, C, OC, Device::GradWrite::accumulate,
                          d_inp16.get(), d_dout16.get());
      EXPECT_EQ(g2_dinp.host(), r2_dinp.host()) << what << " from dout16";
      EXPECT_EQ(g2_dw.host(), r2_dw.host()) << what << " from dout16";
    }
    auto db = up(db0), dw = up(dw0);
    EXPECT_THROW(gpu.linear_backward(nullptr, dw.get(), db.get(), nullptr, d_inp.get(), d_w.get(),
                                     N, C, OC, Device::GradWrite::accumulate, nullptr,
                                     d_dout16.get()),
                 dtrain::Error)
        << "a bias gradient from dout16 alone";
  }
  gpu.linear_forward(d_ref.get(), d_inp.get(), d_w.get(), d_bias.get(), N, C, OC);
  gpu.linear_forward(d_got.get(), d_inp.get(), d_w.get(), d_bias.get(), N, C, OC,
                     d_other16.get());
  EXPECT_EQ(d_got.host(), d_ref.host()) << "fp32 operands read inp16";
  auto dw = up(dw0);
  EXPECT_THROW(gpu.linear_backward(nullptr, dw.get(), nullptr, d_dout.get(), nullptr, d_w.get(), N,
                                   C, OC, Device::GradWrite::accumulate, d_inp16.get()),
               dtrain::Error);
  std::vector<float> cpu_dw = dw0;
  const std::vector<std::uint16_t> words(NC);
  EXPECT_THROW(cpu.linear_backward(nullptr, cpu_dw.data(), nullptr, d_dout.host().data(), nullptr,
                                   d_w.host().data(), N, C, OC, Device::GradWrite::accumulate,
                                   words.data()),
               dtrain::Error);
}

// A linear layer's output as 16-bit words (out16) is its fp32 output rounded: alone (the GEMM
// rounds its own result where cuBLAS(Lt) can, with the bias added before:
// expect_gemm_words_match_rounding), next to the fp32 output (bit for bit), from a 16-bit
// input, without inner products (the bias or zeros). Only under 16-bit GEMM operands, never
// on the CPU. (That the epilogue writes the words:
// LinearForwardBiasInTheEpilogueOrBeforeTheGemm.)
TEST_F(CudaKernels, LinearForwardWrites16BitOutput) {
  const int N = 300, C = 96, OC = 136;
  const std::size_t NC = static_cast<std::size_t>(N) * C, NO = static_cast<std::size_t>(N) * OC;
  auto d_inp = up(random_floats(NC, 1)), d_w = up(random_floats(OC * C, 2)),
       d_bias = up(random_floats(OC, 3));
  OnDevice<float> d_ref(gpu, NO), d_out(gpu, NO);
  OnDevice<std::uint16_t> d_inp16(gpu, NC), d_want(gpu, NO), d_got(gpu, NO);
  for (const DType fmt : {DType::bf16, DType::f16}) {
    gputest::OperandFormat scoped(gpu, fmt);
    gpu.convert_to_16bit(d_inp16.get(), d_inp.get(), static_cast<std::int64_t>(NC), fmt);
    for (float* bias : {d_bias.get(), static_cast<float*>(nullptr)}) {
      for (const int K : {C, 0}) {
        const std::string what = std::string(dtrain::dtype_name(fmt)) +
                                 (bias ? " (bias)" : "") + (K ? "" : " without products");
        gpu.linear_forward(d_ref.get(), d_inp.get(), d_w.get(), bias, N, K, OC);
        gpu.convert_to_16bit(d_want.get(), d_ref.get(), static_cast<std::int64_t>(NO), fmt);
        gpu.linear_forward(nullptr, d_inp.get(), d_w.get(), bias, N, K, OC, nullptr, d_got.get());
        gputest::expect_gemm_words_match_rounding(d_got.host(), d_want.host(), fmt,
                                                  what + ": alone");
        gpu.linear_forward(d_out.get(), d_inp.get(), d_w.get(), bias, N, K, OC, nullptr,
                           d_got.get());
        EXPECT_EQ(d_out.host(), d_ref.host()) << what << ": beside the fp32 output";
        EXPECT_EQ(d_got.host(), d_want.host()) << what << ": beside the fp32 output";
        gpu.linear_forward(nullptr, nullptr, d_w.get(), bias, N, K, OC, d_inp16.get(),
                           d_got.get());
        gputest::expect_gemm_words_match_rounding(d_got.host(), d_want.host(), fmt,
                                                  what + ": from inp16");
      }
    }
    EXPECT_THROW(gpu.linear_forward(nullptr, d_inp.get(), d_w.get(), nullptr, N, C, OC),
                 dtrain::Error)
        << "no output";
  }
  EXPECT_THROW(gpu.linear_forward(d_out.get(), d_inp.get(), d_w.get(), nullptr, N, C, OC,
                                  nullptr, d_got.get()),
               dtrain::Error)
      << "fp32 operands";
  std::vector<float> x(NC), w(static_cast<std::size_t>(OC) * C), y(NO);
  std::vector<std::uint16_t> y16(NO);
  EXPECT_THROW(cpu.linear_forward(y.data(), x.data(), w.data(), nullptr, N, C, OC, nullptr,
                                  y16.data()),
               dtrain::Error)
      << "the CPU";
}

// The loss from logits as 16-bit words (an LM head whose GEMM wrote them) is the loss from
// those words widened, bit for bit, both ways: rows aligned for four words a load or not (an
// odd row length), the gradient also written over the logits' own words. Only under 16-bit
// GEMM operands, never on the CPU.
TEST_F(CudaKernels, CrossEntropyFrom16BitLogits) {
  const int N = 30, V = 170;
  for (const int Vp : {192, 171}) {
    const std::size_t n = static_cast<std::size_t>(N) * Vp;
    auto d_logits = up(random_floats(n, 1, -6.0f, 6.0f));
    auto d_targets = up(random_ints(N, 2, 0, V));
    auto d_dlosses = up(random_floats(N, 3));
    OnDevice<float> d_wide(gpu, n), want_losses(gpu, N), want_lse(gpu, N), got_losses(gpu, N),
        got_lse(gpu, N);
    OnDevice<std::uint16_t> d_words(gpu, n), d_want(gpu, n), d_got(gpu, n);
    for (const DType fmt : {DType::bf16, DType::f16}) {
      gputest::OperandFormat scoped(gpu, fmt);
      const std::string what = std::string(dtrain::dtype_name(fmt)) + " Vp " + std::to_string(Vp);
      gpu.convert_to_16bit(d_words.get(), d_logits.get(), static_cast<std::int64_t>(n), fmt);
      gpu.convert_from_16bit(d_wide.get(), d_words.get(), static_cast<std::int64_t>(n), fmt);
      gpu.crossentropy_forward(want_losses.get(), want_lse.get(), d_wide.get(), d_targets.get(),
                               N, V, Vp);
      gpu.crossentropy_forward_16bit(got_losses.get(), got_lse.get(), d_words.get(),
                                     d_targets.get(), N, V, Vp);
      EXPECT_EQ(got_losses.host(), want_losses.host()) << what;
      EXPECT_EQ(got_lse.host(), want_lse.host()) << what;
      gpu.crossentropy_backward_16bit(d_want.get(), d_wide.get(), want_lse.get(), d_targets.get(),
                                      d_dlosses.get(), N, V, Vp, 0);
      gpu.crossentropy_backward_16bit(d_got.get(), nullptr, want_lse.get(), d_targets.get(),
                                      d_dlosses.get(), N, V, Vp, 0, d_words.get());
      EXPECT_EQ(d_got.host(), d_want.host()) << what;
      gpu.crossentropy_backward_16bit(d_words.get(), nullptr, want_lse.get(), d_targets.get(),
                                      d_dlosses.get(), N, V, Vp, 0, d_words.get());
      EXPECT_EQ(d_words.host(), d_want.host()) << what << " in place";
    }
    EXPECT_THROW(gpu.crossentropy_forward_16bit(got_losses.get(), got_lse.get(), d_words.get(),
                                                d_targets.get(), N, V, Vp),
                 dtrain::Error)
        << "fp32 operands";
  }
  std::vector<float> losses(2), lse(2);
  std::vector<std::uint16_t> words(8);
  const std::vector<std::int32_t> targets(2);
  EXPECT_THROW(cpu.crossentropy_forward_16bit(losses.data(), lse.data(), words.data(),
                                              targets.data(), 2, 4, 4),
               dtrain::Error)
      << "the CPU";
}

// GELU from 16-bit words into 16-bit words is the fp32 GELU of the widened words, rounded:
// the same bits, four words a thread or one (offsets off 8-byte alignment, a length not a
// multiple of four). Only under 16-bit GEMM operands, never on the CPU.
TEST_F(CudaKernels, GeluForwardFrom16BitWords) {
  const std::int64_t n = 4099;
  auto d_x = up(random_floats(static_cast<std::size_t>(n), 1, -6.0f, 6.0f));
  OnDevice<float> d_wide(gpu, n), d_y(gpu, n);
  OnDevice<std::uint16_t> d_x16(gpu, n), d_want(gpu, n), d_got(gpu, n);
  for (const DType fmt : {DType::bf16, DType::f16}) {
    gputest::OperandFormat scoped(gpu, fmt);
    gpu.convert_to_16bit(d_x16.get(), d_x.get(), n, fmt);
    gpu.convert_from_16bit(d_wide.get(), d_x16.get(), n, fmt);
    gpu.gelu_forward(d_y.get(), d_wide.get(), n);
    gpu.convert_to_16bit(d_want.get(), d_y.get(), n, fmt);
    for (const std::int64_t offset : {0, 1, 3}) {
      gpu.zero(d_got.get(), sizeof(std::uint16_t) * n);
      gpu.gelu_forward_16bit(d_got.get() + offset, d_x16.get() + offset, n - offset);
      const auto got = d_got.host(), want = d_want.host();
      EXPECT_TRUE(std::equal(got.begin() + offset, got.end(), want.begin() + offset))
          << dtrain::dtype_name(fmt) << ", offset " << offset;
    }
  }
  EXPECT_THROW(gpu.gelu_forward_16bit(d_got.get(), d_x16.get(), n), dtrain::Error)
      << "fp32 operands";
  std::vector<std::uint16_t> words(8);
  EXPECT_THROW(cpu.gelu_forward_16bit(words.data(), words.data(), 8), dtrain::Error) << "the CPU";
}

// The backward straight into 16-bit words (for the LM head's GEMMs) is the fp32 gradient
// rounded, bit for bit, over the whole vocabulary and over a shard (padding columns 0, the
// target in the shard or not); only under 16-bit GEMM operands, never on the CPU.
TEST_F(CudaKernels, CrossEntropyBackwardInto16BitWords) {
  const int N = 30, ld = 192;
  auto logits = random_floats(static_cast<std::size_t>(N) * ld, 1, -6.0f, 6.0f);
  auto targets = random_ints(N, 2, 0, 300);
  auto dlosses = random_floats(N, 3);
  auto lse = random_floats(N, 4, 5.0f, 6.0f);
  auto d_logits = up(logits), d_lse = up(lse), d_dlosses = up(dlosses);
  auto d_targets = up(targets);
  const std::size_t n = logits.size();
  OnDevice<float> d_dlogits(gpu, n);
  OnDevice<std::uint16_t> d_want(gpu, n), d_got(gpu, n);
  struct Part {
    int V, vocab_start;
  };
  for (const DType fmt : {DType::bf16, DType::f16}) {
    gputest::OperandFormat scoped(gpu, fmt);
    for (const auto& [V, start] : {Part{170, 0}, Part{150, 100}}) {
      const std::string what = std::string(dtrain::dtype_name(fmt)) + " V " + std::to_string(V) +
                               " from " + std::to_string(start);
      gpu.crossentropy_shard_backward(d_dlogits.get(), d_logits.get(), d_lse.get(),
                                      d_targets.get(), d_dlosses.get(), N, V, ld, start);
      gpu.convert_to_16bit(d_want.get(), d_dlogits.get(), static_cast<std::int64_t>(n), fmt);
      gpu.crossentropy_backward_16bit(d_got.get(), d_logits.get(), d_lse.get(), d_targets.get(),
                                      d_dlosses.get(), N, V, ld, start);
      EXPECT_EQ(d_got.host(), d_want.host()) << what;
    }
  }
  EXPECT_THROW(gpu.crossentropy_backward_16bit(d_got.get(), d_logits.get(), d_lse.get(),
                                               d_targets.get(), d_dlosses.get(), N, 170, ld, 0),
               dtrain::Error)
      << "fp32 GEMM operands";
  std::vector<std::uint16_t> words(n);
  EXPECT_THROW(cpu.crossentropy_backward_16bit(words.data(), logits.data(), lse.data(),
                                               targets.data(), dlosses.data(), N, 170, ld, 0),
               dtrain::Error);
}

// GELU's forward writes the 16-bit copies of its input and output in the same pass: exactly
// the conversions of the fp32 values, the output itself unchanged; only under 16-bit operands,
// never on the CPU.
TEST_F(CudaKernels, GeluForwardWrites16BitCopies) {
  const std::int64_t n = 10007;
  const auto un = static_cast<std::size_t>(n);
  auto d_x = up(random_floats(un, 1, -6.0f, 6.0f));
  OnDevice<float> d_want(gpu, un), d_got(gpu, un);
  OnDevice<std::uint16_t> x16(gpu, un), y16(gpu, un), x16_want(gpu, un), y16_want(gpu, un);
  for (const DType fmt : {DType::bf16, DType::f16}) {
    gputest::OperandFormat scoped(gpu, fmt);
    gpu.gelu_forward(d_want.get(), d_x.get(), n);
    gpu.convert_to_16bit(x16_want.get(), d_x.get(), n, fmt);
    gpu.convert_to_16bit(y16_want.get(), d_want.get(), n, fmt);
    gpu.gelu_forward(d_got.get(), d_x.get(), n, x16.get(), y16.get());
    EXPECT_EQ(d_got.host(), d_want.host()) << dtrain::dtype_name(fmt);
    EXPECT_EQ(x16.host(), x16_want.host()) << dtrain::dtype_name(fmt);
    EXPECT_EQ(y16.host(), y16_want.host()) << dtrain::dtype_name(fmt);
    OnDevice<std::uint16_t> alone(gpu, un);  // the copies without the fp32 output
    gpu.gelu_forward(nullptr, d_x.get(), n, nullptr, alone.get());
    EXPECT_EQ(alone.host(), y16_want.host()) << dtrain::dtype_name(fmt) << " (copy alone)";
  }
  EXPECT_THROW(gpu.gelu_forward(d_got.get(), d_x.get(), n, x16.get(), nullptr), dtrain::Error)
      << "fp32 operands";
  std::vector<float> x(un), y(un);
  std::vector<std::uint16_t> words(un);
  EXPECT_THROW(cpu.gelu_forward(y.data(), x.data(), n, nullptr, words.data()), dtrain::Error);
}

// LayerNorm's forward writes its output's 16-bit copy in the same pass: exactly the rounded
// output, by the warp-per-row kernel (C = 768) and the block-per-row one (C = 99, and 768
// with the copy off 16-byte alignment); the output itself as without the copy. Never under
// fp32 operands, never on the CPU.
TEST_F(CudaKernels, LayerNormForwardWrites16BitCopy) {
  for (const int C : {768, 99}) {
    for (const int shift : {0, 4}) {
      const int N = 37;
      const auto nc = static_cast<std::size_t>(N) * C;
      const std::string tag = "C=" + std::to_string(C) + " shift=" + std::to_string(shift);
      auto d_x = up(random_floats(nc, 1, -3.0f, 3.0f)), d_w = up(random_floats(C, 2));
      auto d_b = up(random_floats(C, 3));
      OnDevice<float> want(gpu, nc), got(gpu, nc), mean(gpu, N), rstd(gpu, N);
      OnDevice<std::uint16_t> y16(gpu, nc + shift), y16_want(gpu, nc);
      for (const DType fmt : {DType::bf16, DType::f16}) {
        gputest::OperandFormat scoped(gpu, fmt);
        gpu.layernorm_forward(want.get(), mean.get(), rstd.get(), d_x.get(), d_w.get(), d_b.get(),
                              N, C);
        gpu.layernorm_forward(got.get(), mean.get(), rstd.get(), d_x.get(), d_w.get(), d_b.get(),
                              N, C, y16.get() + shift);
        // an unaligned copy takes the block kernel, which sums in another order
        if (shift == 0) EXPECT_EQ(got.host(), want.host()) << tag << " " << dtrain::dtype_name(fmt);
        gpu.convert_to_16bit(y16_want.get(), got.get(), static_cast<std::int64_t>(nc), fmt);
        auto words = y16.host();
        words.erase(words.begin(), words.begin() + shift);
        EXPECT_EQ(words, y16_want.host()) << tag << " " << dtrain::dtype_name(fmt);
        // the copy alone (no fp32 output): the same words
        OnDevice<std::uint16_t> alone(gpu, nc + shift);
        gpu.layernorm_forward(nullptr, mean.get(), rstd.get(), d_x.get(), d_w.get(), d_b.get(), N,
                              C, alone.get() + shift);
        auto alone_words = alone.host();
        alone_words.erase(alone_words.begin(), alone_words.begin() + shift);
        EXPECT_EQ(alone_words, words) << tag << " " << dtrain::dtype_name(fmt) << " (copy alone)";
      }
      EXPECT_THROW(gpu.layernorm_forward(got.get(), mean.get(), rstd.get(), d_x.get(), d_w.get(),
                                         d_b.get(), N, C, y16.get()),
                   dtrain::Error)
          << "fp32 operands";
    }
  }
  std::vector<float> x(8, 1.0f), y(8), w(8, 1.0f), b(8), stats(1);
  std::vector<std::uint16_t> words(8);
  EXPECT_THROW(cpu.layernorm_forward(y.data(), stats.data(), stats.data(), x.data(), w.data(),
                                     b.data(), 1, 8, words.data()),
               dtrain::Error);
}

// GELU's backward from its input as 16-bit words (a kept activation) gives exactly what it
// gives from the widened words, accumulating and written over; under fp32 operands the words
// are ignored and the fp32 input is needed.
TEST_F(CudaKernels, GeluBackwardFrom16BitInput) {
  const std::int64_t n = 10007;
  auto d_x = up(random_floats(n, 1, -6.0f, 6.0f)), d_dout = up(random_floats(n, 3));
  const auto dinp0 = random_floats(n, 2);
  OnDevice<std::uint16_t> d_x16(gpu, static_cast<std::size_t>(n));
  OnDevice<float> d_widened(gpu, static_cast<std::size_t>(n));
  for (const DType fmt : {DType::bf16, DType::f16}) {
    gputest::OperandFormat scoped(gpu, fmt);
    gpu.convert_to_16bit(d_x16.get(), d_x.get(), n, fmt);
    gpu.convert_from_16bit(d_widened.get(), d_x16.get(), n, fmt);
    for (const Device::GradWrite write : {Device::GradWrite::accumulate, kOverwrite}) {
      auto want = up(dinp0), got = up(dinp0);
      gpu.gelu_backward(want.get(), d_widened.get(), d_dout.get(), n, write);
      gpu.gelu_backward(got.get(), nullptr, d_dout.get(), n, write, d_x16.get());
      EXPECT_EQ(got.host(), want.host()) << dtrain::dtype_name(fmt);
    }
  }
  auto d_dinp = up(dinp0);
  EXPECT_THROW(gpu.gelu_backward(d_dinp.get(), nullptr, d_dout.get(), n,
                                 Device::GradWrite::accumulate, d_x16.get()),
               dtrain::Error)
      << "fp32 operands";
}

// The fused kernels at head sizes 16 and 32 (T off the 64-row blocks), the unfused path at 128.
constexpr AttentionShape kAttentionShapes[] = {{2, 67, 64, 4}, {1, 130, 96, 3}, {1, 40, 128, 1}};

// The fused forward reads a 16-bit qkv as it is: the same output and saved rows as from the
// fp32 qkv, which its tiles round to those words; the unfused path (head size 128) reads qkv.
// Both write the output's 16-bit copy when asked (never under fp32 operands).
TEST_F(CudaKernels, AttentionForward16BitQkvAndOutput) {
  for (const DType fmt : {DType::bf16, DType::f16}) {
    gputest::OperandFormat scoped(gpu, fmt);
    for (const AttentionShape& s : kAttentionShapes) {
      const std::string tag = s.tag(fmt);
      const bool fused = s.C / s.NH <= 64;
      const std::size_t nqkv = s.qkv(), nout = s.out();
      const std::size_t nsaved = gpu.attention_saved_floats(s.B, s.T, s.C, s.NH);
      auto d_qkv = up(random_floats(nqkv, 1, -2.0f, 2.0f));
      auto d_other = up(random_floats(nqkv, 5, -2.0f, 2.0f));
      OnDevice<float> want(gpu, nout), want_saved(gpu, nsaved), got(gpu, nout),
          got_saved(gpu, nsaved), d_ws(gpu, 1);
      OnDevice<std::uint16_t> qkv16(gpu, nqkv), other16(gpu, nqkv);
      gpu.convert_to_16bit(qkv16.get(), d_qkv.get(), static_cast<std::int64_t>(nqkv), fmt);
      gpu.convert_to_16bit(other16.get(), d_other.get(), static_cast<std::int64_t>(nqkv), fmt);
      gpu.attention_forward(want.get(), want_saved.get(), d_ws.get(), d_qkv.get(), s.B, s.T, s.C,
                            s.NH);
      gpu.attention_forward(got.get(), got_saved.get(), d_ws.get(), d_qkv.get(), s.B, s.T, s.C,
                            s.NH, qkv16.get());
      EXPECT_EQ(got.host(), want.host()) << tag;
      EXPECT_EQ(got_saved.host(), want_saved.host()) << tag;
      // the output's copy, written by the fused kernels and rounded after the unfused GEMMs
      OnDevice<std::uint16_t> out16(gpu, nout), out16_want(gpu, nout);
      gpu.convert_to_16bit(out16_want.get(), want.get(), static_cast<std::int64_t>(nout), fmt);
      gpu.attention_forward(got.get(), got_saved.get(), d_ws.get(), d_qkv.get(), s.B, s.T, s.C,
                            s.NH, qkv16.get(), out16.get());
      EXPECT_EQ(got.host(), want.host()) << tag;
      EXPECT_EQ(out16.host(), out16_want.host()) << tag;
      OnDevice<std::uint16_t> alone(gpu, nout);  // the copy without the fp32 output
      gpu.attention_forward(nullptr, got_saved.get(), d_ws.get(), d_qkv.get(), s.B, s.T, s.C,
                            s.NH, qkv16.get(), alone.get());
      EXPECT_EQ(alone.host(), out16_want.host()) << tag << " (copy alone)";
      OnDevice<std::uint16_t> from_words(gpu, nout);  // qkv16 alone: the unfused path widens it
      gpu.attention_forward(nullptr, got_saved.get(), d_ws.get(), nullptr, s.B, s.T, s.C, s.NH,
                            qkv16.get(), from_words.get());
      EXPECT_EQ(from_words.host(), out16_want.host()) << tag << " (from qkv16 alone)";
      EXPECT_EQ(got_saved.host(), want_saved.host()) << tag << " (from qkv16 alone)";
      // words of another qkv: read by the fused kernels, not by the unfused path
      gpu.attention_forward(got.get(), got_saved.get(), d_ws.get(), d_qkv.get(), s.B, s.T, s.C,
                            s.NH, other16.get());
      EXPECT_EQ(got.host() != want.host(), fused) << tag;
    }
  }
  OnDevice<float> out(gpu, 64), saved(gpu, 64), ws(gpu, 1);
  auto qkv = up(random_floats(3 * 64, 1));
  OnDevice<std::uint16_t> words(gpu, 64);
  EXPECT_THROW(gpu.attention_forward(out.get(), saved.get(), ws.get(), qkv.get(), 1, 4, 16, 1,
                                     nullptr, words.get()),
               dtrain::Error)
      << "fp32 operands";
  EXPECT_THROW(gpu.attention_forward(out.get(), saved.get(), ws.get(), nullptr, 1, 4, 16, 1,
                                     words.get()),
               dtrain::Error)
      << "qkv16 alone under fp32 operands";
}

// The attention's backward from qkv and out as 16-bit words (kept copies) gives exactly what
// it gives from those words widened: the fused kernels read them as they are (also from rows
// off 8-byte alignment), the unfused path (head size 128) widens qkv itself.
TEST_F(CudaKernels, AttentionBackwardFrom16BitInputs) {
  for (const DType fmt : {DType::bf16, DType::f16}) {
    gputest::OperandFormat scoped(gpu, fmt);
    for (const AttentionShape& s : kAttentionShapes) {
      const std::string tag = s.tag(fmt);
      const std::size_t nqkv = s.qkv(), nout = s.out();
      const std::size_t nsaved = gpu.attention_saved_floats(s.B, s.T, s.C, s.NH);
      auto d_qkv = up(random_floats(nqkv, 1, -2.0f, 2.0f)), d_dout = up(random_floats(nout, 3));
      OnDevice<float> d_out(gpu, nout), d_saved(gpu, nsaved), d_ws(gpu, 1);
      gpu.attention_forward(d_out.get(), d_saved.get(), d_ws.get(), d_qkv.get(), s.B, s.T, s.C,
                            s.NH);
      OnDevice<std::uint16_t> qkv16(gpu, nqkv + 1), out16(gpu, nout);
      OnDevice<float> qkv_w(gpu, nqkv), out_w(gpu, nout);
      gpu.convert_to_16bit(qkv16.get(), d_qkv.get(), static_cast<std::int64_t>(nqkv), fmt);
      gpu.convert_to_16bit(out16.get(), d_out.get(), static_cast<std::int64_t>(nout), fmt);
      gpu.convert_from_16bit(qkv_w.get(), qkv16.get(), static_cast<std::int64_t>(nqkv), fmt);
      gpu.convert_from_16bit(out_w.get(), out16.get(), static_cast<std::int64_t>(nout), fmt);
      const auto dqkv0 = random_floats(nqkv, 2);
      auto want = up(dqkv0), got = up(dqkv0);
      gpu.attention_backward(want.get(), d_ws.get(), d_dout.get(), qkv_w.get(), out_w.get(),
                             d_saved.get(), s.B, s.T, s.C, s.NH);
      gpu.attention_backward(got.get(), d_ws.get(), d_dout.get(), nullptr, nullptr, d_saved.get(),
                             s.B, s.T, s.C, s.NH, Device::GradWrite::accumulate, qkv16.get(),
                             out16.get());
      EXPECT_EQ(got.host(), want.host()) << tag;
      // the same words one position further on: rows off 8-byte alignment
      OnDevice<std::uint16_t> shifted(gpu, nqkv + 1);
      gpu.copy(shifted.get() + 1, qkv16.get(), nqkv * sizeof(std::uint16_t),
               dtrain::CopyKind::device_to_device);
      auto got2 = up(dqkv0);
      gpu.attention_backward(got2.get(), d_ws.get(), d_dout.get(), nullptr, nullptr,
                             d_saved.get(), s.B, s.T, s.C, s.NH, Device::GradWrite::accumulate,
                             shifted.get() + 1, out16.get());
      EXPECT_EQ(got2.host(), want.host()) << tag << " (unaligned)";
      // dout as words alone (the output projection's dinp16): as from those words widened
      OnDevice<std::uint16_t> dout16(gpu, nout);
      OnDevice<float> dout_w(gpu, nout);
      gpu.convert_to_16bit(dout16.get(), d_dout.get(), static_cast<std::int64_t>(nout), fmt);
      gpu.convert_from_16bit(dout_w.get(), dout16.get(), static_cast<std::int64_t>(nout), fmt);
      auto from_wide = up(dqkv0), from_words = up(dqkv0);
      gpu.attention_backward(from_wide.get(), d_ws.get(), dout_w.get(), nullptr, nullptr,
                             d_saved.get(), s.B, s.T, s.C, s.NH, Device::GradWrite::accumulate,
                             qkv16.get(), out16.get());
      gpu.attention_backward(from_words.get(), d_ws.get(), nullptr, nullptr, nullptr,
                             d_saved.get(), s.B, s.T, s.C, s.NH, Device::GradWrite::accumulate,
                             qkv16.get(), out16.get(), dout16.get());
      EXPECT_EQ(from_words.host(), from_wide.host()) << tag << " (dout16)";
    }
  }
  auto d_dqkv = up(random_floats(30, 2));
  OnDevice<std::uint16_t> words(gpu, 30);
  OnDevice<float> d_dout(gpu, 10), d_saved(gpu, 10), d_ws(gpu, 1);
  EXPECT_THROW(gpu.attention_backward(d_dqkv.get(), d_ws.get(), d_dout.get(), nullptr, nullptr,
                                      d_saved.get(), 1, 1, 10, 1, Device::GradWrite::accumulate,
                                      words.get(), words.get()),
               dtrain::Error)
      << "fp32 operands";
}

}  // namespace
