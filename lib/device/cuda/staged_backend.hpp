#pragma once
// MPI on device buffers through pinned host memory: each operation copies its device inputs
// to a pinned block, runs the host (MPI) backend on the block, and copies the results back.
// Slower than NCCL, but any number of ranks may share one GPU, which NCCL refuses; the GPU
// tests run 2-4 ranks on one device this way. Design notes in comm/nccl_loader.hpp.
#include <memory>

#include "comm/nccl_loader.hpp"

namespace dtrain::cuda {

class CudaDevice;

// host: the MPI backend of the group (borrowed; it must outlive the result). Copies run on the
// caller's stream, or on dev's stream when none is given, after the work already queued there.
std::unique_ptr<comm::DeviceBackend> make_staged_backend(comm::Backend& host, CudaDevice& dev);

}  // namespace dtrain::cuda
