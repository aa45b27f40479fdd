// The MPI-staged backend (see staged_backend.hpp). When an operation's send and recv ranges
// overlap (the in-place forms), both are staged as one span, so the host backend sees the
// same aliasing and applies the same in-place rules.
#include "device/cuda/staged_backend.hpp"

#include <algorithm>
#include <mutex>
#include <numeric>
#include <tuple>
#include <utility>
#include <vector>

#include "device/cuda/cuda_check.hpp"
#include "device/cuda/cuda_device.hpp"

namespace dtrain::cuda {
namespace {

constexpr std::size_t kPinnedRound = 1u << 20;  // pinned blocks come in whole MiB

// Pinned host blocks, reused: after the first step every operation finds a free one. Each
// block has an event recorded after the last copy out of it (the result going back to the
// device, queued without waiting): a block is handed out again only once that has landed,
// and rather than wait for one, the pool makes another (so a receive never waits for the
// compute queued before a copy-back).
class PinnedPool {
 public:
  ~PinnedPool() {
    for (const Block& b : blocks_) {
      (void)cudaEventSynchronize(b.copied_out);  // nothing may still be copying out of it
      (void)cudaEventDestroy(b.copied_out);
      (void)cudaFreeHost(b.ptr);
    }
  }

  // A free block of at least `bytes`, and its copied-out event.
  std::pair<char*, cudaEvent_t> acquire(std::size_t bytes) {
    std::lock_guard<std::mutex> lock(mutex_);
    Block* best = nullptr;
    for (Block& b : blocks_) {
      if (b.busy || b.bytes < bytes || (best && b.bytes >= best->bytes)) continue;
      const cudaError_t q = cudaEventQuery(b.copied_out);  // never recorded: success
      if (q == cudaSuccess) {
        best = &b;
      } else if (q == cudaErrorNotReady) {
        (void)cudaGetLastError();  // "not ready" is not an error: not for a later launch check
      } else {
        DTRAIN_CUDA(q);
      }
    }
    if (!best) {
      const std::size_t size = (bytes + kPinnedRound - 1) / kPinnedRound * kPinnedRound;
      void* p = nullptr;
      DTRAIN_CUDA(cudaHostAlloc(&p, size, cudaHostAllocDefault));
      cudaEvent_t e = nullptr;
      const cudaError_t made = cudaEventCreateWithFlags(&e, cudaEventDisableTiming);
      if (made != cudaSuccess) (void)cudaFreeHost(p);
      DTRAIN_CUDA(made);
      blocks_.push_back({static_cast<char*>(p), size, false, e});
      best = &blocks_.back();
    }
    best->busy = true;
    return {best->ptr, best->copied_out};
  }

  void release(char* p) noexcept {
    std::lock_guard<std::mutex> lock(mutex_);
    for (Block& b : blocks_) {
      if (b.ptr == p) b.busy = false;
    }
  }

 private:
  struct Block {
    char* ptr;
    std::size_t bytes;
    bool busy;
    cudaEvent_t copied_out;
  };
  std::mutex mutex_;
  std::vector<Block> blocks_;
};

// One operation's host copies: host views of send and recv inside a pinned block.
class Staging {
 public:
  Staging(std::shared_ptr<PinnedPool> pool, CudaDevice& dev, cudaStream_t stream)
      : pool_(std::move(pool)), dev_(&dev), stream_(stream) {}
  ~Staging() {
    if (block_) pool_->release(block_);
  }
  Staging(Staging&& o) noexcept
      : pool_(std::move(o.pool_)), dev_(o.dev_), stream_(o.stream_), block_(o.block_),
        copied_out_(o.copied_out_), send_(o.send_), recv_(o.recv_), recv_device_(o.recv_device_),
        recv_bytes_(o.recv_bytes_) {
    o.block_ = nullptr;
  }
  Staging(const Staging&) = delete;
  Staging& operator=(const Staging&) = delete;
  Staging& operator=(Staging&&) = delete;

  // Copies the inputs to the host and waits for them (only when there are any: a receive
  // must not wait for the compute queued before it). A null pointer or zero size means the
  // operation does not use that buffer on this rank.
  void in(const void* send, std::size_t send_bytes, void* recv, std::size_t recv_bytes) {
    const char* s = send_bytes ? static_cast<const char*>(send) : nullptr;
    char* r = recv_bytes ? static_cast<char*>(recv) : nullptr;
    if (s && r && overlaps(s, send_bytes, r, recv_bytes)) {
      const char* lo = std::min<const char*>(s, r);
      const char* hi = std::max<const char*>(s + send_bytes, r + recv_bytes);
      std::tie(block_, copied_out_) = pool_->acquire(static_cast<std::size_t>(hi - lo));
      DTRAIN_CUDA(cudaMemcpyAsync(block_, lo, static_cast<std::size_t>(hi - lo),
                                  cudaMemcpyDeviceToHost, stream_));
      send_ = block_ + (s - lo);
      recv_ = block_ + (r - lo);
    } else {
      const std::size_t send_part = s ? (send_bytes + 63) / 64 * 64 : 0;
      const std::size_t total = send_part + (r ? recv_bytes : 0);
      if (total) std::tie(block_, copied_out_) = pool_->acquire(total);
      if (s) {
        DTRAIN_CUDA(cudaMemcpyAsync(block_, s, send_bytes, cudaMemcpyDeviceToHost, stream_));
        send_ = block_;
      }
      if (r) recv_ = block_ + send_part;
      // An empty block of an in-place call keeps its offset in send's copy: the host call
      // decides in place by it, as the other ranks, whose blocks are not empty, do.
      const char* at = static_cast<const char*>(recv);
      if (!r && s && at >= s && at <= s + send_bytes) recv_ = block_ + (at - s);  // send_ is block_
    }
    recv_device_ = r;
    recv_bytes_ = r ? recv_bytes : 0;
    if (s) DTRAIN_CUDA(cudaStreamSynchronize(stream_));  // an overlapping span has s too
  }

  // Queues the copy of the result back to the device, without waiting: work queued after it
  // on the stream sees the result, and the pool hands the block out again only once the copy
  // has landed (its copied-out event).
  void out() {
    if (!recv_bytes_) return;
    dev_->activate();  // a request may complete on another thread
    DTRAIN_CUDA(cudaMemcpyAsync(recv_device_, recv_, recv_bytes_, cudaMemcpyHostToDevice, stream_));
    DTRAIN_CUDA(cudaEventRecord(copied_out_, stream_));
    recv_bytes_ = 0;
  }

  const void* send() const { return send_; }
  void* recv() const { return recv_; }

 private:
  std::shared_ptr<PinnedPool> pool_;
  CudaDevice* dev_;
  cudaStream_t stream_;
  char* block_ = nullptr;
  cudaEvent_t copied_out_ = nullptr;  // the block's
  const char* send_ = nullptr;
  char* recv_ = nullptr;
  void* recv_device_ = nullptr;
  std::size_t recv_bytes_ = 0;
};

class StagedRequest final : public comm::DeviceRequest {
 public:
  StagedRequest(comm::RequestPtr inner, Staging staging)
      : inner_(std::move(inner)), staging_(std::move(staging)) {}
  ~StagedRequest() override {
    if (!done_) {
      try {
        wait();
      } catch (...) {  // the core's Request reports failures; a destructor must not throw
      }
    }
  }
  void wait() override {
    if (done_) return;
    if (inner_) inner_->wait();
    staging_.out();
    done_ = true;
  }
  bool test() override {
    if (done_) return true;
    if (inner_ && !inner_->test()) return false;
    staging_.out();
    done_ = true;
    return true;
  }

 private:
  comm::RequestPtr inner_;  // the host backend's request on the staging block
  Staging staging_;
  bool done_ = false;
};

class StagedBackend final : public comm::DeviceBackend {
 public:
  StagedBackend(comm::Backend& host, CudaDevice& dev) : host_(&host), dev_(dev) {}

  BackendKind kind() const override { return BackendKind::mpi; }

  void all_reduce(const void* send, void* recv, std::size_t count, DType type, ReduceOp op,
                  void* stream) override {
    if (count == 0) return;
    const std::size_t b = count * dtype_size(type);
    Staging st = stage(stream, send, b, recv, b);
    host_->all_reduce(st.send(), st.recv(), count, type, op, nullptr);
    st.out();
  }
  void reduce_scatter(const void* send, void* recv, std::size_t recv_count, DType type,
                      ReduceOp op, void* stream) override {
    if (recv_count == 0) return;
    const std::size_t b = recv_count * dtype_size(type);
    Staging st = stage(stream, send, b * static_cast<std::size_t>(size()), recv, b);
    host_->reduce_scatter(st.send(), st.recv(), recv_count, type, op, nullptr);
    st.out();
  }
  void reduce_scatter_v(const void* send, void* recv, const std::size_t* recv_counts, DType type,
                        ReduceOp op, void* stream) override {
    const std::size_t es = dtype_size(type);
    Staging st = stage(stream, send, total(recv_counts) * es, recv, recv_counts[rank()] * es);
    host_->reduce_scatter_v(st.send(), st.recv(), recv_counts, type, op, nullptr);
    st.out();
  }
  void all_gather(const void* send, void* recv, std::size_t send_count, DType type,
                  void* stream) override {
    if (send_count == 0) return;
    const std::size_t b = send_count * dtype_size(type);
    Staging st = stage(stream, send, b, recv, b * static_cast<std::size_t>(size()));
    host_->all_gather(st.send(), st.recv(), send_count, type, nullptr);
    st.out();
  }
  void all_gather_v(const void* send, void* recv, const std::size_t* recv_counts, DType type,
                    void* stream) override {
    const std::size_t es = dtype_size(type);
    Staging st = stage(stream, send, recv_counts[rank()] * es, recv, total(recv_counts) * es);
    host_->all_gather_v(st.send(), st.recv(), recv_counts, type, nullptr);
    st.out();
  }
  void broadcast(const void* send, void* recv, std::size_t count, DType type, int root,
                 void* stream) override {
    if (count == 0) return;
    const std::size_t b = count * dtype_size(type);
    Staging st = stage(stream, send, rank() == root ? b : 0, recv, b);  // send: root only
    host_->broadcast(st.send(), st.recv(), count, type, root, nullptr);
    st.out();
  }
  void reduce(const void* send, void* recv, std::size_t count, DType type, ReduceOp op, int root,
              void* stream) override {
    if (count == 0) return;
    const std::size_t b = count * dtype_size(type);
    Staging st = stage(stream, send, b, recv, rank() == root ? b : 0);  // recv: root only
    host_->reduce(st.send(), st.recv(), count, type, op, root, nullptr);
    st.out();
  }
  void send(const void* buf, std::size_t count, DType type, int peer, int tag,
            void* stream) override {
    Staging st = stage(stream, buf, count * dtype_size(type), nullptr, 0);
    host_->send(st.send(), count, type, peer, tag, nullptr);
  }
  void recv(void* buf, std::size_t count, DType type, int peer, int tag, void* stream) override {
    Staging st = stage(stream, nullptr, 0, buf, count * dtype_size(type));
    host_->recv(st.recv(), count, type, peer, tag, nullptr);
    st.out();
  }
  void barrier(void* stream) override {
    dev_.activate();
    DTRAIN_CUDA(cudaStreamSynchronize(pick(stream)));
    host_->barrier(nullptr);
  }

  comm::DeviceRequestPtr iall_reduce(const void* send, void* recv, std::size_t count, DType type,
                               ReduceOp op, void* stream) override {
    const std::size_t b = count * dtype_size(type);
    Staging st = stage(stream, send, b, recv, b);
    auto inner = host_->iall_reduce(st.send(), st.recv(), count, type, op, nullptr);
    return std::make_unique<StagedRequest>(std::move(inner), std::move(st));
  }
  comm::DeviceRequestPtr ireduce_scatter(const void* send, void* recv, std::size_t recv_count,
                                   DType type, ReduceOp op, void* stream) override {
    const std::size_t b = recv_count * dtype_size(type);
    Staging st = stage(stream, send, b * static_cast<std::size_t>(size()), recv, b);
    auto inner = host_->ireduce_scatter(st.send(), st.recv(), recv_count, type, op, nullptr);
    return std::make_unique<StagedRequest>(std::move(inner), std::move(st));
  }
  comm::DeviceRequestPtr ireduce_scatter_v(const void* send, void* recv,
                                     const std::size_t* recv_counts, DType type, ReduceOp op,
                                     void* stream) override {
    const std::size_t es = dtype_size(type);
    Staging st = stage(stream, send, total(recv_counts) * es, recv, recv_counts[rank()] * es);
    auto inner = host_->ireduce_scatter_v(st.send(), st.recv(), recv_counts, type, op, nullptr);
    return std::make_unique<StagedRequest>(std::move(inner), std::move(st));
  }
  comm::DeviceRequestPtr iall_gather(const void* send, void* recv, std::size_t send_count,
                                     DType type, void* stream) override {
    const std::size_t b = send_count * dtype_size(type);
    Staging st = stage(stream, send, b, recv, b * static_cast<std::size_t>(size()));
    auto inner = host_->iall_gather(st.send(), st.recv(), send_count, type, nullptr);
    return std::make_unique<StagedRequest>(std::move(inner), std::move(st));
  }
  comm::DeviceRequestPtr iall_gather_v(const void* send, void* recv,
                                       const std::size_t* recv_counts, DType type,
                                       void* stream) override {
    const std::size_t es = dtype_size(type);
    Staging st = stage(stream, send, recv_counts[rank()] * es, recv, total(recv_counts) * es);
    auto inner = host_->iall_gather_v(st.send(), st.recv(), recv_counts, type, nullptr);
    return std::make_unique<StagedRequest>(std::move(inner), std::move(st));
  }
  comm::DeviceRequestPtr ibroadcast(const void* send, void* recv, std::size_t count, DType type,
                              int root, void* stream) override {
    const std::size_t b = count * dtype_size(type);
    Staging st = stage(stream, send, rank() == root ? b : 0, recv, b);
    auto inner = host_->ibroadcast(st.send(), st.recv(), count, type, root, nullptr);
    return std::make_unique<StagedRequest>(std::move(inner), std::move(st));
  }
  comm::DeviceRequestPtr isend(const void* buf, std::size_t count, DType type, int peer, int tag,
                         void* stream) override {
    Staging st = stage(stream, buf, count * dtype_size(type), nullptr, 0);
    auto inner = host_->isend(st.send(), count, type, peer, tag, nullptr);
    return std::make_unique<StagedRequest>(std::move(inner), std::move(st));
  }
  comm::DeviceRequestPtr irecv(void* buf, std::size_t count, DType type, int peer, int tag,
                         void* stream) override {
    Staging st = stage(stream, nullptr, 0, buf, count * dtype_size(type));
    auto inner = host_->irecv(st.recv(), count, type, peer, tag, nullptr);
    return std::make_unique<StagedRequest>(std::move(inner), std::move(st));
  }

 private:
  int rank() const { return host_->rank(); }
  int size() const { return host_->size(); }
  cudaStream_t pick(void* stream) const {
    return stream ? static_cast<cudaStream_t>(stream) : dev_.stream();
  }
  Staging stage(void* stream, const void* send, std::size_t send_bytes, void* recv,
                std::size_t recv_bytes) {
    dev_.activate();
    Staging st(pool_, dev_, pick(stream));
    st.in(send, send_bytes, recv, recv_bytes);
    return st;
  }
  std::size_t total(const std::size_t* counts) const {
    return std::accumulate(counts, counts + size(), std::size_t{0});
  }

  comm::Backend* host_;  // borrowed: the core-side adapter owns it and outlives this
  CudaDevice& dev_;
  std::shared_ptr<PinnedPool> pool_ = std::make_shared<PinnedPool>();
};

}  // namespace

std::unique_ptr<comm::DeviceBackend> make_staged_backend(comm::Backend& host, CudaDevice& dev) {
  return std::make_unique<StagedBackend>(host, dev);
}

}  // namespace dtrain::cuda
