// Finding the device-buffer transports in the CUDA plugin (see nccl_loader.hpp), opened
// once per process for lib/device and this file alike (core/cuda_plugin_handle.hpp).
#include "comm/nccl_loader.hpp"

#include "comm/comm_state.hpp"
#include "comm/watchdog.hpp"
#include "core/cuda_plugin_handle.hpp"
#include "dtrain/core/env.hpp"
#include "dtrain/core/error.hpp"

namespace dtrain::comm {
namespace {

struct CommPlugin {
  dtrain_cuda_make_comm_backend_fn make = nullptr;
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
  if (!abi || !make) {
    p.reason = std::string(kCudaPluginName) + " has no device-buffer communication entry points";
    return p;
  }
  if (abi() != kCommPluginAbi) {
    p.reason = std::string(kCudaPluginName) + " has communication ABI " + std::to_string(abi()) +
               ", this library needs " + std::to_string(kCommPluginAbi);
    return p;
  }
  p.make = make;
  return p;
}

const CommPlugin& plugin() {
  static const CommPlugin p = load_plugin();  // looked up once per process
  return p;
}

}  // namespace

const char* device_transport_name(DeviceTransport t) noexcept {
  switch (t) {
    case DeviceTransport::nccl: return "nccl";
    case DeviceTransport::mpi_staged: return "mpi_staged";
  }
  return "unknown";
}

namespace {

class RequestAdapter final : public RequestImpl {
 public:
  explicit RequestAdapter(DeviceRequestPtr impl) : impl_(std::move(impl)) {}
  void wait() override { impl_->wait(); }
  bool test() override { return impl_->test(); }

 private:
  DeviceRequestPtr impl_;
};

RequestPtr adapt(DeviceRequestPtr r) { return std::make_unique<RequestAdapter>(std::move(r)); }

// A Backend whose membership comes from the host backend and whose data moves through the
// plugin's DeviceBackend.
class DeviceBackendAdapter final : public Backend {
 public:
  DeviceBackendAdapter(std::unique_ptr<Backend> host, DeviceTransport t)
      : host_(std::move(host)), transport_(t), impl_(create(*host_, t)) {}

  BackendKind kind() const override { return impl_->kind(); }
  int rank() const override { return host_->rank(); }
  int size() const override { return host_->size(); }
  int local_rank() const override { return host_->local_rank(); }
  int local_size() const override { return host_->local_size(); }
  const std::vector<int>& world_ranks() const override { return host_->world_ranks(); }
  int fortran_handle() const override { return host_->fortran_handle(); }

  std::unique_ptr<Backend> split(int color, int key) const override {
    std::unique_ptr<Backend> sub = host_->split(color, key);
    if (!sub) return nullptr;
    return std::make_unique<DeviceBackendAdapter>(std::move(sub), transport_);
  }
  std::unique_ptr<Backend> dup() const override {
    return std::make_unique<DeviceBackendAdapter>(host_->dup(), transport_);
  }

  void all_reduce(const void* send, void* recv, std::size_t count, DType type, ReduceOp op,
                  void* stream) override {
    impl_->all_reduce(send, recv, count, type, op, stream);
  }
  void reduce_scatter(const void* send, void* recv, std::size_t recv_count, DType type,
                      ReduceOp op, void* stream) override {
    impl_->reduce_scatter(send, recv, recv_count, type, op, stream);
  }
  void reduce_scatter_v(const void* send, void* recv, const std::size_t* recv_counts, DType type,
                        ReduceOp op, void* stream) override {
    impl_->reduce_scatter_v(send, recv, recv_counts, type, op, stream);
  }
  void all_gather(const void* send, void* recv, std::size_t send_count, DType type,
                  void* stream) override {
    impl_->all_gather(send, recv, send_count, type, stream);
  }
  void all_gather_v(const void* send, void* recv, const std::size_t* recv_counts, DType type,
                    void* stream) override {
    impl_->all_gather_v(send, recv, recv_counts, type, stream);
  }
  void broadcast(const void* send, void* recv, std::size_t count, DType type, int root,
                 void* stream) override {
    impl_->broadcast(send, recv, count, type, root, stream);
  }
  void reduce(const void* send, void* recv, std::size_t count, DType type, ReduceOp op, int root,
              void* stream) override {
    impl_->reduce(send, recv, count, type, op, root, stream);
  }
  void send(const void* buf, std::size_t count, DType type, int peer, int tag,
            void* stream) override {
    impl_->send(buf, count, type, peer, tag, stream);
  }
  void recv(void* buf, std::size_t count, DType type, int peer, int tag, void* stream) override {
    impl_->recv(buf, count, type, peer, tag, stream);
  }
  void barrier(void* stream) override { impl_->barrier(stream); }

  RequestPtr iall_reduce(const void* send, void* recv, std::size_t count, DType type, ReduceOp op,
                         void* stream) override {
    return adapt(impl_->iall_reduce(send, recv, count, type, op, stream));
  }
  RequestPtr ireduce_scatter(const void* send, void* recv, std::size_t recv_count, DType type,
                             ReduceOp op, void* stream) override {
    return adapt(impl_->ireduce_scatter(send, recv, recv_count, type, op, stream));
  }
  RequestPtr ireduce_scatter_v(const void* send, void* recv, const std::size_t* recv_counts,
                               DType type, ReduceOp op, void* stream) override {
    return adapt(impl_->ireduce_scatter_v(send, recv, recv_counts, type, op, stream));
  }
  RequestPtr iall_gather(const void* send, void* recv, std::size_t send_count, DType type,
                         void* stream) override {
    return adapt(impl_->iall_gather(send, recv, send_count, type, stream));
  }
  RequestPtr iall_gather_v(const void* send, void* recv, const std::size_t* recv_counts,
                           DType type, void* stream) override {
    return adapt(impl_->iall_gather_v(send, recv, recv_counts, type, stream));
  }
  RequestPtr ibroadcast(const void* send, void* recv, std::size_t count, DType type, int root,
                        void* stream) override {
    return adapt(impl_->ibroadcast(send, recv, count, type, root, stream));
  }
  RequestPtr isend(const void* buf, std::size_t count, DType type, int peer, int tag,
                   void* stream) override {
    return adapt(impl_->isend(buf, count, type, peer, tag, stream));
  }
  RequestPtr irecv(void* buf, std::size_t count, DType type, int peer, int tag,
                   void* stream) override {
    return adapt(impl_->irecv(buf, count, type, peer, tag, stream));
  }

 private:
  static std::unique_ptr<DeviceBackend> create(Backend& host, DeviceTransport t) {
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

  std::unique_ptr<Backend> host_;  // declared first: impl_ borrows it and goes first
  DeviceTransport transport_;
  std::unique_ptr<DeviceBackend> impl_;
};

}  // namespace

std::unique_ptr<Backend> make_device_backend(std::unique_ptr<Backend> host, DeviceTransport t) {
  DTRAIN_CHECK(host != nullptr, Errc::invalid_argument,
               "device-buffer communicator needs a host backend");
  return std::make_unique<DeviceBackendAdapter>(std::move(host), t);
}

Communicator device_communicator(const Communicator& host, DeviceTransport t,
                                 const std::string& name) {
  DTRAIN_CHECK(host.valid(), Errc::invalid_argument,
               "device_communicator on an empty Communicator");
  std::unique_ptr<Backend> copy;
  {
    WatchScope watch("dup", host.state()->label);
    copy = host.state()->backend->dup();
  }
  std::unique_ptr<Backend> dev = make_device_backend(std::move(copy), t);
  watchdog::ensure_running();
  return Communicator(std::make_unique<CommState>(std::move(dev), name));
}

}  // namespace dtrain::comm
