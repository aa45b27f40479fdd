#pragma once
// The NCCL transport (design in comm/nccl_loader.hpp). Compiled into the CUDA plugin only;
// this header keeps nccl.h out of its includers.
#include <memory>

#include "comm/nccl_loader.hpp"

namespace dtrain::comm {

// An NCCL communicator over host's ranks on GPU `device`. host (the MPI backend of the same
// group, borrowed for the call) broadcasts the ncclUniqueId from its rank 0. compute_stream
// (a cudaStream_t) is the device's stream: operations given no stream of their own are
// ordered after the work queued there. A blocking call's result is there for the work queued
// afterwards; a non-blocking one's only once its Request's wait() or test() has seen it
// finish (the compute stream does not wait for it).
// Collective over host. Throws Error(Errc::comm) when NCCL fails to set up.
std::unique_ptr<DeviceBackend> make_nccl_backend(Backend& host, void* compute_stream,
                                                 int device);

}  // namespace dtrain::comm
