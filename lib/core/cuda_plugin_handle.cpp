#include "core/cuda_plugin_handle.hpp"

#include <dlfcn.h>

#include <string>
#include <vector>

#include "dtrain/core/env.hpp"

namespace dtrain {
namespace {

// Directory holding this library, so the plugin installed next to libdtrain.so is found
// without LD_LIBRARY_PATH.
std::string own_directory() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&own_directory), &info) && info.dli_fname) {
    std::string path = info.dli_fname;
    const auto slash = path.rfind('/');
    if (slash != std::string::npos) return path.substr(0, slash + 1);
  }
  return {};
}

// Whether NVIDIA's driver library is there to load: without it no GPU can be used, and the
// plugin (which maps cuBLAS and the CUDA runtime: about 0.1 s and 200 MB of a process's
// resident memory) is not worth opening to find that out.
bool driver_present(std::string* why) {
  void* driver = dlopen(kCudaDriverName, RTLD_LAZY | RTLD_LOCAL);
  if (!driver) {
    const char* err = dlerror();
    *why = std::string("no NVIDIA driver (") + (err ? err : kCudaDriverName) + ")";
    return false;
  }
  dlclose(driver);
  return true;
}

CudaPluginHandle open_plugin() {
  CudaPluginHandle p;
  const std::string named = env::get_string("DTRAIN_CUDA_PLUGIN", "");
  // A plugin named explicitly is opened whatever: an emulated GPU needs no driver.
  if (named.empty() && !driver_present(&p.error)) return p;
  // A plugin named explicitly is the only one tried (instead of the one beside libdtrain.so,
  // as documented): a wrong path must not quietly load another build's plugin.
  const std::vector<std::string> candidates =
      named.empty() ? std::vector<std::string>{own_directory() + kCudaPluginName, kCudaPluginName}
                    : std::vector<std::string>{named};
  // Every candidate's reason, so that the first's (a plugin whose dependencies are missing,
  // say) does not hide behind the last fallback's "cannot open".
  std::string errors;
  for (const std::string& name : candidates) {
    p.handle = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (p.handle) return p;
    const char* err = dlerror();
    errors += (errors.empty() ? "" : "; ") + std::string(err ? err : name + ": not found");
  }
  p.error = (named.empty() ? std::string(kCudaPluginName) : "DTRAIN_CUDA_PLUGIN='" + named + "'") +
            " could not be loaded: " + errors;
  return p;
}

}  // namespace

void* CudaPluginHandle::symbol(const char* name) const {
  return handle ? dlsym(handle, name) : nullptr;
}

const CudaPluginHandle& cuda_plugin_handle() {
  static const CudaPluginHandle p = open_plugin();  // thread-safe, once per process
  return p;
}

}  // namespace dtrain
