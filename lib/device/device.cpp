// Device base class, DeviceBuffer, and choosing a device (CPU, or CUDA through the plugin).
#include "dtrain/device/device.hpp"


#include <atomic>
#include <mutex>
#include <string>
#include <utility>

#include "core/cuda_plugin_handle.hpp"
#include "device/plugin.hpp"
#include "dtrain/core/env.hpp"
#include "dtrain/core/error.hpp"
#include "dtrain/core/log.hpp"

namespace dtrain {

const char* device_kind_name(DeviceKind kind) noexcept {
  switch (kind) {
    case DeviceKind::cpu: return "cpu";
    case DeviceKind::cuda: return "cuda";
  }
  return "unknown";
}

Device::~Device() = default;

void Device::sum_squares_runs(const float* x, const std::int64_t* starts,
                              const std::int64_t* lengths, std::size_t runs, double* sums) {
  for (std::size_t i = 0; i < runs; ++i) sums[i] = sum_squares(x + starts[i], lengths[i]);
}

void Device::set_gemm_operand_format(DType fmt) {
  check_float_format(fmt, "set_gemm_operand_format");
}

void Device::crossentropy_forward_16bit(float*, float*, const std::uint16_t*, const std::int32_t*,
                                        int, int, int) {
  DTRAIN_FAIL(Errc::unavailable, "crossentropy_forward_16bit: " << name()
                                     << " has no 16-bit GEMM operands");
}

void Device::crossentropy_backward_16bit(std::uint16_t*, const float*, const float*,
                                         const std::int32_t*, const float*, int, int, int, int,
                                         const std::uint16_t*) {
  DTRAIN_FAIL(Errc::unavailable, "crossentropy_backward_16bit: " << name()
                                     << " has no 16-bit GEMM operands");
}

void Device::linear_forward_residual(float* out, const float* residual, const float* inp,
                                     const float* weight, const float* bias, int N, int C, int OC,
                                     const std::uint16_t* inp16) {
  linear_forward(out, inp, weight, bias, N, C, OC, inp16);
  residual_forward(out, residual, out, static_cast<std::int64_t>(N) * OC);
}

void Device::gelu_backward_rounded(std::uint16_t*, float*, const std::uint16_t*, const float*,
                                   int, int, const std::uint16_t*) {
  DTRAIN_FAIL(Errc::unavailable, "gelu_backward_rounded: " << name()
                                     << " has no 16-bit GEMM operands");
}

bool Device::attention_backward_rounded(std::uint16_t*, float*, float*, const float*,
                                        const float*, int, int, int, int, const std::uint16_t*,
                                        const std::uint16_t*, const std::uint16_t*) {
  return false;
}

void Device::gelu_forward_16bit(std::uint16_t*, const std::uint16_t*, std::int64_t) {
  DTRAIN_FAIL(Errc::unavailable, "gelu_forward_16bit: " << name() << " has no 16-bit GEMM operands");
}

void Device::adamw_ranges(float* param, const float* grad, float* m, float* v,
                          const AdamWRange* ranges, std::size_t count, float lr, float beta1,
                          float beta2, float eps, int step, float grad_scale) {
  for (std::size_t i = 0; i < count; ++i) {
    const AdamWRange& r = ranges[i];
    adamw(param + r.param, grad + r.grad, m + r.state, v + r.state, r.n, lr, beta1, beta2, eps,
          r.weight_decay, step, grad_scale);
  }
}

std::size_t Device::attention_saved_floats(int B, int T, int, int NH) const {
  return static_cast<std::size_t>(B) * NH * T * T;
}

// ---- DeviceBuffer --------------------------------------------------------------
DeviceBuffer::DeviceBuffer(Device& dev, std::size_t bytes)
    : dev_(&dev), data_(dev.allocate(bytes)), bytes_(bytes) {}
DeviceBuffer DeviceBuffer::arena(Device& dev, std::size_t bytes) {
  return DeviceBuffer(dev, dev.allocate_arena(bytes), bytes);
}
DeviceBuffer::~DeviceBuffer() { reset(); }
DeviceBuffer::DeviceBuffer(DeviceBuffer&& o) noexcept
    : dev_(std::exchange(o.dev_, nullptr)),
      data_(std::exchange(o.data_, nullptr)),
      bytes_(std::exchange(o.bytes_, 0)) {}
DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    reset();
    dev_ = std::exchange(o.dev_, nullptr);
    data_ = std::exchange(o.data_, nullptr);
    bytes_ = std::exchange(o.bytes_, 0);
  }
  return *this;
}
void DeviceBuffer::reset() noexcept {
  if (dev_ && data_) dev_->free(data_);
  dev_ = nullptr;
  data_ = nullptr;
  bytes_ = 0;
}

// ---- CUDA plugin lookup --------------------------------------------------------
namespace {

struct CudaPlugin {
  Device* device = nullptr;  // non-null when a GPU is usable
  std::string reason;        // why not, otherwise
};

CudaPlugin load_cuda_plugin() {
  CudaPlugin p;
  const CudaPluginHandle& plugin = cuda_plugin_handle();
  if (!plugin.handle) {
    p.reason = plugin.error;
    return p;
  }
  // The plugin stays loaded for the life of the process (its device is a static there).
  auto abi = reinterpret_cast<dtrain_cuda_plugin_abi_fn>(plugin.symbol(DTRAIN_CUDA_SYM_ABI));
  auto count =
      reinterpret_cast<dtrain_cuda_device_count_fn>(plugin.symbol(DTRAIN_CUDA_SYM_COUNT));
  auto get = reinterpret_cast<dtrain_cuda_get_device_fn>(plugin.symbol(DTRAIN_CUDA_SYM_GET));
  if (!abi || !count || !get) {
    p.reason = std::string(kCudaPluginName) + " lacks the dtrain plugin entry points";
    return p;
  }
  if (abi() != kCudaPluginAbi) {
    p.reason = std::string(kCudaPluginName) + " has plugin ABI " + std::to_string(abi()) +
               ", this library needs " + std::to_string(kCudaPluginAbi);
    return p;
  }
  char msg[256] = {0};
  const int n = count(msg, sizeof msg);
  if (n <= 0) {
    p.reason = msg[0] ? std::string(msg) : std::string("no CUDA device found");
    return p;
  }
  p.device = get(0);
  if (!p.device) p.reason = "the CUDA plugin returned no device";
  return p;
}

const CudaPlugin& cuda_plugin() {
  static const CudaPlugin plugin = load_cuda_plugin();  // looked up once per process
  return plugin;
}

}  // namespace

bool cuda_available() noexcept {
  try {
    return cuda_plugin().device != nullptr;
  } catch (...) {
    return false;
  }
}

Device& select_device(const std::string& which) { return select_device(which, "--device"); }

Device& select_device(const std::string& which, const std::string& option) {
  if (which == "cpu") return cpu_device();
  if (which == "cuda") {
    const CudaPlugin& p = cuda_plugin();
    DTRAIN_CHECK(p.device != nullptr, Errc::unavailable,
                 option << " cuda: no CUDA device/plugin available (" << p.reason << "); use "
                        << option << " cpu or auto");
    return *p.device;
  }
  if (which == "auto") {
    const CudaPlugin& p = cuda_plugin();
    if (p.device) return *p.device;
    // A plugin named in DTRAIN_CUDA_PLUGIN was asked for: its failure is said (once).
    static const bool named = !env::get_string("DTRAIN_CUDA_PLUGIN", "").empty();
    static std::atomic<bool> said{false};
    if (named && !said.exchange(true)) {
      DTRAIN_LOG(warn, option << " auto: using the CPU (" << p.reason << ")");
    } else {
      DTRAIN_LOG(debug, option << " auto: using the CPU (" << p.reason << ")");
    }
    return cpu_device();
  }
  DTRAIN_FAIL(Errc::invalid_argument,
              option << " must be one of auto, cpu, cuda; got '" << which << "'");
}

DType check_float_format(DType fmt, const char* op) {
  return fmt == DType::f32 ? fmt : check_16bit_format(fmt, op);
}

DType check_16bit_format(DType fmt, const char* op) {
  DTRAIN_CHECK(fmt == DType::bf16 || fmt == DType::f16, Errc::invalid_argument,
               op << ": the format must be bf16 or f16, got " << dtype_name(fmt));
  return fmt;
}

}  // namespace dtrain
