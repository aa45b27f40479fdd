// The CUDA device handing backward's gradients on as 16-bit words: a linear layer's input
// gradient written as words (linear_backward's dinp16), the ops that read such words (dout16)
// and those that write the words of the linear layer before them with its bias gradient
// (gelu_backward_rounded, attention_backward_rounded). Each against the fp32 path rounded or
// the words widened.
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

// A linear layer's input gradient as 16-bit words (dinp16, written over) is its fp32 input
// gradient rounded (expect_gemm_words_match_rounding), from an fp32 or a 16-bit output
// gradient, with the weight and bias gradients unchanged, and +0 words without products.
// Only under 16-bit GEMM operands, written over and without dinp; never on the CPU.
TEST_F(CudaKernels, LinearBackwardWritesTheInputGradientAs16BitWords) {
  const int N = 300, C = 96, OC = 136;
  const std::size_t NC = static_cast<std::size_t>(N) * C, NO = static_cast<std::size_t>(N) * OC;
  auto d_inp = up(random_floats(NC, 1)), d_w = up(random_floats(OC * C, 2)),
       d_dout = up(random_floats(NO, 3));
  const auto dw0 = random_floats(OC * C, 4), db0 = random_floats(OC, 5);
  OnDevice<std::uint16_t> d_dout16(gpu, NO), d_want(gpu, NC), d_got(gpu, NC);
  for (const DType fmt : {DType::bf16, DType::f16}) {
    gputest::OperandFormat scoped(gpu, fmt);
    gpu.convert_to_16bit(d_dout16.get(), d_dout.get(), static_cast<std::int64_t>(NO), fmt);
    for (const bool from_words : {false, true}) {
      const std::string what = std::string(dtrain::dtype_name(fmt)) + (from_words ? " (dout16)" : "");
      // the bias gradient needs the fp32 output gradient
      const float* dout = from_words ? nullptr : d_dout.get();
      const std::uint16_t* dout16 = from_words ? d_dout16.get() : nullptr;
      auto r_dinp = nans(NC);
      auto r_dw = up(dw0), g_dw = up(dw0), r_db = up(db0), g_db = up(db0);
      gpu.linear_backward(r_dinp.get(), r_dw.get(), from_words ? nullptr : r_db.get(), dout,
                          d_inp.get(), d_w.get(), N, C, OC, kOverwrite, nullptr, dout16);
      gpu.convert_to_16bit(d_want.get(), r_dinp.get(), static_cast<std::int64_t>(NC), fmt);
      gpu.linear_backward(nullptr, g_dw.get(), from_words ? nullptr : g_db.get(), dout,
                          d_inp.get(), d_w.get(), N, C, OC, kOverwrite, nullptr, dout16,
                          d_got.get());
      gputest::expect_gemm_words_match_rounding(d_got.host(), d_want.host(), fmt, what);
      EXPECT_EQ(g_dw.host(), r_dw.host()) << what;
      EXPECT_EQ(g_db.host(), r_db.host()) << what;
    }
    gpu.linear_backward(nullptr, nullptr, nullptr, d_dout.get(), d_inp.get(), d_w.get(), N, C, 0,
                        kOverwrite, nullptr, nullptr, d_got.get());
    EXPECT_EQ(d_got.host(), std::vector<std::uint16_t>(NC, 0)) << "without products";
    EXPECT_THROW(gpu.linear_backward(nullptr, nullptr, nullptr, d_dout.get(), d_inp.get(),
                                     d_w.get(), N, C, OC, Device::GradWrite::accumulate, nullptr,
                                     nullptr, d_got.get()),
                 dtrain::Error)
        << "added into";
  }
  EXPECT_THROW(gpu.linear_backward(nullptr, nullptr, nullptr, d_dout.get(), d_inp.get(),
                                   d_w.get(), N, C, OC, kOverwrite, nullptr, nullptr,
                                   d_got.get()),
               dtrain::Error)
      << "fp32 operands";
  std::vector<float> x(NC), w(static_cast<std::size_t>(OC) * C), dy(NO);
  std::vector<std::uint16_t> dx16(NC);
  EXPECT_THROW(cpu.linear_backward(nullptr, nullptr, nullptr, dy.data(), x.data(), w.data(), N,
                                   C, OC, kOverwrite, nullptr, nullptr, dx16.data()),
               dtrain::Error)
      << "the CPU";
}

// LayerNorm's backward from an output gradient in 16-bit words (a linear layer's dinp16) is
// its backward from those words widened, bit for bit: the row kernel (C = 768) and the block
// kernels (C = 99), gradients pre-filled. Words of another
// gradient change it (they are read). The CPU needs the fp32 output gradient.
TEST_F(CudaKernels, LayerNormBackwardFrom16BitOutputGradient) {
  for (const int C : {768, 99}) {
    const int N = 70;
    const std::size_t n = static_cast<std::size_t>(N) * C;
    auto d_x = up(random_floats(n, 1, -2.0f, 2.0f)), d_dy = up(random_floats(n, 2)),
         d_w = up(random_floats(C, 3)), d_b = up(random_floats(C, 4));
    OnDevice<float> d_mean(gpu, N), d_rstd(gpu, N), d_y(gpu, n), d_wide(gpu, n);
    gpu.layernorm_forward(d_y.get(), d_mean.get(), d_rstd.get(), d_x.get(), d_w.get(), d_b.get(),
                          N, C);
    const auto dx0 = random_floats(n, 5), dw0 = random_floats(C, 6), db0 = random_floats(C, 7);
    OnDevice<std::uint16_t> d_dy16(gpu, n);
    for (const DType fmt : {DType::bf16, DType::f16}) {
      gputest::OperandFormat scoped(gpu, fmt);
      const std::string what = std::string(dtrain::dtype_name(fmt)) + " C=" + std::to_string(C);
      gpu.convert_to_16bit(d_dy16.get(), d_dy.get(), static_cast<std::int64_t>(n), fmt);
      gpu.convert_from_16bit(d_wide.get(), d_dy16.get(), static_cast<std::int64_t>(n), fmt);
      auto r_dx = up(dx0), r_dw = up(dw0), r_db = up(db0);
      auto g_dx = up(dx0), g_dw = up(dw0), g_db = up(db0);
      gpu.layernorm_backward(r_dx.get(), r_dw.get(), r_db.get(), d_wide.get(), d_x.get(),
                             d_w.get(), d_mean.get(), d_rstd.get(), N, C);
      gpu.layernorm_backward(g_dx.get(), g_dw.get(), g_db.get(), nullptr, d_x.get(), d_w.get(),
                             d_mean.get(), d_rstd.get(), N, C, d_dy16.get());
      EXPECT_EQ(g_dx.host(), r_dx.host()) << what;
      EXPECT_EQ(g_dw.host(), r_dw.host()) << what;
      EXPECT_EQ(g_db.host(), r_db.host()) << what;
      auto o_dx = up(dx0), o_dw = up(dw0), o_db = up(db0);  // words of the fp32 dy's neighbour
      gpu.convert_to_16bit(d_dy16.get(), d_x.get(), static_cast<std::int64_t>(n), fmt);
      gpu.layernorm_backward(o_dx.get(), o_dw.get(), o_db.get(), d_wide.get(), d_x.get(),
                             d_w.get(), d_mean.get(), d_rstd.get(), N, C, d_dy16.get());
      EXPECT_NE(o_dx.host(), r_dx.host()) << what << ": dout16 was not read";
    }
  }
  std::vector<float> v(12, 1.0f);
  EXPECT_THROW(cpu.layernorm_backward(v.data(), v.data(), v.data(), nullptr, v.data(), v.data(),
                                      v.data(), v.data(), 3, 4),
               dtrain::Error)
      << "the CPU";
}

// GELU's backward straight into the 16-bit operand of the linear layer before it, that layer's
// bias gradient summed on the way, is gelu_backward (written over) followed by the rounding
// and column sums linear_backward does, bit for bit: the words and the bias gradient (added
// into what it held), over more rows than one chunk of the sums; from an output gradient in
// words (the layer after's dinp16) as from those words widened. Only under 16-bit GEMM
// operands, never on the CPU.
TEST_F(CudaKernels, GeluBackwardRoundedForTheLinearLayerBefore) {
  const int N = 300, cols = 136;
  const std::size_t n = static_cast<std::size_t>(N) * cols;
  auto d_x = up(random_floats(n, 1, -4.0f, 4.0f)), d_dout = up(random_floats(n, 2));
  const auto db0 = random_floats(static_cast<std::size_t>(cols), 3);
  OnDevice<std::uint16_t> d_x16(gpu, n), d_want(gpu, n), d_got(gpu, n);
  for (const DType fmt : {DType::bf16, DType::f16}) {
    gputest::OperandFormat scoped(gpu, fmt);
    gpu.convert_to_16bit(d_x16.get(), d_x.get(), static_cast<std::int64_t>(n), fmt);
    auto d_grad = nans(n);
    auto want_db = up(db0), got_db = up(db0);
    gpu.gelu_backward(d_grad.get(), nullptr, d_dout.get(), static_cast<std::int64_t>(n),
                      kOverwrite, d_x16.get());
    gpu.convert_to_16bit(d_want.get(), d_grad.get(), static_cast<std::int64_t>(n), fmt);
    gpu.linear_backward(nullptr, nullptr, want_db.get(), d_grad.get(), nullptr, nullptr, N, 1,
                        cols);
    gpu.gelu_backward_rounded(d_got.get(), got_db.get(), d_x16.get(), d_dout.get(), N, cols);
    EXPECT_EQ(d_got.host(), d_want.host()) << dtrain::dtype_name(fmt);
    EXPECT_EQ(got_db.host(), want_db.host()) << dtrain::dtype_name(fmt);
    // dout as words: as from their widened values
    OnDevice<std::uint16_t> d_dout16(gpu, n), d_from_words(gpu, n);
    OnDevice<float> d_widened(gpu, n);
    gpu.convert_to_16bit(d_dout16.get(), d_dout.get(), static_cast<std::int64_t>(n), fmt);
    gpu.convert_from_16bit(d_widened.get(), d_dout16.get(), static_cast<std::int64_t>(n), fmt);
    auto wide_db = up(db0), words_db = up(db0);
    gpu.gelu_backward_rounded(d_want.get(), wide_db.get(), d_x16.get(), d_widened.get(), N, cols);
    gpu.gelu_backward_rounded(d_from_words.get(), words_db.get(), d_x16.get(), nullptr, N, cols,
                              d_dout16.get());
    EXPECT_EQ(d_from_words.host(), d_want.host()) << dtrain::dtype_name(fmt) << " (dout16)";
    EXPECT_EQ(words_db.host(), wide_db.host()) << dtrain::dtype_name(fmt) << " (dout16)";
    EXPECT_NE(d_from_words.host(), d_got.host()) << "dout16 was not read";
  }
  auto db = up(db0);
  EXPECT_THROW(gpu.gelu_backward_rounded(d_got.get(), db.get(), d_x16.get(), d_dout.get(), N,
                                         cols),
               dtrain::Error)
      << "fp32 operands";
  std::vector<std::uint16_t> words(8);
  std::vector<float> floats(8);
  EXPECT_THROW(cpu.gelu_backward_rounded(words.data(), floats.data(), words.data(), floats.data(),
                                         2, 4),
               dtrain::Error)
      << "the CPU";
}

// The attention's gradient straight into the 16-bit operand of the linear layer before it
// (qkv's), that layer's bias gradient summed on the way, is attention_backward (written over)
// rounded, bit for bit, and its column sums added into the bias gradient (fp32 bound: the
// blocks sum in another order). Head sizes 16, 32 and 64, T off the 64-row blocks, several
// sequences. The unfused path (head size 128), fp32 operands and the CPU have no such path:
// false, nothing written.
TEST_F(CudaKernels, AttentionBackwardRoundedForTheLinearLayerBefore) {
  constexpr AttentionShape kShapes[] = {{2, 67, 64, 4}, {1, 130, 96, 3}, {2, 150, 128, 2}};
  for (const DType fmt : {DType::bf16, DType::f16}) {
    gputest::OperandFormat scoped(gpu, fmt);
    for (const AttentionShape& s : kShapes) {
      const std::string tag = s.tag(fmt);
      const std::size_t nqkv = s.qkv(), nout = s.out(), C3 = 3 * static_cast<std::size_t>(s.C);
      const std::size_t nsaved = gpu.attention_saved_floats(s.B, s.T, s.C, s.NH);
      auto d_qkv = up(random_floats(nqkv, 1, -2.0f, 2.0f)), d_dout = up(random_floats(nout, 3));
      OnDevice<float> d_out(gpu, nout), d_saved(gpu, nsaved), d_ws(gpu, 1);
      OnDevice<std::uint16_t> qkv16(gpu, nqkv), out16(gpu, nout);
      gpu.convert_to_16bit(qkv16.get(), d_qkv.get(), static_cast<std::int64_t>(nqkv), fmt);
      gpu.attention_forward(nullptr, d_saved.get(), d_ws.get(), nullptr, s.B, s.T, s.C, s.NH,
                            qkv16.get(), out16.get());
      auto d_grad = nans(nqkv);
      gpu.attention_backward(d_grad.get(), d_ws.get(), d_dout.get(), nullptr, nullptr,
                             d_saved.get(), s.B, s.T, s.C, s.NH, kOverwrite, qkv16.get(),
                             out16.get());
      OnDevice<std::uint16_t> want(gpu, nqkv), got(gpu, nqkv);
      gpu.convert_to_16bit(want.get(), d_grad.get(), static_cast<std::int64_t>(nqkv), fmt);
      const auto db0 = random_floats(C3, 4);
      auto want_db = up(db0), got_db = up(db0);
      gpu.linear_backward(nullptr, nullptr, want_db.get(), d_grad.get(), nullptr, nullptr,
                          s.B * s.T, 1, static_cast<int>(C3));
      ASSERT_TRUE(gpu.attention_backward_rounded(got.get(), got_db.get(), d_ws.get(),
                                                 d_dout.get(), d_saved.get(), s.B, s.T, s.C,
                                                 s.NH, qkv16.get(), out16.get()))
          << tag;
      EXPECT_EQ(got.host(), want.host()) << tag;
      gputest::expect_close(got_db.host(), want_db.host(), gputest::kFp32Bound, "dbias " + tag);
      // dout as words: as from those words widened, bit for bit
      OnDevice<std::uint16_t> dout16(gpu, nout);
      OnDevice<float> dout_w(gpu, nout);
      gpu.convert_to_16bit(dout16.get(), d_dout.get(), static_cast<std::int64_t>(nout), fmt);
      gpu.convert_from_16bit(dout_w.get(), dout16.get(), static_cast<std::int64_t>(nout), fmt);
      OnDevice<std::uint16_t> from_words(gpu, nqkv);
      auto wide_db = up(db0), words_db = up(db0);
      gpu.attention_backward_rounded(got.get(), wide_db.get(), d_ws.get(), dout_w.get(),
                                     d_saved.get(), s.B, s.T, s.C, s.NH, qkv16.get(),
                                     out16.get());
      gpu.attention_backward_rounded(from_words.get(), words_db.get(), d_ws.get(), nullptr,
                                     d_saved.get(), s.B, s.T, s.C, s.NH, qkv16.get(),
                                     out16.get(), dout16.get());
      EXPECT_EQ(from_words.host(), got.host()) << tag << " (dout16)";
      EXPECT_EQ(words_db.host(), wide_db.host()) << tag << " (dout16)";
    }
    // the unfused path writes fp32: no such path
    const AttentionShape wide{1, 40, 128, 1};
    OnDevice<std::uint16_t> words(gpu, wide.qkv());
    OnDevice<float> db(gpu, 3 * 128), saved(gpu, gpu.attention_saved_floats(1, 40, 128, 1));
    auto dout = up(random_floats(wide.out(), 3));
    const auto before = words.host();
    EXPECT_FALSE(gpu.attention_backward_rounded(words.get(), db.get(), nullptr, dout.get(),
                                                saved.get(), 1, 40, 128, 1, words.get(),
                                                words.get()));
    EXPECT_EQ(words.host(), before) << "written although refused";
  }
  std::vector<std::uint16_t> words(48);
  std::vector<float> floats(48);
  EXPECT_FALSE(cpu.attention_backward_rounded(words.data(), floats.data(), nullptr,
                                              floats.data(), floats.data(), 1, 4, 4, 1,
                                              words.data(), words.data()))
      << "the CPU";
  OnDevice<std::uint16_t> d_words(gpu, 48);
  OnDevice<float> d_floats(gpu, 48);
  EXPECT_FALSE(gpu.attention_backward_rounded(d_words.get(), d_floats.get(), nullptr,
                                              d_floats.get(), d_floats.get(), 1, 4, 16, 1,
                                              d_words.get(), d_words.get()))
      << "fp32 operands";
}

}  // namespace
