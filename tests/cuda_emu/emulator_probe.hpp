#pragma once
// The CUDA emulator's probes, for tests that run on the emulated GPU as well as elsewhere:
// `dtrain_cuda_emu_chunk_bytes` (bytes of the physical arena chunks that exist now),
// `dtrain_cuda_emu_chunk_bytes_peak` (the most since its last call) and
// `dtrain_cuda_emu_chunks_created` (chunks ever made), looked up in the loaded plugin. Null
// with the CPU or a real plugin, which has none. Under the emulator's own test registrations
// (DTRAIN_TEST_EMULATOR set) a missing probe is a failure: the memory checks that need it
// would otherwise vanish without a word.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdlib>

namespace dtrain::test {

using EmulatorProbe = std::size_t (*)();

inline EmulatorProbe emulator_probe(const char* name) {
  const char* path = std::getenv("DTRAIN_CUDA_PLUGIN");
  void* plugin = path ? dlopen(path, RTLD_NOW | RTLD_NOLOAD) : nullptr;
  const auto probe = plugin ? reinterpret_cast<EmulatorProbe>(dlsym(plugin, name)) : nullptr;
  if (!probe && std::getenv("DTRAIN_TEST_EMULATOR"))
    ADD_FAILURE() << "the emulator's probe " << name << " is not in a loaded " << (path ? path : "(no plugin)");
  return probe;
}

}  // namespace dtrain::test
