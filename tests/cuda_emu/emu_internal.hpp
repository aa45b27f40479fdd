#pragma once
// Shared between the emulator's own files (not seen by the plugin's sources).
#include <cstddef>

#include "cuda_runtime.h"

namespace dtrain_emu {

void set_last_error(cudaError_t err);
// Runs `task` in stream order: queued until the host next synchronises with the stream.
void enqueue(cudaStream_t stream, Task task);
// Checks that [p, p + bytes) lies inside one device allocation (false: an error is printed).
bool device_range_ok(const void* p, std::size_t bytes, const char* what);

}  // namespace dtrain_emu
