#pragma once
// Communicators over CUDA device buffers. The transports live in the CUDA plugin
// (libdtrain_cuda.so) so that libdtrain.so never links CUDA or NCCL; the comm layer opens the
// plugin with dlopen, as lib/device does for the Device, and builds each transport on a host
// (MPI) backend of the same group:
//   nccl        one NCCL communicator over the group's ranks (one GPU per rank). The
//               ncclUniqueId is created on rank 0 and broadcast through the MPI backend;
//               sub-groups (split/dup) get their own NCCL communicator the same way.
//               Collectives and send/recv run on a dedicated stream ordered after the work
//               queued on the device's stream (an event); the host waits for their end.
//   mpi_staged  MPI on pinned host copies of the device buffers: slower, but any number of
//               ranks may share one GPU (tests, small machines).
// Both keep the Communicator rules (communicator.hpp) with device pointers as buffers.
// Blocking calls return when the result is in place; "i" calls return a Request.
//
// A device communicator routes every call by its buffers, as a CUDA-aware MPI would: host
// buffers (a loss, a norm, a flag) go to the host backend, device buffers to the transport,
// and one call mixing both is refused (Errc::invalid_argument). A side with no elements on
// this rank has no say, so a rank with an empty share takes the same route as the others.
// Under nccl, point-to-point calls go through an mpi_staged transport: NCCL has no tags and
// runs sends and receives in posting order on one stream, where MPI matches them by tag (a
// pipeline's schedule and the deterministic gradient exchange rely on that).
//
// The plugin implements DeviceBackend below, not comm::Backend: Backend may gain out-of-line
// members whose symbols libdtrain.so keeps hidden, while this interface is header-only, so
// the plugin never needs a hidden symbol. A core-side adapter turns it into a Backend.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "comm/backend.hpp"
#include "dtrain/comm/communicator.hpp"

namespace dtrain::comm {

enum class DeviceTransport : int { nccl = 0, mpi_staged = 1 };
class DeviceBackend;  // the plugin's side, below
const char* device_transport_name(DeviceTransport t) noexcept;

// Where device buffers live and how transports are made: the CUDA plugin's (the default), or
// a test's own, which runs the routing over CPU memory.
class DeviceTransports {
 public:
  virtual ~DeviceTransports() = default;
  // True for memory that only the device's transports may move.
  virtual bool on_device(const void* p) const = 0;
  // A transport over host (borrowed; it outlives the result). Collective over host.
  virtual std::unique_ptr<DeviceBackend> make(Backend& host, DeviceTransport t) const = 0;
  // Whether this rank can use nccl, and then the 16-byte id (UUID) of the GPU it would use.
  virtual bool nccl_gpu(std::uint8_t uuid[16]) const = 0;
};

// Tests only: use `t` instead of the plugin from now on (null: the plugin again).
void override_device_transports(std::shared_ptr<const DeviceTransports> t);
bool device_transports_overridden();

// The transport for a job's device buffers, agreed by every rank of `world` (collective):
// DTRAIN_DEVICE_COMM = nccl | mpi_staged | auto (default: nccl where every rank can use it
// on a GPU of its own, i.e. no two ranks of a node on the same GPU UUID; else mpi_staged,
// e.g. several ranks sharing one GPU, or a plugin built without NCCL). Rank 0 logs why auto
// chose mpi_staged.
DeviceTransport choose_device_transport(Communicator& world);

// A backend for device buffers built on `host` (consumed, whether or not this succeeds).
// Throws Error(Errc::unavailable) when the plugin, a GPU or NCCL is missing, and the
// transport's own error (e.g. Errc::comm from NCCL's set-up) otherwise.
std::unique_ptr<Backend> make_device_backend(std::unique_ptr<Backend> host, DeviceTransport t);

// Collective over `host`: a new Communicator for device buffers over the same ranks, on a
// duplicate of host's MPI communicator.
Communicator device_communicator(const Communicator& host, DeviceTransport t,
                                 const std::string& name);

// ---- the plugin's side ------------------------------------------------------------------
// Bump when DeviceBackend, DeviceRequest, Backend's vtable or the entry points change.
constexpr int kCommPluginAbi = 2;

class DeviceRequest {
 public:
  virtual ~DeviceRequest() = default;
  virtual void wait() = 0;
  virtual bool test() = 0;  // true once complete
};
using DeviceRequestPtr = std::unique_ptr<DeviceRequest>;

// The data movement of a device-buffer transport; group membership (rank, size, split, ...)
// stays with the host backend it was built on. Same arguments and rules as Backend.
class DeviceBackend {
 public:
  virtual ~DeviceBackend() = default;
  virtual BackendKind kind() const = 0;

  virtual void all_reduce(const void* send, void* recv, std::size_t count, DType type,
                          ReduceOp op, void* stream) = 0;
  virtual void reduce_scatter(const void* send, void* recv, std::size_t recv_count, DType type,
                              ReduceOp op, void* stream) = 0;
  virtual void reduce_scatter_v(const void* send, void* recv, const std::size_t* recv_counts,
                                DType type, ReduceOp op, void* stream) = 0;
  virtual void all_gather(const void* send, void* recv, std::size_t send_count, DType type,
                          void* stream) = 0;
  virtual void all_gather_v(const void* send, void* recv, const std::size_t* recv_counts,
                            DType type, void* stream) = 0;
  virtual void broadcast(const void* send, void* recv, std::size_t count, DType type, int root,
                         void* stream) = 0;
  virtual void reduce(const void* send, void* recv, std::size_t count, DType type, ReduceOp op,
                      int root, void* stream) = 0;
  virtual void send(const void* buf, std::size_t count, DType type, int peer, int tag,
                    void* stream) = 0;
  virtual void recv(void* buf, std::size_t count, DType type, int peer, int tag,
                    void* stream) = 0;
  virtual void barrier(void* stream) = 0;

  virtual DeviceRequestPtr iall_reduce(const void* send, void* recv, std::size_t count,
                                       DType type, ReduceOp op, void* stream) = 0;
  virtual DeviceRequestPtr ireduce_scatter(const void* send, void* recv, std::size_t recv_count,
                                           DType type, ReduceOp op, void* stream) = 0;
  virtual DeviceRequestPtr ireduce_scatter_v(const void* send, void* recv,
                                             const std::size_t* recv_counts, DType type,
                                             ReduceOp op, void* stream) = 0;
  virtual DeviceRequestPtr iall_gather(const void* send, void* recv, std::size_t send_count,
                                       DType type, void* stream) = 0;
  virtual DeviceRequestPtr iall_gather_v(const void* send, void* recv,
                                         const std::size_t* recv_counts, DType type,
                                         void* stream) = 0;
  virtual DeviceRequestPtr ibroadcast(const void* send, void* recv, std::size_t count,
                                      DType type, int root, void* stream) = 0;
  virtual DeviceRequestPtr isend(const void* buf, std::size_t count, DType type, int peer,
                                 int tag, void* stream) = 0;
  virtual DeviceRequestPtr irecv(void* buf, std::size_t count, DType type, int peer, int tag,
                                 void* stream) = 0;
};

}  // namespace dtrain::comm

extern "C" {
// kCommPluginAbi of the plugin's build.
typedef int (*dtrain_cuda_comm_abi_fn)(void);
// A transport over `host` (borrowed: it must outlive the result), or null with a reason in
// msg and a dtrain::Errc value in *errc. Collective over host. Never throws.
typedef dtrain::comm::DeviceBackend* (*dtrain_cuda_make_comm_backend_fn)(
    dtrain::comm::Backend* host, int transport, int* errc, char* msg, unsigned long msg_len);
// 1 when p is device (or managed) memory, 0 for host memory, -1 when CUDA reports another
// error (a fault an earlier kernel left; logged). Never throws.
typedef int (*dtrain_cuda_pointer_on_device_fn)(const void* p);
// 1 when the plugin was built with NCCL and this process has a GPU, whose 16-byte UUID it then
// writes to uuid; else 0. Never throws.
typedef int (*dtrain_cuda_comm_nccl_gpu_fn)(unsigned char* uuid);
}

#define DTRAIN_CUDA_SYM_COMM_ABI "dtrain_cuda_comm_abi"
#define DTRAIN_CUDA_SYM_MAKE_COMM "dtrain_cuda_make_comm_backend"
#define DTRAIN_CUDA_SYM_ON_DEVICE "dtrain_cuda_pointer_on_device"
#define DTRAIN_CUDA_SYM_NCCL_GPU "dtrain_cuda_comm_nccl_gpu"
