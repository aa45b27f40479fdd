// A whole GPT training step on the GPU against the same step on the CPU: same seed, same
// batch, so the same initial weights (generated on the host). Compared: the loss, every
// gradient, and the loss after one AdamW update.
//
// Bounds. With exact fp32 GEMMs (DTRAIN_CUDA_TF32=0) the two devices differ only in the
// order of fp32 additions (GEMM blocking, reductions) and in exp/tanh implementations, each
// ~1e-7 relative per op; about thirty ops are chained, so the loss is held to 1e-5 and the
// gradients to 1e-4 of the largest gradient. With TF32 GEMMs (the default) each GEMM is off by
// up to ~1e-3 relative (see test_cuda_gemm_tensor_cores.cpp): the loss is held to 1e-3 and the
// gradients to 2e-2. These bounds are reasoned, not yet measured on a GPU (docs/cuda.md).
#include <algorithm>
#include <cmath>

#include "dtrain/nn/gpt.hpp"
#include "dtrain/optim/optimizer.hpp"
#include "gpu_test.hpp"

namespace {

using dtrain::Device;
using dtrain::GptConfig;
using dtrain::GptModel;
using gputest::random_ints;
using gputest::relative_error;

std::vector<float> to_host(Device& dev, const float* p, std::size_t n) {
  std::vector<float> out(n);
  dev.copy(out.data(), p, n * sizeof(float), dtrain::CopyKind::device_to_host);
  return out;
}

// 2 layers, 4 heads of 16, 48 positions, vocabulary 100 (padded to 128 columns: padding must
// not matter on either device).
GptConfig small_gpt() {
  GptConfig cfg;
  cfg.layers = 2;
  cfg.heads = 4;
  cfg.d_model = 64;
  cfg.seq_len = 48;
  cfg.vocab = 100;
  return cfg;
}

// A forward after the device's GEMM operand format changed under the model: refused before
// any op runs, with a message that says so.
void expect_refused_after_format_change(GptModel& model, const std::vector<std::int32_t>& tokens,
                                        int B, int T) {
  try {
    model.forward(tokens.data(), tokens.data(), B, T);
    ADD_FAILURE() << "forward ran with the operand format changed under the model";
  } catch (const dtrain::Error& e) {
    EXPECT_NE(std::string(e.what()).find("GEMM operand format changed"), std::string::npos)
        << e.what();
  }
}

TEST(CudaGptStep, MatchesTheCpuStep) {
  Device& cpu = dtrain::cpu_device();
  Device& gpu = dtrain::select_device("cuda");
  const bool tf32 = gpu.name().find("TF32") != std::string::npos;
  const double loss_bound = tf32 ? 1e-3 : 1e-5;
  const double grad_bound = tf32 ? 2e-2 : 1e-4;
  std::printf("  device %s: loss bound %.0e, gradient bound %.0e\n", gpu.name().c_str(),
              loss_bound, grad_bound);

  const GptConfig cfg = small_gpt();
  const int B = 4, T = cfg.seq_len;
  GptModel on_cpu(cfg, cpu, 1234, B);
  GptModel on_gpu(cfg, gpu, 1234, B);
  const std::size_t n = on_cpu.parameters().numel();
  ASSERT_EQ(on_gpu.parameters().numel(), n);
  EXPECT_EQ(to_host(gpu, on_gpu.parameters().params(), n),
            to_host(cpu, on_cpu.parameters().params(), n))
      << "initial weights are generated on the host and must be identical";

  const auto tokens = random_ints(static_cast<std::size_t>(B) * T, 5, 0, cfg.vocab);
  const auto targets = random_ints(static_cast<std::size_t>(B) * T, 6, 0, cfg.vocab);
  const float loss_cpu = on_cpu.forward(tokens.data(), targets.data(), B, T);
  const float loss_gpu = on_gpu.forward(tokens.data(), targets.data(), B, T);
  std::printf("  loss cpu %.7f gpu %.7f\n", loss_cpu, loss_gpu);
  EXPECT_LE(std::fabs(loss_gpu - loss_cpu), loss_bound * std::fabs(loss_cpu));

  on_cpu.parameters().zero_grads();
  on_gpu.parameters().zero_grads();
  on_cpu.backward(1.0f);
  on_gpu.backward(1.0f);
  const auto g_cpu = to_host(cpu, on_cpu.parameters().grads(), n);
  const auto g_gpu = to_host(gpu, on_gpu.parameters().grads(), n);
  const double grad_err = relative_error(g_gpu, g_cpu);
  std::printf("  gradients: relative error %.3g\n", grad_err);
  EXPECT_LE(grad_err, grad_bound);

  dtrain::optim::AdamW opt_cpu(cpu, {{0, n, true}}, n, {});
  dtrain::optim::AdamW opt_gpu(gpu, {{0, n, true}}, n, {});
  opt_cpu.step(on_cpu.parameters().params(), on_cpu.parameters().grads(), 1e-3f);
  opt_gpu.step(on_gpu.parameters().params(), on_gpu.parameters().grads(), 1e-3f);
  const float next_cpu = on_cpu.forward(tokens.data(), targets.data(), B, T);
  const float next_gpu = on_gpu.forward(tokens.data(), targets.data(), B, T);
  std::printf("  loss after one AdamW step: cpu %.7f gpu %.7f\n", next_cpu, next_gpu);
  EXPECT_LT(next_cpu, loss_cpu) << "the step lowers the loss on the batch it saw";
  // AdamW normalises each update, so tiny gradients that differ in sign move a weight by up
  // to 2 lr: the post-step loss gets ten times the forward bound.
  EXPECT_LE(std::fabs(next_gpu - next_cpu), 10 * loss_bound * std::fabs(next_cpu));
}

// Generation's key/value cache on the GPU against the CPU: the prompt's rows (causal attention
// over the square), then one row at a time (attention_decode over the cache), to seq_len; the
// logits of each last position within the forward bound of the largest logit. Then under bf16
// GEMM operands, where the prompt goes through the fused attention: within bf16's precision.
TEST(CudaGptStep, DecodeWithTheCacheMatchesTheCpu) {
  Device& cpu = dtrain::cpu_device();
  Device& gpu = dtrain::select_device("cuda");
  const bool tf32 = gpu.name().find("TF32") != std::string::npos;
  const GptConfig cfg = small_gpt();
  const auto tokens = random_ints(static_cast<std::size_t>(cfg.seq_len), 7, 0, cfg.vocab);
  auto worst_gap = [&](GptModel& on_cpu, GptModel& on_gpu) {
    double worst = 0;
    for (int length = 10; length <= cfg.seq_len; ++length) {
      const int n = length == 10 ? 10 : 1;
      const float* want = on_cpu.decode(tokens.data() + length - n, n);
      const auto got = to_host(gpu, on_gpu.decode(tokens.data() + length - n, n),
                               static_cast<std::size_t>(cfg.vocab));
      worst = gputest::worse(worst, relative_error(got, std::vector<float>(want, want + cfg.vocab)));
    }
    return worst;
  };
  GptModel on_cpu(cfg, cpu, 1234, 1);
  GptModel on_gpu(cfg, gpu, 1234, 1);
  const double fp32_gap = worst_gap(on_cpu, on_gpu);
  std::printf("  decode logits: relative error %.3g\n", fp32_gap);
  EXPECT_LE(fp32_gap, tf32 ? 1e-2 : 1e-5);

  gputest::OperandFormat scoped(gpu, dtrain::DType::bf16);
  GptModel bf16_gpu(cfg, gpu, 1234, 1);
  on_cpu.decode_reset();
  const double bf16_gap = worst_gap(on_cpu, bf16_gpu);
  std::printf("  decode logits under bf16 operands: relative error %.3g\n", bf16_gap);
  EXPECT_LE(bf16_gap, 1e-2);
}

// Under 16-bit GEMM operands the fused attention saves one log-sum-exp per row (two floats),
// not the T x T probabilities, and the model sizes its saved activations by what the device
// says (Device::attention_saved_floats), and refuses to run once that has changed. The head's
// logits and their gradient are 16-bit words then, in the logits' own place: no buffer more.
TEST(CudaGptStep, FusedAttentionSavesALogSumExpPerRowInsteadOfTheProbabilities) {
  Device& gpu = dtrain::select_device("cuda");
  const GptConfig cfg = small_gpt();
  const int B = 4, T = cfg.seq_len;
  const std::size_t unfused = GptModel(cfg, gpu, 1, B).activation_bytes();
  gputest::OperandFormat scoped(gpu, dtrain::DType::bf16);
  GptModel model(cfg, gpu, 1, B);
  const std::size_t fused = model.activation_bytes();
  // both sizes are whole 64-byte blocks, so the difference is exact
  const std::size_t probabilities = static_cast<std::size_t>(B) * cfg.heads * T * T;
  const std::size_t lse = 2u * B * cfg.heads * T;
  EXPECT_EQ(unfused - fused, cfg.layers * (probabilities - lse) * sizeof(float));
  std::printf("  activations: %zu bytes unfused, %zu fused\n", unfused, fused);

  // fp32 operands now would have the unfused attention write B x NH x T x T floats into the
  // room of a log-sum-exp per row: refused before any op runs
  const auto tokens = random_ints(static_cast<std::size_t>(B) * T, 5, 0, cfg.vocab);
  gpu.set_gemm_operand_format(dtrain::DType::f32);
  expect_refused_after_format_change(model, tokens, B, T);
}

// Under 16-bit saved activations that the device reads as words (the operand format is the
// saved one), the kept tensors other than the attention's statistics have no fp32 scratch:
// 14 B·T·C floats less than where the copies are widened (bf16 copies under fp16 operands;
// the fused attention saves the same either way). Changing the format under such a model is
// refused before any op runs.
TEST(CudaGptStep, SixteenBitSavedActivationsReadAsWordsNeedNoFp32Scratch) {
  Device& gpu = dtrain::select_device("cuda");
  GptConfig cfg = small_gpt();
  cfg.saved_activations = dtrain::DType::bf16;
  const int B = 4, T = cfg.seq_len;
  std::size_t widened = 0;
  {
    gputest::OperandFormat scoped(gpu, dtrain::DType::f16);
    widened = GptModel(cfg, gpu, 1, B).activation_bytes();
  }
  gputest::OperandFormat scoped(gpu, dtrain::DType::bf16);
  GptModel model(cfg, gpu, 1, B);
  const std::size_t words = model.activation_bytes();
  EXPECT_EQ(widened - words, 14u * B * T * cfg.d_model * sizeof(float));
  std::printf("  activations: %zu bytes with widened copies, %zu read as words\n", widened, words);
  const auto tokens = random_ints(static_cast<std::size_t>(B) * T, 5, 0, cfg.vocab);
  model.forward(tokens.data(), tokens.data(), B, T);
  gpu.set_gemm_operand_format(dtrain::DType::f16);
  expect_refused_after_format_change(model, tokens, B, T);
}

// Under 16-bit GEMM operands a forward with targets has the LM head write its logits as
// 16-bit words that only the loss reads (logits() is null then); the loss and the step's
// gradients, each parameter's, stay within bf16's precision of the CPU's, with fp32 saved
// activations and with bf16 ones (the trainer's under --precision bf16, whose backward hands
// 16-bit words from op to op). A forward without targets (generation, evaluation of logits)
// still gives fp32 logits.
TEST(CudaGptStep, HeadLogitsAre16BitWordsForTheLoss) {
  Device& cpu = dtrain::cpu_device();
  Device& gpu = dtrain::select_device("cuda");
  GptConfig cfg = small_gpt();
  const int B = 2, T = cfg.seq_len;
  const auto tokens = random_ints(static_cast<std::size_t>(B) * T, 5, 0, cfg.vocab);
  const auto targets = random_ints(static_cast<std::size_t>(B) * T, 6, 0, cfg.vocab);
  GptModel on_cpu(cfg, cpu, 1234, B);
  const float loss_cpu = on_cpu.forward(tokens.data(), targets.data(), B, T);
  on_cpu.parameters().zero_grads();
  on_cpu.backward(1.0f);
  const std::size_t n = on_cpu.parameters().numel();
  const auto g_cpu = to_host(cpu, on_cpu.parameters().grads(), n);

  gputest::OperandFormat scoped(gpu, dtrain::DType::bf16);
  for (const dtrain::DType saved : {dtrain::DType::f32, dtrain::DType::bf16}) {
    cfg.saved_activations = saved;
    const std::string tag = std::string("saved activations ") + dtrain::dtype_name(saved);
    GptModel model(cfg, gpu, 1234, B);
    const float loss = model.forward(tokens.data(), targets.data(), B, T);
    EXPECT_EQ(model.logits(), nullptr) << "the logits are words for the loss";
    model.parameters().zero_grads();
    model.backward(1.0f);
    const auto g_gpu = to_host(gpu, model.parameters().grads(), n);
    const double grad_err = relative_error(g_gpu, g_cpu);
    std::printf("  bf16, %s: loss cpu %.7f gpu %.7f, gradients relative error %.3g\n",
                tag.c_str(), loss_cpu, loss, grad_err);
    EXPECT_LE(std::fabs(loss - loss_cpu), 1e-3 * std::fabs(loss_cpu)) << tag;
    EXPECT_LE(grad_err, 2e-2) << tag;
    // each parameter's gradient too, against its own largest (a small one, a bias's, would
    // hide under the largest of all)
    std::string worst_name;
    double worst = 0;
    for (const dtrain::ParamInfo& p : on_cpu.parameters().infos()) {
      const auto at = static_cast<std::ptrdiff_t>(p.offset);
      const auto end = at + static_cast<std::ptrdiff_t>(p.local_numel());
      const double err = relative_error({g_gpu.begin() + at, g_gpu.begin() + end},
                                        {g_cpu.begin() + at, g_cpu.begin() + end});
      EXPECT_LE(err, 3e-2) << p.name << ", " << tag;
      if (err > worst) worst = err, worst_name = p.name;
    }
    std::printf("  worst parameter: %s, relative error %.3g\n", worst_name.c_str(), worst);
  }
  GptModel model(cfg, gpu, 1234, B);
  model.forward(tokens.data(), nullptr, B, T);
  ASSERT_NE(model.logits(), nullptr) << "without targets the logits are fp32";
  const std::size_t row = static_cast<std::size_t>(cfg.padded_vocab());
  const auto logits = to_host(gpu, model.logits(), static_cast<std::size_t>(B) * T * row);
  on_cpu.forward(tokens.data(), nullptr, B, T);
  const auto want = to_host(cpu, on_cpu.logits(), logits.size());
  EXPECT_LE(relative_error(logits, want), 1e-2);
}

}  // namespace
