// The core's CUDA plugin loader, CPU side. One scenario per run (the lookup happens once per
// process), chosen by argv[1] with the environment CTest sets:
//   missing          DTRAIN_CUDA_PLUGIN names no file and no plugin is on the search path
//   no-entry-points  DTRAIN_CUDA_PLUGIN names a shared library that is not a dtrain plugin
//   present          DTRAIN_CUDA_PLUGIN names the plugin built here
//   no-driver        DTRAIN_CUDA_PLUGIN unset, on a machine without NVIDIA's driver library:
//                    the plugin beside libdtrain.so is not even opened
//   old-gpu          the plugin finds only GPUs older than its kernels (the emulator with
//                    DTRAIN_CUDA_EMU_SM=70)
// In every scenario without a usable GPU: "auto" gives the CPU, "cuda" throws
// Errc::unavailable with a message that names --device cuda and the reason. With a GPU and
// the plugin, "cuda" and "auto" give a working CUDA device.
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "dtrain/core/error.hpp"
#include "dtrain/device/device.hpp"

namespace {

int fail(const std::string& what) {
  std::fprintf(stderr, "FAILED: %s\n", what.c_str());
  return 1;
}

// The CPU fallback and the --device cuda message; `reason` must appear in the message.
int expect_cpu_fallback(const std::vector<std::string>& reasons) {
  using namespace dtrain;
  if (cuda_available()) return fail("cuda_available() is true");
  if (select_device("auto").kind() != DeviceKind::cpu) return fail("auto did not pick the CPU");
  if (&select_device("auto") != &cpu_device()) return fail("auto did not return cpu_device()");
  try {
    select_device("cuda");
    return fail("--device cuda did not throw");
  } catch (const Error& e) {
    const std::string msg = e.what();
    std::printf("%s\n", msg.c_str());
    if (e.code() != Errc::unavailable) return fail("wrong error code for: " + msg);
    if (msg.find("--device cuda") == std::string::npos) return fail("message lacks the option");
    for (const std::string& r : reasons) {
      if (msg.find(r) != std::string::npos) return 0;
    }
    return fail("message gives none of the expected reasons");
  }
}

}  // namespace

int main(int argc, char** argv) {
  using namespace dtrain;
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "missing") {
    // A plugin named in DTRAIN_CUDA_PLUGIN is the only one tried: none other may be found.
    // Without one, a plugin installed on the loader's path would be found: nothing to test.
    const char* asked = std::getenv("DTRAIN_CUDA_PLUGIN");
    if (cuda_available()) {
      if (asked && *asked) return fail("a plugin was loaded although DTRAIN_CUDA_PLUGIN names none that exists");
      std::printf("a plugin was found on the search path: scenario not testable here\n");
      return 77;
    }
    // The reason names the plugin asked for.
    if (asked && *asked) return expect_cpu_fallback({std::string(asked) + ": cannot open"});
    return expect_cpu_fallback({"could not be loaded"});
  }
  if (mode == "no-driver") {
    void* driver = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
    if (driver) {
      dlclose(driver);
      std::printf("this machine has NVIDIA's driver library: scenario not testable here\n");
      return 77;
    }
    if (int rc = expect_cpu_fallback({"no NVIDIA driver (libcuda.so.1"})) return rc;
    if (dlopen("libdtrain_cuda.so", RTLD_NOW | RTLD_NOLOAD)) return fail("the plugin was loaded");
    return 0;
  }
  if (mode == "old-gpu") {
    return expect_cpu_fallback({"no CUDA device of compute capability 8.0 or newer (device 0: "});
  }
  if (mode == "no-entry-points") {
    return expect_cpu_fallback({"lacks the dtrain plugin entry points"});
  }
  if (mode == "present") {
    if (!cuda_available()) {
      // The plugin loads; without a driver or GPU its probe must say so, not crash.
      return expect_cpu_fallback({"cudaGetDeviceCount failed", "no CUDA device"});
    }
    Device& gpu = select_device("cuda");
    if (gpu.kind() != DeviceKind::cuda) return fail("cuda gave a non-CUDA device");
    if (&select_device("auto") != &gpu) return fail("auto did not pick the GPU");
    if (gpu.name().find("cuda:") != 0) return fail("unexpected name " + gpu.name());
    std::vector<float> in(1000, 1.5f), out(1000, 0.0f);
    DeviceBuffer buf(gpu, sizeof(float) * in.size());
    gpu.copy(buf.data(), in.data(), sizeof(float) * in.size(), CopyKind::host_to_device);
    gpu.scale(buf.as<float>(), 2.0f, 1000);
    gpu.copy(out.data(), buf.data(), sizeof(float) * out.size(), CopyKind::device_to_host);
    if (out[999] != 3.0f) return fail("device round trip gave wrong values");
    std::printf("plugin loaded: %s\n", gpu.name().c_str());
    return 0;
  }
  return fail("usage: test_plugin_loader missing|no-entry-points|present|no-driver|old-gpu");
}
