// Finding the device-buffer transports in the CUDA plugin (see nccl_loader.hpp), opened
// once per process for lib/device and this file alike (core/cuda_plugin_handle.hpp).
#include "comm/nccl_loader.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <mutex>
#include <vector>

#include "comm/comm_state.hpp"
#include "comm/watchdog.hpp"
#include "core/cuda_plugin_handle.hpp"
#include "core/host_name.hpp"
#include "dtrain/core/env.hpp"
#include "dtrain/core/error.hpp"
#include "dtrain/core/hash.hpp"
#include "dtrain/core/log.hpp"

namespace dtrain::comm {
namespace {

// ---- the plugin's transports ----------------------------------------------------------------

struct CommPlugin {
  dtrain_cuda_make_comm_backend_fn make = nullptr;
  dtrain_cuda_pointer_on_device_fn on_device = nullptr;
  dtrain_cuda_comm_nccl_gpu_fn nccl_gpu = nullptr;
  std::string reason;  // why make is null
};

CommPlugin load_plugin() {
  CommPlugin p;
  const CudaPluginHandle& plugin = cuda_plugin_handle();
  if (!plugin.handle) {
    p.reason = plugin.error;
    return p;
  }
  auto abi = reinterpret_cast<dtrain_cuda_comm_abi_fn>(plugin.symbol(DTRAIN_CUDA_SYM_COMM_ABI));
  auto make = reinterpret_cast<dtrain_cuda_make_comm_backend_fn>(
      plugin.symbol(DTRAIN_CUDA_SYM_MAKE_COMM));
  auto on_device = reinterpret_cast<dtrain_cuda_pointer_on_device_fn>(
      plugin.symbol(DTRAIN_CUDA_SYM_ON_DEVICE));
  auto nccl_gpu =
      reinterpret_cast<dtrain_cuda_comm_nccl_gpu_fn>(plugin.symbol(DTRAIN_CUDA_SYM_NCCL_GPU));
  if (!abi || !make || !on_device || !nccl_gpu) {
    p.reason = std::string(kCudaPluginName) + " has no device-buffer communication entry points";
    return p;
  }
  if (abi() != kCommPluginAbi) {
    p.reason = std::string(kCudaPluginName) + " has communication ABI " + std::to_string(abi()) +
               ", this library needs " + std::to_string(kCommPluginAbi);
    return p;
  }
  p.make = make;
  p.on_device = on_device;
  p.nccl_gpu = nccl_gpu;
  return p;
}

const CommPlugin& plugin() {
  static const CommPlugin p = load_plugin();  // looked up once per process
  return p;
}

class PluginTransports final : public DeviceTransports {
 public:
  bool on_device(const void* p) const override {
    if (!plugin().on_device) return false;
    const int where = plugin().on_device(p);
    DTRAIN_CHECK(where >= 0, Errc::internal,
                 "the GPU reports an error where a buffer's memory was looked up (a fault an "
                 "earlier kernel left; the CUDA plugin's log line says which)");
    return where == 1;
  }
  std::unique_ptr<DeviceBackend> make(Backend& host, DeviceTransport t) const override {
    const CommPlugin& p = plugin();
    DTRAIN_CHECK(p.make != nullptr, Errc::unavailable,
                 "device-buffer communication (" << device_transport_name(t)
                                                 << ") is unavailable: " << p.reason);
    int code = static_cast<int>(Errc::unavailable);
    char msg[512] = {0};
    DeviceBackend* made = p.make(&host, static_cast<int>(t), &code, msg, sizeof msg);
    if (!made) {
      const bool known = code > 0 && code <= static_cast<int>(Errc::internal);
      throw Error(known ? static_cast<Errc>(code) : Errc::internal,
                  std::string("device-buffer communication (") + device_transport_name(t) +
                      "): " + msg);
    }
    return std::unique_ptr<DeviceBackend>(made);
  }
  bool nccl_gpu(std::uint8_t uuid[16]) const override {
    const CommPlugin& p = plugin();
    return p.make && p.nccl_gpu(uuid) == 1;
  }
};

std::mutex override_mutex;
std::shared_ptr<const DeviceTransports> overridden;

std::shared_ptr<const DeviceTransports> active_transports() {
  std::lock_guard<std::mutex> lock(override_mutex);
  if (overridden) return overridden;
  static const auto from_plugin = std::make_shared<const PluginTransports>();
  return from_plugin;
}

// ---- routing by buffer ------------------------------------------------------------------------

class RequestAdapter final : public RequestImpl {
 public:
  explicit RequestAdapter(DeviceRequestPtr impl) : impl_(std::move(impl)) {}
  void wait() override { impl_->wait(); }
  bool test() override { return impl_->test(); }

 private:
  DeviceRequestPtr impl_;
};

RequestPtr adapt(DeviceRequestPtr r) { return std::make_unique<RequestAdapter>(std::move(r)); }

// A Backend whose membership comes from the host backend and whose calls go, by their
// buffers, to the host backend or to a device transport (design in nccl_loader.hpp).
class RoutedBackend final : public Backend {
 public:
  RoutedBackend(std::unique_ptr<Backend> host, DeviceTransport t,
                std::shared_ptr<const DeviceTransports> transports)
      : host_(std::move(host)), transport_(t), transports_(std::move(transports)),
        collectives_(transports_->make(*host_, t)),
        staged_p2p_(t == DeviceTransport::nccl
                        ? transports_->make(*host_, DeviceTransport::mpi_staged)
                        : nullptr) {}

  BackendKind kind() const override { return collectives_->kind(); }
  int rank() const override { return host_->rank(); }
  int size() const override { return host_->size(); }
  int local_rank() const override { return host_->local_rank(); }
  int local_size() const override { return host_->local_size(); }
  const std::vector<int>& world_ranks() const override { return host_->world_ranks(); }
  int fortran_handle() const override { return host_->fortran_handle(); }

  std::unique_ptr<Backend> split(int color, int key) const override {
    std::unique_ptr<Backend> sub = host_->split(color, key);
    if (!sub) return nullptr;
    return std::make_unique<RoutedBackend>(std::move(sub), transport_, transports_);
  }
  std::unique_ptr<Backend> dup() const override {
    return std::make_unique<RoutedBackend>(host_->dup(), transport_, transports_);
  }

  void all_reduce(const void* send, void* recv, std::size_t count, DType type, ReduceOp op,
                  void* stream) override {
    if (on_device(send, count, recv, count))
      return collectives_->all_reduce(send, recv, count, type, op, stream);
    host_->all_reduce(send, recv, count, type, op, stream);
  }
  void reduce_scatter(const void* send, void* recv, std::size_t recv_count, DType type,
                      ReduceOp op, void* stream) override {
    if (on_device(send, recv_count, recv, recv_count))
      return collectives_->reduce_scatter(send, recv, recv_count, type, op, stream);
    host_->reduce_scatter(send, recv, recv_count, type, op, stream);
  }
  void reduce_scatter_v(const void* send, void* recv, const std::size_t* recv_counts, DType type,
                        ReduceOp op, void* stream) override {
    if (on_device(send, sum(recv_counts), recv, recv_counts[rank()]))
      return collectives_->reduce_scatter_v(send, recv, recv_counts, type, op, stream);
    host_->reduce_scatter_v(send, recv, recv_counts, type, op, stream);
  }
  void all_gather(const void* send, void* recv, std::size_t send_count, DType type,
                  void* stream) override {
    if (on_device(send, send_count, recv, send_count))
      return collectives_->all_gather(send, recv, send_count, type, stream);
    host_->all_gather(send, recv, send_count, type, stream);
  }
  void all_gather_v(const void* send, void* recv, const std::size_t* recv_counts, DType type,
                    void* stream) override {
    if (on_device(send, recv_counts[rank()], recv, sum(recv_counts)))
      return collectives_->all_gather_v(send, recv, recv_counts, type, stream);
    host_->all_gather_v(send, recv, recv_counts, type, stream);
  }
  void broadcast(const void* send, void* recv, std::size_t count, DType type, int root,
                 void* stream) override {
    if (on_device(send, root_only(root, count), recv, count))
      return collectives_->broadcast(send, recv, count, type, root, stream);
    host_->broadcast(send, recv, count, type, root, stream);
  }
  void reduce(const void* send, void* recv, std::size_t count, DType type, ReduceOp op, int root,
              void* stream) override {
    if (on_device(send, count, recv, root_only(root, count)))
      return collectives_->reduce(send, recv, count, type, op, root, stream);
    host_->reduce(send, recv, count, type, op, root, stream);
  }
  void send(const void* buf, std::size_t count, DType type, int peer, int tag,
            void* stream) override {
    if (on_device(buf, count, nullptr, 0)) return p2p().send(buf, count, type, peer, tag, stream);
    host_->send(buf, count, type, peer, tag, stream);
  }
  void recv(void* buf, std::size_t count, DType type, int peer, int tag, void* stream) override {
    if (on_device(buf, count, nullptr, 0)) return p2p().recv(buf, count, type, peer, tag, stream);
    host_->recv(buf, count, type, peer, tag, stream);
  }
  void barrier(void* stream) override { collectives_->barrier(stream); }

  RequestPtr iall_reduce(const void* send, void* recv, std::size_t count, DType type, ReduceOp op,
                         void* stream) override {
    if (on_device(send, count, recv, count))
      return adapt(collectives_->iall_reduce(send, recv, count, type, op, stream));
    return host_->iall_reduce(send, recv, count, type, op, stream);
  }
  RequestPtr ireduce_scatter(const void* send, void* recv, std::size_t recv_count, DType type,
                             ReduceOp op, void* stream) override {
    if (on_device(send, recv_count, recv, recv_count))
      return adapt(collectives_->ireduce_scatter(send, recv, recv_count, type, op, stream));
    return host_->ireduce_scatter(send, recv, recv_count, type, op, stream);
  }
  RequestPtr ireduce_scatter_v(const void* send, void* recv, const std::size_t* recv_counts,
                               DType type, ReduceOp op, void* stream) override {
    if (on_device(send, sum(recv_counts), recv, recv_counts[rank()]))
      return adapt(collectives_->ireduce_scatter_v(send, recv, recv_counts, type, op, stream));
    return host_->ireduce_scatter_v(send, recv, recv_counts, type, op, stream);
  }
  RequestPtr iall_gather(const void* send, void* recv, std::size_t send_count, DType type,
                         void* stream) override {
    if (on_device(send, send_count, recv, send_count))
      return adapt(collectives_->iall_gather(send, recv, send_count, type, stream));
    return host_->iall_gather(send, recv, send_count, type, stream);
  }
  RequestPtr iall_gather_v(const void* send, void* recv, const std::size_t* recv_counts,
                           DType type, void* stream) override {
    if (on_device(send, recv_counts[rank()], recv, sum(recv_counts)))
      return adapt(collectives_->iall_gather_v(send, recv, recv_counts, type, stream));
    return host_->iall_gather_v(send, recv, recv_counts, type, stream);
  }
  RequestPtr ibroadcast(const void* send, void* recv, std::size_t count, DType type, int root,
                        void* stream) override {
    if (on_device(send, root_only(root, count), recv, count))
      return adapt(collectives_->ibroadcast(send, recv, count, type, root, stream));
    return host_->ibroadcast(send, recv, count, type, root, stream);
  }
  RequestPtr isend(const void* buf, std::size_t count, DType type, int peer, int tag,
                   void* stream) override {
    if (on_device(buf, count, nullptr, 0))
      return adapt(p2p().isend(buf, count, type, peer, tag, stream));
    return host_->isend(buf, count, type, peer, tag, stream);
  }
  RequestPtr irecv(void* buf, std::size_t count, DType type, int peer, int tag,
                   void* stream) override {
    if (on_device(buf, count, nullptr, 0))
      return adapt(p2p().irecv(buf, count, type, peer, tag, stream));
    return host_->irecv(buf, count, type, peer, tag, stream);
  }

 private:
  // Where a call's buffers live. An empty side (a rooted call's unused buffer, a rank's
  // zero-length share, which may point one past its allocation) has no say; a call mixing
  // host and device buffers has no transport that could serve it.
  bool on_device(const void* a, std::size_t a_count, const void* b, std::size_t b_count) const {
    const int where_a = a && a_count ? (transports_->on_device(a) ? 1 : 0) : -1;
    const int where_b = b && b_count ? (transports_->on_device(b) ? 1 : 0) : -1;
    DTRAIN_CHECK(where_a < 0 || where_b < 0 || where_a == where_b, Errc::invalid_argument,
                 "a collective was given one host and one device buffer; both must live on the "
                 "same side");
    return where_a == 1 || where_b == 1;
  }
  // The count of a rooted call's root-only buffer (broadcast's send, reduce's recv).
  std::size_t root_only(int root, std::size_t count) const { return rank() == root ? count : 0; }
  std::size_t sum(const std::size_t* counts) const {
    std::size_t total = 0;
    for (int r = 0; r < size(); ++r) total += counts[r];
    return total;
  }
  DeviceBackend& p2p() { return staged_p2p_ ? *staged_p2p_ : *collectives_; }

  std::unique_ptr<Backend> host_;  // declared first: the transports borrow it and go first
  DeviceTransport transport_;
  std::shared_ptr<const DeviceTransports> transports_;
  std::unique_ptr<DeviceBackend> collectives_;
  std::unique_ptr<DeviceBackend> staged_p2p_;  // nccl only: tagged point-to-point over MPI
};

}  // namespace

const char* device_transport_name(DeviceTransport t) noexcept {
  switch (t) {
    case DeviceTransport::nccl: return "nccl";
    case DeviceTransport::mpi_staged: return "mpi_staged";
  }
  return "unknown";
}

void override_device_transports(std::shared_ptr<const DeviceTransports> t) {
  std::lock_guard<std::mutex> lock(override_mutex);
  overridden = std::move(t);
}

bool device_transports_overridden() {
  std::lock_guard<std::mutex> lock(override_mutex);
  return overridden != nullptr;
}

DeviceTransport choose_device_transport(Communicator& world) {
  const std::string asked = env::get_string("DTRAIN_DEVICE_COMM", "auto");
  const int code = asked == "auto" ? 0 : asked == "nccl" ? 1 : asked == "mpi_staged" ? 2 : -1;
  // nccl needs a GPU of its own on every rank: gather (usable, hash of node name and GPU
  // UUID) from all ranks; equal hashes are two ranks on one GPU (or, with odds of about
  // n^2 / 2^64, a hash collision, which only costs the faster transport).
  std::uint8_t uuid[16] = {};
  const bool usable = active_transports()->nccl_gpu(uuid);
  const std::string host = host_name();
  const std::uint64_t seat = fnv1a(uuid, sizeof uuid, fnv1a(host.c_str(), host.size() + 1));
  // One gather, also when the transport is asked for: every rank checks that all asked alike
  // (an environment not passed to every rank must fail everywhere, not hang some).
  const std::int64_t mine[3] = {code, usable ? 1 : 0, static_cast<std::int64_t>(seat)};
  std::vector<std::int64_t> all(3 * static_cast<std::size_t>(world.size()));
  world.all_gather(mine, all.data(), 3, DType::i64);
  std::vector<std::int64_t> seats;
  bool every_rank_usable = true, same_request = true;
  for (std::size_t r = 0; r < all.size(); r += 3) {
    same_request = same_request && all[r] == code;
    every_rank_usable = every_rank_usable && all[r + 1] == 1;
    seats.push_back(all[r + 2]);
  }
  DTRAIN_CHECK(code >= 0, Errc::invalid_config,
               "DTRAIN_DEVICE_COMM must be auto, nccl or mpi_staged, got '" << asked << "'");
  for (std::size_t r = 0; r < all.size(); r += 3) {  // another rank's value (rank 0 prints)
    DTRAIN_CHECK(all[r] >= 0, Errc::invalid_config,
                 "DTRAIN_DEVICE_COMM must be auto, nccl or mpi_staged; rank " << r / 3
                     << " of the job has a malformed value in its environment");
  }
  DTRAIN_CHECK(same_request, Errc::invalid_config,
               "DTRAIN_DEVICE_COMM differs between ranks (this rank: '" << asked
                   << "'); set it alike for the whole job");
  if (code == 1) {
    // Every rank knows every rank's flag: all refuse alike, instead of the ranks with a GPU
    // waiting in NCCL's set-up for one that cannot join.
    for (std::size_t r = 0; r < all.size(); r += 3) {
      DTRAIN_CHECK(all[r + 1] == 1, Errc::unavailable,
                   "DTRAIN_DEVICE_COMM=nccl, but rank " << r / 3 << " of this group has no NCCL or no GPU of its "
                   "own to use (DTRAIN_DEVICE_COMM=mpi_staged or auto moves device buffers over MPI)");
    }
    return DeviceTransport::nccl;
  }
  if (code == 2) return DeviceTransport::mpi_staged;
  std::sort(seats.begin(), seats.end());
  const bool shared = std::adjacent_find(seats.begin(), seats.end()) != seats.end();
  if (every_rank_usable && !shared) return DeviceTransport::nccl;
  if (world.rank() == 0) {
    DTRAIN_LOG(info, "device transport auto: mpi_staged, since "
                         << (every_rank_usable ? "two ranks of one node share a GPU"
                                               : "not every rank has NCCL and a GPU"));
  }
  return DeviceTransport::mpi_staged;
}

std::unique_ptr<Backend> make_device_backend(std::unique_ptr<Backend> host, DeviceTransport t) {
  DTRAIN_CHECK(host != nullptr, Errc::invalid_argument,
               "device-buffer communicator needs a host backend");
  return std::make_unique<RoutedBackend>(std::move(host), t, active_transports());
}

Communicator device_communicator(const Communicator& host, DeviceTransport t,
                                 const std::string& name) {
  DTRAIN_CHECK(host.valid(), Errc::invalid_argument,
               "device_communicator on an empty Communicator");
  watchdog::ensure_running();
  std::unique_ptr<Backend> dev;
  {  // the transport's set-up is collective too (NCCL's unique id broadcast, ncclCommInitRank)
    WatchScope watch("device_communicator", host.state()->label);
    dev = make_device_backend(host.state()->backend->dup(), t);
  }
  return Communicator(std::make_unique<CommState>(std::move(dev), name));
}

}  // namespace dtrain::comm
