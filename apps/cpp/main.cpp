// A short tour of dtrain's C++ API: data-parallel training of the built-in MLP.
//
//   mpiexec -n 2 dtrain-cpp-example [--steps N] [--out FILE]
//
// Each step's global batch of 16 samples of a synthetic 3-class problem is split evenly over
// the ranks; each computes the gradient of its share, GradientSync averages them over the
// data-parallel group in buckets, and AdamW updates the (replicated) parameters, so any rank
// count trains the same model (to rounding). --out writes the final loss and parameters.
// Exits non-zero unless the loss falls.
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "dtrain/comm/process_grid.hpp"
#include "dtrain/comm/runtime.hpp"
#include "dtrain/core/error.hpp"
#include "dtrain/device/device.hpp"
#include "dtrain/nn/mlp.hpp"
#include "dtrain/optim/optimizer.hpp"
#include "dtrain/parallel/cpu_threads.hpp"
#include "dtrain/parallel/gradient_sync.hpp"
#include "dtrain/parallel/zero.hpp"
#include "dtrain/train/same_settings.hpp"

namespace {
constexpr int kInputs = 8, kClasses = 3, kBatch = 16;

// Sample `id`: inputs from a fixed pattern, the class from their weighted sum.
void make_sample(long id, float* x, std::int32_t* label) {
  float s = 0;
  for (int i = 0; i < kInputs; ++i) {
    x[i] = std::sin(0.91f * static_cast<float>(id * kInputs + i) + 0.3f * static_cast<float>(i));
    s += x[i] * (i % 2 ? 1.0f : -0.5f);
  }
  *label = s > 0.7f ? 2 : (s > -0.7f ? 1 : 0);
}

// "loss <value>" then "param <value>" per parameter, to compare runs at different rank counts.
void write_results(const std::string& path, double loss, dtrain::ParameterStore& params) {
  std::FILE* f = std::fopen(path.c_str(), "w");
  DTRAIN_CHECK(f != nullptr, Errc::io, "cannot write " << path);
  std::fprintf(f, "loss %.9g\n", loss);
  for (const dtrain::ParamInfo& p : params) {
    std::vector<float> host(p.local_numel());
    params.device().copy(host.data(), params.param(p), host.size() * sizeof(float),
                         dtrain::CopyKind::device_to_host);
    for (float v : host) std::fprintf(f, "param %.9g\n", v);
  }
  std::fclose(f);
}
}  // namespace

// A whole number >= 0 and nothing else (atoi took "abc" as 0 and overflow as anything).
int whole_number(const char* option, const char* text) {
  char* end = nullptr;
  errno = 0;
  const long v = std::strtol(text, &end, 10);
  DTRAIN_CHECK(end != text && *end == '\0' && errno == 0 && v >= 0 && v <= 1000000000L, Errc::invalid_argument,
               option << " needs a whole number >= 0, got '" << text << "'");
  return static_cast<int>(v);
}

// The example's run; the exit status (0: the loss fell by 30%).
int run_example(dtrain::Runtime& runtime, int argc, char** argv) {
  // First, before any other collective: every rank was given the same options (a rank
  // given others would wait in a collective the rest never enter).
  std::string given;
  for (int i = 1; i < argc; i += 2)
    given += std::string(argv[i]).substr(argv[i][0] == '-' && argv[i][1] == '-' ? 2 : 0) + " = " +
             (i + 1 < argc ? argv[i + 1] : "") + "\n";
  dtrain::train::agree_same_settings(given, runtime.world());
  dtrain::ProcessGrid grid(runtime.world(), dtrain::GridShape{});  // all ranks data parallel
  int steps = 200;
  std::string out;
  for (int i = 1; i < argc; i += 2) {
    if (std::strcmp(argv[i], "--help") == 0 || std::strcmp(argv[i], "-h") == 0) {
      if (runtime.world().rank() == 0) std::printf("usage: dtrain-cpp-example [--steps N] [--out FILE]\n");
      return 0;
    }
    DTRAIN_CHECK(i + 1 < argc, Errc::invalid_argument,
                 "option " << argv[i] << " needs a value (--steps N, --out FILE)");
    if (std::strcmp(argv[i], "--steps") == 0) steps = whole_number("--steps", argv[i + 1]);
    else if (std::strcmp(argv[i], "--out") == 0) out = argv[i + 1];
    else DTRAIN_FAIL(Errc::invalid_argument, "unknown option " << argv[i] << " (--steps N, --out FILE)");
  }
  DTRAIN_CHECK(kBatch % grid.dp_size() == 0, Errc::invalid_config,
               grid.dp_size() << " ranks do not divide the batch of " << kBatch);
  const int share = kBatch / grid.dp_size();

  dtrain::Device& dev = dtrain::select_device("auto");
  // On the CPU: the rank's share of its node's CPUs (OpenMP's own default, every CPU a
  // rank may run on, oversubscribes a node whose ranks share them). Collective.
  dev.set_num_threads(dtrain::parallel::threads_per_rank(runtime.world()).threads);
  dtrain::MlpConfig cfg;
  cfg.sizes = {kInputs, 32, kClasses};
  dtrain::MlpModel model(cfg, dev, /*seed=*/42, kBatch);
  dtrain::ParameterStore& params = model.parameters();

  // One bucket range covering the whole arena: the MLP reports no ranges during backward,
  // so the reduction starts at finish().
  dtrain::parallel::GradientSync sync(grid.dp(), params.grads(), {{0, params.numel()}},
                                      25u << 20, dtrain::parallel::GradReduction::all_reduce);
  dtrain::optim::AdamW adamw(dev, dtrain::parallel::parameter_segments(params), params.numel(),
                             dtrain::optim::AdamWConfig{});

  std::vector<float> x(kBatch * kInputs);
  std::vector<std::int32_t> labels(kBatch);
  double first = 0, last = 0;
  for (int step = 0; step < steps; ++step) {
    for (int b = 0; b < share; ++b) {  // this rank's share of the step's global batch
      const long id = static_cast<long>(step) * kBatch + grid.dp_rank() * share + b;
      make_sample(id, &x[b * kInputs], &labels[b]);
    }
    params.zero_grads();
    double loss = model.forward(x.data(), labels.data(), share);
    sync.begin(true);
    model.backward(1.0f);
    sync.finish();  // gradients now averaged over the data-parallel ranks
    grid.dp().all_reduce(&loss, &loss, 1, dtrain::DType::f64, dtrain::ReduceOp::avg);
    const double norm = std::sqrt(dev.sum_squares(params.grads(), static_cast<std::int64_t>(params.numel())));
    adamw.step(params.params(), params.grads(), 1e-2f, dtrain::optim::clip_factor(norm, 1.0));
    if (step == 0) first = loss;
    last = loss;
    if (runtime.rank() == 0 && (step % 50 == 0 || step == steps - 1)) {
      std::printf("step %4d  loss %.4f  grad-norm %.4f\n", step, loss, norm);
    }
  }
  if (runtime.rank() == 0) {
    std::printf("cpp-example: loss %.4f -> %.4f on %d ranks\n", first, last, grid.dp_size());
    if (!out.empty()) write_results(out, last, params);
  }
  if (steps > 0 && !(last < 0.7 * first)) {
    if (runtime.rank() == 0) std::fprintf(stderr, "dtrain-cpp-example: the loss did not fall by 30%%\n");
    return 1;
  }
  return 0;
}

int main(int argc, char** argv) {
  try {
    dtrain::Runtime runtime(&argc, &argv);
    // Errors are reported here, before the Runtime finalises MPI: a rank that finalised and
    // exited first would have the launcher end rank 0 before its message was out.
    try {
      return run_example(runtime, argc, argv);
    } catch (const dtrain::Error& e) {
      // Every rank parses the same options and checks the same rank count: rank 0 reports.
      if (runtime.rank() == 0) std::fprintf(stderr, "dtrain-cpp-example: %s\n", e.what());
      return e.code() == dtrain::Errc::invalid_argument || e.code() == dtrain::Errc::invalid_config ? 2 : 1;
    } catch (const std::exception& e) {  // out of memory, say: this rank's own
      std::fprintf(stderr, "dtrain-cpp-example: rank %d: %s\n", runtime.rank(), e.what());
      return 1;
    }
  } catch (const dtrain::AgreedError& e) {  // starting: every rank alike (its environment)
    if (dtrain::Runtime::reports_start_failure()) std::fprintf(stderr, "dtrain-cpp-example: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {  // the Runtime itself (MPI_Init)
    std::fprintf(stderr, "dtrain-cpp-example: %s\n", e.what());
    return 1;
  }
}
