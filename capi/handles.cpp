// The live-handle registry and the lifetime of contexts, grids and their communicators.
#include "handles.hpp"

#include <algorithm>
#include <unordered_map>

#include "guard.hpp"

namespace dtrain::capi {
namespace {

std::mutex& registry_mutex() {
  static std::mutex m;
  return m;
}
// Never destroyed: handles may be released from atexit handlers of other libraries.
std::unordered_map<std::uintptr_t, Handle*>& registry() {
  static auto* r = new std::unordered_map<std::uintptr_t, Handle*>();
  return *r;
}
// Tokens are multiples of 16 from 4096 up: never null, never a live object's address that a
// program could mistake for one, and 2^60 of them before they wrap.
std::uintptr_t next_token() {
  static std::uintptr_t count = 0;  // under registry_mutex()
  return 4096 + 16 * count++;
}

}  // namespace

const char* kind_name(Kind k) noexcept {
  switch (k) {
    case Kind::context: return "dt_context_t";
    case Kind::comm: return "dt_comm_t";
    case Kind::grid: return "dt_grid_t";
    case Kind::byom: return "dt_byom_t";
    case Kind::model: return "dt_model_t";
  }
  return "handle";
}

void register_handle(Handle* h) {
  std::lock_guard<std::mutex> lock(registry_mutex());
  const std::uintptr_t token = next_token();
  registry().emplace(token, h);  // may run out of memory: h keeps no token then
  h->token = token;
}

void unregister_handle(Handle* h) noexcept {
  std::lock_guard<std::mutex> lock(registry_mutex());
  if (h->token != 0) registry().erase(h->token);
  h->token = 0;
}

Handle* find_handle(const void* p, Kind k) noexcept {
  if (!p) return nullptr;
  std::lock_guard<std::mutex> lock(registry_mutex());
  const auto it = registry().find(reinterpret_cast<std::uintptr_t>(p));
  if (it == registry().end() || it->second->magic != k) return nullptr;
  return it->second;
}

CommUser::CommUser(Kind k, dt_comm_s* c) : Handle(k, c->ctx), comm(c) {
  if (comm->grid) ++comm->grid->users;
}

CommUser::~CommUser() {
  if (comm->grid) --comm->grid->users;
}

void release_child(Handle* h) noexcept {
  {
    std::lock_guard<std::mutex> lock(h->ctx->children_mutex);
    auto& kids = h->ctx->children;
    kids.erase(std::remove(kids.begin(), kids.end(), h), kids.end());
  }
  unregister_handle(h);
  delete h;
}

}  // namespace dtrain::capi

using dtrain::capi::register_handle;
using dtrain::capi::unregister_handle;

dt_comm_s::~dt_comm_s() {
  if (device_handle) unregister_handle(device_handle.get());
}

dt_grid_s::dt_grid_s(dt_context_s* c, const dtrain::GridShape& shape)
    : Handle(dtrain::capi::Kind::grid, c), grid(c->runtime.world(), shape) {
  dtrain::Communicator* groups[4] = {&grid.world(), &grid.tp(), &grid.pp(), &grid.dp()};
  try {
    for (int i = 0; i < 4; ++i) {
      comms[i] = std::make_unique<dt_comm_s>(c, groups[i], this);
      register_handle(comms[i].get());
    }
  } catch (...) {  // out of memory: a constructor that throws runs no destructor
    for (auto& comm : comms)
      if (comm) unregister_handle(comm.get());
    throw;
  }
}

dt_grid_s::~dt_grid_s() {
  for (auto& comm : comms)
    if (comm) unregister_handle(comm.get());
}

// The thread count (a collective that may throw) comes before the world's handle is
// registered: a constructor that throws runs no destructor to unregister it.
dt_context_s::dt_context_s(dtrain::Runtime rt)
    : Handle(dtrain::capi::Kind::context, this),
      runtime(std::move(rt)),
      cpu_threads(dtrain::parallel::threads_per_rank(runtime.world())) {
  world = std::make_unique<dt_comm_s>(this, &runtime.world(), nullptr);
  register_handle(world.get());
  last_error_number = dtrain::capi::failures_recorded();
}

dt_context_s::~dt_context_s() {
  // Newest first, so a model goes before the grid whose groups it uses.
  for (;;) {
    dtrain::capi::Handle* newest = nullptr;
    {
      std::lock_guard<std::mutex> lock(children_mutex);
      if (children.empty()) break;
      newest = children.back();
    }
    dtrain::capi::release_child(newest);
  }
  unregister_handle(world.get());
}
