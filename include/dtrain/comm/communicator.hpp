#pragma once
// Communicator: a group of ranks and the collectives over it (NCCL's argument order).
//
// Rules shared by every collective:
//  - Buffers are host memory (MPI backend). Every rank of the group must call the same
//    collective in the same order with matching counts.
//  - In-place: pass the same pointer as send and recv (for all_gather / reduce_scatter see
//    their notes). count == 0 is legal and does nothing; a null buffer this rank would
//    read or write elements of (or null counts) throws Errc::invalid_argument first.
//  - Point-to-point tags are in [0, MPI_TAG_UB] (32767 at least; no MPI_ANY_TAG): others
//    throw Errc::invalid_argument.
//  - Blocking calls return when the local buffers may be reused. Non-blocking calls
//    ("i" prefix) return a Request; the buffers must stay untouched until it completes.
//    On a GPU that includes device work: the compute stream is not made to wait for the
//    operation, so a kernel queued before wait() (or a true test()) that reads recv or
//    writes send races with it.
//  - Counts may exceed INT_MAX; the library splits or wraps them for MPI.
//  - Every call is watched: no progress for DTRAIN_COMM_TIMEOUT seconds aborts the job with
//    a message naming the operation, the group and its world ranks.
//  - Errors reported by MPI throw dtrain::Error(Errc::comm) (MPI_ERR_NO_MEM: out_of_memory).
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "dtrain/comm/types.hpp"
#include "dtrain/core/dtype.hpp"
#include "dtrain/export.hpp"

namespace dtrain {

namespace comm {
class RequestImpl;
struct CommState;
}  // namespace comm

// Completion handle of a non-blocking operation. Destroying a pending Request waits for it,
// so a buffer is never released while the library still writes into it.
class DTRAIN_API Request {
 public:
  Request() noexcept;
  explicit Request(std::unique_ptr<comm::RequestImpl> impl) noexcept;
  ~Request();
  Request(Request&& other) noexcept;
  Request& operator=(Request&& other) noexcept;
  Request(const Request&) = delete;
  Request& operator=(const Request&) = delete;

  void wait();        // blocks until complete (watched); no-op when not valid()
  bool test();        // true once complete; never blocks
  bool valid() const noexcept;  // false when empty or already completed

 private:
  std::unique_ptr<comm::RequestImpl> impl_;
};

DTRAIN_API void wait_all(std::vector<Request>& requests);

class DTRAIN_API Communicator {
 public:
  Communicator() noexcept;  // empty: valid() is false
  explicit Communicator(std::unique_ptr<comm::CommState> state) noexcept;
  ~Communicator();
  Communicator(Communicator&& other) noexcept;
  Communicator& operator=(Communicator&& other) noexcept;
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  // A communicator over a duplicate of the MPI communicator whose Fortran handle is given
  // (MPI_Comm_c2f). MPI must be initialised. See dtrain/comm/mpi_interop.hpp. Its bf16/f16
  // reductions and the watchdog need a live Runtime: use it while one exists.
  static Communicator from_fortran_comm(int fortran_comm_handle, const std::string& name);

  bool valid() const noexcept { return state_ != nullptr; }
  int rank() const noexcept { return rank_; }
  int size() const noexcept { return size_; }
  int local_rank() const noexcept;   // rank among the members on this node
  int local_size() const noexcept;   // members on this node
  const std::string& name() const;   // "world", "tp", "dp", ... (used in watchdog messages)
  const std::vector<int>& world_ranks() const;  // MPI_COMM_WORLD rank of each member
  BackendKind backend() const;
  int fortran_handle() const;        // MPI_Comm_c2f of the underlying communicator

  // Collective over this communicator. Ranks with the same color form a group, ordered by
  // key (ties by current rank). A negative color leaves this rank out: it gets an empty
  // Communicator.
  Communicator split(int color, int key, const std::string& name) const;
  Communicator dup(const std::string& name) const;

  // In-place calls: MPI wants every rank in place or none. The _v gathers are always made in
  // place (this rank's block copied into recv first); a _v reduce-scatter is in place where
  // recv lies in send, an empty block where it sits at its offset there. For the other calls
  // every rank passes in-place buffers alike or none does.

  // recv = op over ranks of send. recv may equal send (in-place).
  void all_reduce(const void* send, void* recv, std::size_t count, DType type, ReduceOp op);
  // send holds recv_count * size() elements; rank r receives block r reduced over ranks.
  // In-place: recv == send + rank*recv_count (NCCL) or recv == send (result at the start).
  void reduce_scatter(const void* send, void* recv, std::size_t recv_count, DType type,
                      ReduceOp op);
  // Like reduce_scatter with block r of recv_counts[r] elements (blocks are contiguous).
  void reduce_scatter_v(const void* send, void* recv, const std::size_t* recv_counts,
                        DType type, ReduceOp op);
  // recv holds send_count * size() elements, block r from rank r.
  // In-place: send == recv + rank*send_count (NCCL), or send == recv (moved there first).
  void all_gather(const void* send, void* recv, std::size_t send_count, DType type);
  // recv_counts[size()]; block r starts at the prefix sum of recv_counts before r.
  // In-place as all_gather, with the block offset of this rank.
  void all_gather_v(const void* send, void* recv, const std::size_t* recv_counts, DType type);
  // recv = root's send. send is read on root only; send == recv is in-place.
  void broadcast(const void* send, void* recv, std::size_t count, DType type, int root);
  // On root, recv = op over ranks of send (recv may equal send). recv is unused elsewhere.
  void reduce(const void* send, void* recv, std::size_t count, DType type, ReduceOp op,
              int root);
  void send(const void* buf, std::size_t count, DType type, int peer, int tag = 0);
  void recv(void* buf, std::size_t count, DType type, int peer, int tag = 0);
  void barrier();

  Request iall_reduce(const void* send, void* recv, std::size_t count, DType type, ReduceOp op);
  Request ireduce_scatter(const void* send, void* recv, std::size_t recv_count, DType type,
                          ReduceOp op);
  // recv_counts is copied: the caller's array may change before completion.
  Request ireduce_scatter_v(const void* send, void* recv, const std::size_t* recv_counts,
                            DType type, ReduceOp op);
  Request iall_gather(const void* send, void* recv, std::size_t send_count, DType type);
  // recv_counts is copied, as for ireduce_scatter_v; in-place as all_gather_v.
  Request iall_gather_v(const void* send, void* recv, const std::size_t* recv_counts, DType type);
  Request ibroadcast(const void* send, void* recv, std::size_t count, DType type, int root);
  Request isend(const void* buf, std::size_t count, DType type, int peer, int tag = 0);
  Request irecv(void* buf, std::size_t count, DType type, int peer, int tag = 0);

  // Payload bytes this rank put into operations on this communicator: its input of every
  // reduction and gather, the root's buffer of a broadcast, and every send.
  std::uint64_t bytes_sent() const noexcept;

  comm::CommState* state() const noexcept { return state_.get(); }  // internal

 private:
  std::unique_ptr<comm::CommState> state_;
  int rank_ = 0;
  int size_ = 0;
};

}  // namespace dtrain
