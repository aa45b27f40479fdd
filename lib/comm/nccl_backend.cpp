// NCCL backend: collectives and send/recv on device buffers, on a dedicated stream. nccl.h
// also brings the CUDA runtime's streams and events, in which NCCL's API is expressed.
//
// Every call: an event recorded on the caller's stream makes the NCCL stream wait for the
// work that produced the inputs; the operation is queued on the NCCL stream; an event
// recorded after it makes the caller's stream wait for the result. Blocking calls then wait
// on the host (so the watchdog sees a blocked call) while polling ncclCommGetAsyncError,
// which turns a failed peer or network into a dtrain error instead of a hang.
#include "comm/nccl_backend.hpp"

#include <nccl.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "dtrain/core/env.hpp"
#include "dtrain/core/error.hpp"

namespace dtrain::comm {
namespace {

const void* byte_at(const void* p, std::size_t offset) {
  return static_cast<const char*>(p) + offset;
}
void* byte_at(void* p, std::size_t offset) { return static_cast<char*>(p) + offset; }
bool overlaps(const void* a, std::size_t a_bytes, const void* b, std::size_t b_bytes) {
  const char* pa = static_cast<const char*>(a);
  const char* pb = static_cast<const char*>(b);
  return a_bytes && b_bytes && pa < pb + b_bytes && pb < pa + a_bytes;
}

[[noreturn]] void fail_nccl(ncclResult_t r, const char* what, ncclComm_t comm) {
  std::string detail = ncclGetErrorString(r);
  const char* last = ncclGetLastError(comm);
  if (last && *last) detail += std::string(": ") + last;
  DTRAIN_FAIL(Errc::comm, "NCCL " << what << " failed: " << detail);
}

void check_nccl(ncclResult_t r, const char* what, ncclComm_t comm = nullptr) {
  if (r != ncclSuccess) fail_nccl(r, what, comm);
}

void check_cuda(cudaError_t e, const char* what) {
  DTRAIN_CHECK(e == cudaSuccess, Errc::comm,
               "NCCL backend: " << what << " failed: " << cudaGetErrorString(e));
}

ncclDataType_t nccl_type(DType t) {
  switch (t) {
    case DType::f32: return ncclFloat32;
    case DType::bf16: return ncclBfloat16;
    case DType::f16: return ncclFloat16;
    case DType::f64: return ncclFloat64;
    case DType::i32: return ncclInt32;
    case DType::i64: return ncclInt64;
    case DType::u8: return ncclUint8;
  }
  DTRAIN_FAIL(Errc::invalid_argument, "NCCL backend: unknown dtype " << static_cast<int>(t));
}

bool is_float(DType t) {
  return t == DType::f32 || t == DType::bf16 || t == DType::f16 || t == DType::f64;
}

ncclRedOp_t nccl_op(ReduceOp op, DType t) {
  switch (op) {
    case ReduceOp::sum: return ncclSum;
    case ReduceOp::max: return ncclMax;
    case ReduceOp::min: return ncclMin;
    case ReduceOp::avg:
      // ncclAvg divides in the element type; dtrain's integer average truncates, which
      // NCCL does not promise.
      DTRAIN_CHECK(is_float(t), Errc::not_implemented,
                   "NCCL backend: avg on integer type " << dtype_name(t));
      return ncclAvg;
  }
  DTRAIN_FAIL(Errc::invalid_argument, "NCCL backend: unknown reduce op " << static_cast<int>(op));
}

// What outlives the backend: requests keep the communicator and the event pool alive.
struct NcclShared {
  ncclComm_t comm = nullptr;
  std::atomic<bool> aborted{false};
  std::mutex mutex;
  std::vector<cudaEvent_t> events;  // free events for requests

  ~NcclShared() {
    for (cudaEvent_t e : events) (void)cudaEventDestroy(e);
    if (comm && !aborted.load()) (void)ncclCommDestroy(comm);
  }

  cudaEvent_t take_event() {
    {
      std::lock_guard<std::mutex> lock(mutex);
      if (!events.empty()) {
        cudaEvent_t e = events.back();
        events.pop_back();
        return e;
      }
    }
    cudaEvent_t e = nullptr;
    check_cuda(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate");
    return e;
  }

  void give_event(cudaEvent_t e) noexcept {
    std::lock_guard<std::mutex> lock(mutex);
    try {
      events.push_back(e);
    } catch (...) {
      (void)cudaEventDestroy(e);
    }
  }

  // An asynchronous NCCL error aborts the communicator (its operations can never finish)
  // and is thrown as Errc::comm.
  void poll_async_error() {
    DTRAIN_CHECK(!aborted.load(), Errc::comm, "NCCL communicator was aborted after an error");
    ncclResult_t async = ncclSuccess;
    check_nccl(ncclCommGetAsyncError(comm, &async), "ncclCommGetAsyncError", comm);
    if (async != ncclSuccess && async != ncclInProgress) {
      aborted.store(true);
      (void)ncclCommAbort(comm);
      DTRAIN_FAIL(Errc::comm, "NCCL asynchronous error: " << ncclGetErrorString(async));
    }
  }

  bool ready(cudaEvent_t e) {
    const cudaError_t q = cudaEventQuery(e);
    if (q == cudaSuccess) {
      // An abort makes NCCL's kernels exit, so their events complete: not a result.
      DTRAIN_CHECK(!aborted.load(), Errc::comm, "NCCL communicator was aborted after an error");
      return true;
    }
    if (q != cudaErrorNotReady) check_cuda(q, "cudaEventQuery");
    (void)cudaGetLastError();  // "not ready" is not an error: not for a later launch check
    poll_async_error();
    return false;
  }

  void wait(cudaEvent_t e) {
    while (!ready(e)) std::this_thread::yield();
  }
};

class NcclRequest final : public DeviceRequest {
 public:
  // done == null: nothing was queued (count 0), so the request is complete already.
  NcclRequest(std::shared_ptr<NcclShared> shared, cudaEvent_t done, int device)
      : shared_(std::move(shared)), done_(done), device_(device), finished_(done == nullptr) {}
  ~NcclRequest() override {
    if (done_) shared_->give_event(done_);
  }
  void wait() override {
    if (finished_) return;
    check_cuda(cudaSetDevice(device_), "cudaSetDevice");
    shared_->wait(done_);
    finished_ = true;
  }
  bool test() override {
    if (finished_) return true;
    check_cuda(cudaSetDevice(device_), "cudaSetDevice");
    finished_ = shared_->ready(done_);
    return finished_;
  }

 private:
  std::shared_ptr<NcclShared> shared_;
  cudaEvent_t done_;
  int device_;
  bool finished_;
};

class NcclBackend final : public DeviceBackend {
 public:
  NcclBackend(Backend& host, cudaStream_t compute, int device)
      : rank_(host.rank()), size_(host.size()), shared_(std::make_shared<NcclShared>()),
        compute_(compute), device_(device) {
    check_cuda(cudaSetDevice(device_), "cudaSetDevice");
    // Rank 0 sends the id with its status, so a failure there fails every rank alike
    // instead of leaving the others waiting in ncclCommInitRank.
    struct {
      ncclUniqueId id;
      int status;
    } start{};
    if (rank_ == 0) start.status = static_cast<int>(ncclGetUniqueId(&start.id));
    host.broadcast(&start, &start, sizeof start, DType::u8, 0, nullptr);
    check_nccl(static_cast<ncclResult_t>(start.status), "ncclGetUniqueId (on rank 0)");
    check_nccl(ncclCommInitRank(&shared_->comm, size_, start.id, rank_), "ncclCommInitRank");
    check_cuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
    check_cuda(cudaEventCreateWithFlags(&inputs_ready_, cudaEventDisableTiming),
               "cudaEventCreate");
    check_cuda(cudaMalloc(&barrier_word_, sizeof(float)), "cudaMalloc");
  }

  ~NcclBackend() override {
    (void)cudaSetDevice(device_);
    if (stream_) finish_pending();
    if (scratch_) (void)cudaFree(scratch_);
    for (void* p : outgrown_) (void)cudaFree(p);
    if (barrier_word_) (void)cudaFree(barrier_word_);
    if (inputs_ready_) (void)cudaEventDestroy(inputs_ready_);
    if (stream_) (void)cudaStreamDestroy(stream_);
  }

  BackendKind kind() const override { return BackendKind::nccl; }

  void all_reduce(const void* send, void* recv, std::size_t count, DType type, ReduceOp op,
                  void* stream) override {
    if (count == 0) return;
    blocking(stream, [&](cudaStream_t s) { enqueue_all_reduce(send, recv, count, type, op, s); });
  }
  void reduce_scatter(const void* send, void* recv, std::size_t recv_count, DType type,
                      ReduceOp op, void* stream) override {
    if (recv_count == 0) return;
    blocking(stream,
             [&](cudaStream_t s) { enqueue_reduce_scatter(send, recv, recv_count, type, op, s); });
  }
  void reduce_scatter_v(const void* send, void* recv, const std::size_t* recv_counts, DType type,
                        ReduceOp op, void* stream) override {
    blocking(stream, [&](cudaStream_t s) {
      enqueue_reduce_scatter_v(send, recv, recv_counts, type, op, s);
    });
  }
  void all_gather(const void* send, void* recv, std::size_t send_count, DType type,
                  void* stream) override {
    if (send_count == 0) return;
    blocking(stream, [&](cudaStream_t s) { enqueue_all_gather(send, recv, send_count, type, s); });
  }
  void all_gather_v(const void* send, void* recv, const std::size_t* recv_counts, DType type,
                    void* stream) override {
    blocking(stream,
             [&](cudaStream_t s) { enqueue_all_gather_v(send, recv, recv_counts, type, s); });
  }
  void broadcast(const void* send, void* recv, std::size_t count, DType type, int root,
                 void* stream) override {
    check_root(root);
    if (count == 0) return;
    blocking(stream, [&](cudaStream_t s) {
      check_nccl(ncclBroadcast(send, recv, count, nccl_type(type), root, comm(), s),
                 "ncclBroadcast", comm());
    });
  }
  void reduce(const void* send, void* recv, std::size_t count, DType type, ReduceOp op, int root,
              void* stream) override {
    check_root(root);
    if (count == 0) return;
    blocking(stream, [&](cudaStream_t s) {
      check_nccl(ncclReduce(send, recv, count, nccl_type(type), nccl_op(op, type), root, comm(), s),
                 "ncclReduce", comm());
    });
  }
  // NCCL has no tags: messages between two ranks match in the order they are posted.
  void send(const void* buf, std::size_t count, DType type, int peer, int, void* stream) override {
    check_root(peer);
    if (count == 0) return;
    blocking(stream, [&](cudaStream_t s) {
      check_nccl(ncclSend(buf, count, nccl_type(type), peer, comm(), s), "ncclSend", comm());
    });
  }
  void recv(void* buf, std::size_t count, DType type, int peer, int, void* stream) override {
    check_root(peer);
    if (count == 0) return;
    blocking(stream, [&](cudaStream_t s) {
      check_nccl(ncclRecv(buf, count, nccl_type(type), peer, comm(), s), "ncclRecv", comm());
    });
  }
  void barrier(void* stream) override {
    blocking(stream, [&](cudaStream_t s) {
      check_nccl(ncclAllReduce(barrier_word_, barrier_word_, 1, ncclFloat32, ncclSum, comm(), s),
                 "ncclAllReduce (barrier)", comm());
    });
  }

  DeviceRequestPtr iall_reduce(const void* send, void* recv, std::size_t count, DType type, ReduceOp op,
                         void* stream) override {
    return nonblocking(stream, count == 0, [&](cudaStream_t s) {
      enqueue_all_reduce(send, recv, count, type, op, s);
    });
  }
  DeviceRequestPtr ireduce_scatter(const void* send, void* recv, std::size_t recv_count, DType type,
                             ReduceOp op, void* stream) override {
    return nonblocking(stream, recv_count == 0, [&](cudaStream_t s) {
      enqueue_reduce_scatter(send, recv, recv_count, type, op, s);
    });
  }
  DeviceRequestPtr ireduce_scatter_v(const void* send, void* recv, const std::size_t* recv_counts,
                               DType type, ReduceOp op, void* stream) override {
    return nonblocking(stream, false, [&](cudaStream_t s) {
      enqueue_reduce_scatter_v(send, recv, recv_counts, type, op, s);
    });
  }
  DeviceRequestPtr iall_gather(const void* send, void* recv, std::size_t send_count,
                               DType type, void* stream) override {
    return nonblocking(stream, send_count == 0, [&](cudaStream_t s) {
      enqueue_all_gather(send, recv, send_count, type, s);
    });
  }
  DeviceRequestPtr iall_gather_v(const void* send, void* recv, const std::size_t* recv_counts,
                                 DType type, void* stream) override {
    return nonblocking(stream, false, [&](cudaStream_t s) {
      enqueue_all_gather_v(send, recv, recv_counts, type, s);
    });
  }
  DeviceRequestPtr ibroadcast(const void* send, void* recv, std::size_t count, DType type, int root,
                        void* stream) override {
    check_root(root);
    return nonblocking(stream, count == 0, [&](cudaStream_t s) {
      check_nccl(ncclBroadcast(send, recv, count, nccl_type(type), root, comm(), s),
                 "ncclBroadcast", comm());
    });
  }
  DeviceRequestPtr isend(const void* buf, std::size_t count, DType type, int peer, int,
                   void* stream) override {
    check_root(peer);
    return nonblocking(stream, count == 0, [&](cudaStream_t s) {
      check_nccl(ncclSend(buf, count, nccl_type(type), peer, comm(), s), "ncclSend", comm());
    });
  }
  DeviceRequestPtr irecv(void* buf, std::size_t count, DType type, int peer, int,
                   void* stream) override {
    check_root(peer);
    return nonblocking(stream, count == 0, [&](cudaStream_t s) {
      check_nccl(ncclRecv(buf, count, nccl_type(type), peer, comm(), s), "ncclRecv", comm());
    });
  }

 private:
  ncclComm_t comm() const { return shared_->comm; }
  int rank() const { return rank_; }
  int size() const { return size_; }

  void check_root(int r) const {
    DTRAIN_CHECK(r >= 0 && r < size(), Errc::invalid_argument,
                 "NCCL backend: rank " << r << " is not in a group of " << size());
  }

  cudaStream_t caller_stream(void* stream) const {
    return stream ? static_cast<cudaStream_t>(stream) : compute_;
  }

  // Waits for the operations still queued (a request may outlive its communicator) while
  // polling for asynchronous errors, which abort the communicator, and for at most
  // DTRAIN_COMM_TIMEOUT: a peer that died (NCCL may never report it) must not hang the
  // destructor. Past the limit the communicator is aborted, which ends its kernels.
  void finish_pending() noexcept {
    try {
      cudaEvent_t last = shared_->take_event();
      if (cudaEventRecord(last, stream_) == cudaSuccess) {
        const auto limit = std::chrono::duration<double>(env::params().comm_timeout_s);
        const auto deadline = std::chrono::steady_clock::now() + limit;
        try {
          while (!shared_->ready(last)) {
            if (std::chrono::steady_clock::now() > deadline) {
              shared_->aborted.store(true);
              (void)ncclCommAbort(shared_->comm);
              break;
            }
            std::this_thread::yield();
          }
        } catch (...) {  // an asynchronous error: ready() aborted the communicator
        }
      }
      shared_->give_event(last);
    } catch (...) {
    }
  }

  // Queues enqueue(nccl stream) after the work queued so far on the caller's stream (the
  // inputs); returns the completion event (the caller owns it). The caller's stream does not
  // wait for it: the host does, in wait()/test(), before the results may be used, and once
  // the event has completed, work queued afterwards sees them. So a non-blocking call
  // overlaps the compute queued after it, and calls on different communicators never
  // serialise through the compute stream.
  template <class Enqueue> cudaEvent_t ordered(void* stream, Enqueue&& enqueue) {
    shared_->poll_async_error();
    check_cuda(cudaSetDevice(device_), "cudaSetDevice");
    check_cuda(cudaEventRecord(inputs_ready_, caller_stream(stream)), "cudaEventRecord");
    check_cuda(cudaStreamWaitEvent(stream_, inputs_ready_, 0), "cudaStreamWaitEvent");
    enqueue(stream_);
    cudaEvent_t done = shared_->take_event();
    const cudaError_t rec = cudaEventRecord(done, stream_);
    if (rec != cudaSuccess) {
      shared_->give_event(done);
      check_cuda(rec, "cudaEventRecord");
    }
    return done;
  }

  template <class Enqueue> void blocking(void* stream, Enqueue&& enqueue) {
    cudaEvent_t done = ordered(stream, enqueue);
    try {
      shared_->wait(done);
    } catch (...) {
      shared_->give_event(done);
      throw;
    }
    shared_->give_event(done);
  }

  template <class Enqueue> DeviceRequestPtr nonblocking(void* stream, bool empty, Enqueue&& enqueue) {
    if (empty) return std::make_unique<NcclRequest>(shared_, nullptr, device_);
    cudaEvent_t done = ordered(stream, enqueue);
    return std::make_unique<NcclRequest>(shared_, done, device_);
  }

  // Device scratch for the in-place forms NCCL lacks; grows to powers of two, never shrinks.
  // Only the NCCL stream uses it, so its operations never overlap in it. An outgrown buffer
  // is kept until the end rather than freed: cudaFree waits for the whole device, and so for
  // other communicators' kernels, which may wait for peers that are themselves held up.
  void* scratch(std::size_t bytes) {
    if (bytes > scratch_bytes_) {
      std::size_t size = 1u << 20;
      while (size < bytes) size *= 2;
      void* grown = nullptr;
      check_cuda(cudaMalloc(&grown, size), "cudaMalloc (NCCL scratch)");
      if (scratch_) outgrown_.push_back(scratch_);  // at most the last size again, in all
      scratch_ = grown;
      scratch_bytes_ = size;
    }
    return scratch_;
  }

  void enqueue_all_reduce(const void* send, void* recv, std::size_t count, DType type,
                          ReduceOp op, cudaStream_t s) {
    check_nccl(ncclAllReduce(send, recv, count, nccl_type(type), nccl_op(op, type), comm(), s),
               "ncclAllReduce", comm());
  }

  // NCCL's in-place form is recv == send + rank*count; dtrain also allows the result at the
  // start of send (recv == send), which goes through scratch.
  void enqueue_reduce_scatter(const void* send, void* recv, std::size_t count, DType type,
                              ReduceOp op, cudaStream_t s) {
    const std::size_t bytes = count * dtype_size(type);
    const void* nccl_in_place = byte_at(send, static_cast<std::size_t>(rank()) * bytes);
    const bool via_scratch = recv != nccl_in_place &&
                             overlaps(recv, bytes, send, bytes * static_cast<std::size_t>(size()));
    void* out = via_scratch ? scratch(bytes) : recv;
    check_nccl(ncclReduceScatter(send, out, count, nccl_type(type), nccl_op(op, type), comm(), s),
               "ncclReduceScatter", comm());
    if (via_scratch) {
      check_cuda(cudaMemcpyAsync(recv, out, bytes, cudaMemcpyDeviceToDevice, s), "cudaMemcpyAsync");
    }
  }

  // Block r is reduced to rank r (one ncclReduce per block inside a group call).
  void enqueue_reduce_scatter_v(const void* send, void* recv, const std::size_t* counts,
                                DType type, ReduceOp op, cudaStream_t s) {
    const std::size_t es = dtype_size(type);
    std::size_t total = 0, mine_at = 0;
    for (int r = 0; r < size(); ++r) {
      if (r == rank()) mine_at = total;
      total += counts[r];
    }
    if (total == 0) return;
    const std::size_t mine_bytes = counts[rank()] * es;
    const bool via_scratch = recv != byte_at(send, mine_at * es) &&
                             overlaps(recv, mine_bytes, send, total * es);
    void* out = via_scratch ? scratch(mine_bytes) : recv;
    const ncclDataType_t nt = nccl_type(type);
    const ncclRedOp_t nop = nccl_op(op, type);
    check_nccl(ncclGroupStart(), "ncclGroupStart");
    std::size_t at = 0;
    for (int r = 0; r < size(); ++r) {
      if (counts[r] > 0) {
        const ncclResult_t res = ncclReduce(byte_at(send, at * es), out, counts[r], nt, nop, r, comm(), s);
        if (res != ncclSuccess) {
          (void)ncclGroupEnd();
          fail_nccl(res, "ncclReduce (reduce_scatter_v)", comm());
        }
      }
      at += counts[r];
    }
    check_nccl(ncclGroupEnd(), "ncclGroupEnd", comm());
    if (via_scratch && mine_bytes) {
      check_cuda(cudaMemcpyAsync(recv, out, mine_bytes, cudaMemcpyDeviceToDevice, s),
                 "cudaMemcpyAsync");
    }
  }

  // NCCL's in-place form is send == recv + rank*count; any other overlap (dtrain's
  // send == recv) first copies the input aside.
  void enqueue_all_gather(const void* send, void* recv, std::size_t count, DType type,
                          cudaStream_t s) {
    const std::size_t bytes = count * dtype_size(type);
    const void* slot = byte_at(recv, static_cast<std::size_t>(rank()) * bytes);
    const void* src = send;
    if (send != slot && overlaps(send, bytes, recv, bytes * static_cast<std::size_t>(size()))) {
      void* aside = scratch(bytes);
      check_cuda(cudaMemcpyAsync(aside, send, bytes, cudaMemcpyDeviceToDevice, s), "cudaMemcpyAsync");
      src = aside;
    }
    check_nccl(ncclAllGather(src, recv, count, nccl_type(type), comm(), s), "ncclAllGather", comm());
  }

  // Block r is broadcast from rank r (one ncclBroadcast per block inside a group call).
  void enqueue_all_gather_v(const void* send, void* recv, const std::size_t* counts, DType type,
                            cudaStream_t s) {
    const std::size_t es = dtype_size(type);
    std::size_t total = 0, mine_at = 0;
    for (int r = 0; r < size(); ++r) {
      if (r == rank()) mine_at = total;
      total += counts[r];
    }
    if (total == 0) return;
    const std::size_t mine_bytes = counts[rank()] * es;
    const void* slot = byte_at(recv, mine_at * es);
    const void* src = send;
    if (send != slot && overlaps(send, mine_bytes, recv, total * es)) {
      void* aside = scratch(mine_bytes);
      check_cuda(cudaMemcpyAsync(aside, send, mine_bytes, cudaMemcpyDeviceToDevice, s),
                 "cudaMemcpyAsync");
      src = aside;
    }
    const ncclDataType_t nt = nccl_type(type);
    check_nccl(ncclGroupStart(), "ncclGroupStart");
    std::size_t at = 0;
    for (int r = 0; r < size(); ++r) {
      if (counts[r] > 0) {
        const ncclResult_t res = ncclBroadcast(src, byte_at(recv, at * es), counts[r], nt, r, comm(), s);
        if (res != ncclSuccess) {
          (void)ncclGroupEnd();
          fail_nccl(res, "ncclBroadcast (all_gather_v)", comm());
        }
      }
      at += counts[r];
    }
    check_nccl(ncclGroupEnd(), "ncclGroupEnd", comm());
  }

  int rank_, size_;
  std::shared_ptr<NcclShared> shared_;
  cudaStream_t compute_;
  int device_;
  cudaStream_t stream_ = nullptr;        // the dedicated NCCL stream
  cudaEvent_t inputs_ready_ = nullptr;   // reused: recorded and waited on within one call
  void* barrier_word_ = nullptr;
  void* scratch_ = nullptr;
  std::size_t scratch_bytes_ = 0;
  std::vector<void*> outgrown_;  // earlier scratch buffers, freed with the backend
};

}  // namespace

std::unique_ptr<DeviceBackend> make_nccl_backend(Backend& host, void* compute_stream,
                                                 int device) {
  return std::make_unique<NcclBackend>(host, static_cast<cudaStream_t>(compute_stream), device);
}

}  // namespace dtrain::comm
