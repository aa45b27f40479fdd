#pragma once
// What the opaque C handles point to, and the registry that tells a live handle from a
// dangling or foreign pointer before anything is dereferenced.
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "dtrain.h"
#include "dtrain/comm/communicator.hpp"
#include "dtrain/comm/process_grid.hpp"
#include "dtrain/comm/runtime.hpp"
#include "dtrain/device/device.hpp"
#include "dtrain/parallel/cpu_threads.hpp"

namespace dtrain::capi {

// Magic numbers double as kind tags: a handle of one kind passed as another is rejected.
enum class Kind : std::uint32_t {
  context = 0x64744358u,  // "dtCX"
  comm = 0x6474434Du,     // "dtCM"
  grid = 0x64744752u,     // "dtGR"
  byom = 0x6474424Fu,     // "dtBO"
  model = 0x64744D44u,    // "dtMD"
};

const char* kind_name(Kind k) noexcept;

struct Handle {
  Handle(Kind k, dt_context_s* c) : magic(k), ctx(c) {}
  virtual ~Handle() = default;
  Kind magic;
  dt_context_s* ctx;
  // What the program holds: a number never handed out twice in the process, not the
  // object's address, which the allocator reuses at once (a destroyed handle would then
  // name a newer object, and a second destroy would delete it).
  std::uintptr_t token = 0;
};

// Registration gives a handle its token and makes it visible to lookups; every handle is
// registered right after construction and unregistered right before deletion.
void register_handle(Handle* h);
void unregister_handle(Handle* h) noexcept;
// The handle if p is a live handle's token of kind k; null otherwise.
Handle* find_handle(const void* p, Kind k) noexcept;
// The value the program receives for a registered handle (typed as the C handle, never
// dereferenced).
template <class T>
T* user_handle(T* h) noexcept {
  return reinterpret_cast<T*>(h->token);
}

}  // namespace dtrain::capi

struct dt_comm_s : dtrain::capi::Handle {
  dt_comm_s(dt_context_s* c, dtrain::Communicator* comm, dt_grid_s* owner)
      : Handle(dtrain::capi::Kind::comm, c), comm(comm), grid(owner) {}
  ~dt_comm_s() override;
  dtrain::Communicator* comm;  // owned by the context, the grid, or (a device handle) its host
  dt_grid_s* grid;             // null for the world communicator and its device handle
  // dt_comm_device(): made at its first call; this handle's ranks over a device transport.
  std::unique_ptr<dtrain::Communicator> device_comm;
  std::unique_ptr<dt_comm_s> device_handle;  // registered while this handle lives
  dt_comm_s* host = nullptr;                 // of a device handle: the handle it was made from
  dtrain::Device* device = nullptr;          // of a device handle: the GPU of its buffers
  // The MPI communicator of these ranks (a device handle's host's).
  dtrain::Communicator& host_comm() { return host ? *host->comm : *comm; }
};

// A user of a grid's communicators (model, byom) pins the grid for its lifetime.
struct dt_grid_s : dtrain::capi::Handle {
  dt_grid_s(dt_context_s* c, const dtrain::GridShape& shape);
  ~dt_grid_s() override;
  dtrain::ProcessGrid grid;
  std::unique_ptr<dt_comm_s> comms[4];  // by dt_group_t
  std::atomic<int> users{0};  // handles may be made and destroyed on several threads
};

struct dt_context_s : dtrain::capi::Handle {
  explicit dt_context_s(dtrain::Runtime rt);
  ~dt_context_s() override;
  dtrain::Runtime runtime;
  // This rank's share of its node's CPUs, counted over the world at dt_init*: the threads a
  // built-in model on the CPU runs. OpenMP's default, every CPU of the rank's mask, puts
  // several threads on each core where ranks share their CPUs (docs/c-api.md).
  dtrain::parallel::CpuThreads cpu_threads;
  std::unique_ptr<dt_comm_s> world;
  std::mutex error_mutex;
  std::string last_error;
  std::uint64_t last_error_number = 0;  // of last_error in the process's count of failures
  // Grids, byoms and models in creation order: dt_finalize releases them newest first.
  // Threads may create and destroy handles of one context at once.
  std::mutex children_mutex;
  std::vector<dtrain::capi::Handle*> children;
};

namespace dtrain::capi {

// A handle that depends on a communicator: pins the communicator's grid, if any.
struct CommUser : Handle {
  CommUser(Kind k, dt_comm_s* comm);
  ~CommUser() override;
  dt_comm_s* comm;
};

// Adds h to its context (registered, released by dt_finalize); takes ownership.
template <class T>
T* adopt(std::unique_ptr<T> h) {
  T* raw = h.get();
  register_handle(raw);  // either may run out of memory: h, still the owner, then frees it
  try {
    std::lock_guard<std::mutex> lock(raw->ctx->children_mutex);
    raw->ctx->children.push_back(raw);
  } catch (...) {
    unregister_handle(raw);  // no entry may outlive the object
    throw;
  }
  h.release();
  return raw;
}
// Removes a child from its context and deletes it.
void release_child(Handle* h) noexcept;

}  // namespace dtrain::capi
