#pragma once
// The interface every transport implements (Aluminum-style): one Backend object per
// communicator, one RequestImpl per non-blocking operation. MPI implements it for host
// memory; an NCCL backend will take device buffers and enqueue on `stream` (a cudaStream_t),
// which the MPI backend ignores.
#include <cstddef>
#include <memory>
#include <vector>

#include "dtrain/comm/types.hpp"
#include "dtrain/core/dtype.hpp"

namespace dtrain::comm {

class RequestImpl {
 public:
  virtual ~RequestImpl() = default;
  virtual void wait() = 0;
  virtual bool test() = 0;  // true once complete (completion work done)
  const char* op_name = "";  // for the watchdog while waiting
  const struct GroupLabel* group = nullptr;
};

using RequestPtr = std::unique_ptr<RequestImpl>;

class Backend {
 public:
  virtual ~Backend() = default;
  virtual BackendKind kind() const = 0;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual int local_rank() const = 0;
  virtual int local_size() const = 0;
  virtual const std::vector<int>& world_ranks() const = 0;
  virtual int fortran_handle() const = 0;

  // nullptr when color < 0 (this rank is in no group).
  virtual std::unique_ptr<Backend> split(int color, int key) const = 0;
  virtual std::unique_ptr<Backend> dup() const = 0;

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

  virtual RequestPtr iall_reduce(const void* send, void* recv, std::size_t count, DType type,
                                 ReduceOp op, void* stream) = 0;
  virtual RequestPtr ireduce_scatter(const void* send, void* recv, std::size_t recv_count,
                                     DType type, ReduceOp op, void* stream) = 0;
  virtual RequestPtr ireduce_scatter_v(const void* send, void* recv,
                                       const std::size_t* recv_counts, DType type, ReduceOp op,
                                       void* stream) = 0;
  virtual RequestPtr iall_gather(const void* send, void* recv, std::size_t send_count,
                                 DType type, void* stream) = 0;
  // Default: not offered by this backend (Errc::not_implemented).
  virtual RequestPtr iall_gather_v(const void* send, void* recv, const std::size_t* recv_counts,
                                   DType type, void* stream);
  virtual RequestPtr ibroadcast(const void* send, void* recv, std::size_t count, DType type,
                                int root, void* stream) = 0;
  virtual RequestPtr isend(const void* buf, std::size_t count, DType type, int peer, int tag,
                           void* stream) = 0;
  virtual RequestPtr irecv(void* buf, std::size_t count, DType type, int peer, int tag,
                           void* stream) = 0;
};

}  // namespace dtrain::comm
