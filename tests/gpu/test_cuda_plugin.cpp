// The CUDA plugin loads everywhere. Without a GPU: CPU chosen for "auto", a clear
// Errc::unavailable for "cuda", and this test reports "skipped" for the GPU half (exit 77).
// With a GPU: the plugin must hand out a working device.
#include <cstdio>
#include <cstring>
#include <string>

#include "dtrain/core/error.hpp"
#include "dtrain/device/device.hpp"

namespace {
constexpr int kSkipped = 77;

int fail(const std::string& what) {
  std::fprintf(stderr, "FAILED: %s\n", what.c_str());
  return 1;
}
}  // namespace

int main() {
  using namespace dtrain;
  if (!cuda_available()) {
    if (select_device("auto").kind() != DeviceKind::cpu) return fail("auto did not fall back to the CPU");
    try {
      select_device("cuda");
      return fail("--device cuda did not fail without a GPU");
    } catch (const Error& e) {
      if (e.code() != Errc::unavailable) return fail(std::string("wrong error code: ") + e.what());
      if (!std::strstr(e.what(), "--device cuda")) return fail(std::string("unclear message: ") + e.what());
      std::printf("no GPU here (%s): CPU path taken cleanly; GPU checks skipped\n", e.what());
    }
    return kSkipped;
  }
  Device& gpu = select_device("cuda");
  if (gpu.kind() != DeviceKind::cuda) return fail("select_device(cuda) returned a non-CUDA device");
  std::printf("GPU device: %s\n", gpu.name().c_str());
  return 0;
}
