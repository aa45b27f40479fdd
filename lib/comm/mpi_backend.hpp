#pragma once
// The MPI backend: host buffers, one duplicated MPI_Comm per communicator. Blocking calls
// map one to one onto MPI's blocking collectives (no staging copies) unless a count exceeds
// what one MPI call takes.
#include <mpi.h>

#include <cstring>
#include <vector>

#include "comm/backend.hpp"
#include "comm/mpi_util.hpp"

namespace dtrain::comm {

// A non-blocking operation's MPI requests and what MPI reads until they complete. Made and
// freed for every operation, so both the object and its lists come from a process-wide pool
// (the lists keep their capacity): a training step's collectives and pipeline messages make
// no heap allocation of dtrain's.
class MpiRequest final : public RequestImpl {
  struct Lists {
    std::vector<MPI_Request> requests;
    std::vector<ContiguousType> types;
    std::vector<int> counts;
  };
  static Lists* take_lists();  // from the pool, or new
  Lists* lists_;               // before the references below, which it initialises

 public:
  MpiRequest();
  ~MpiRequest() override;
  MpiRequest(const MpiRequest&) = delete;
  MpiRequest& operator=(const MpiRequest&) = delete;
  static void* operator new(std::size_t bytes);
  static void operator delete(void* p) noexcept;

  void wait() override;
  bool test() override;

  std::vector<MPI_Request>& requests = lists_->requests;
  std::vector<ContiguousType>& types = lists_->types;  // derived types in use until completion
  std::vector<int>& counts = lists_->counts;  // count arrays MPI reads until completion (v-variants)
  // Completion work, in this order: move the result into place, then divide for avg.
  void* move_to = nullptr;
  const void* move_from = nullptr;
  std::size_t move_bytes = 0;
  void* avg_buffer = nullptr;
  std::size_t avg_count = 0;
  DType avg_type = DType::f32;
  int avg_divisor = 1;

 private:
  void finish();
  bool done_ = false;
};

class MpiBackend final : public Backend {
 public:
  explicit MpiBackend(MPI_Comm owned);  // takes ownership of the communicator
  ~MpiBackend() override;
  MpiBackend(const MpiBackend&) = delete;
  MpiBackend& operator=(const MpiBackend&) = delete;

  BackendKind kind() const override { return BackendKind::mpi; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int local_rank() const override { return local_rank_; }
  int local_size() const override { return local_size_; }
  const std::vector<int>& world_ranks() const override { return world_ranks_; }
  int fortran_handle() const override { return static_cast<int>(MPI_Comm_c2f(comm_)); }
  MPI_Comm comm() const noexcept { return comm_; }

  std::unique_ptr<Backend> split(int color, int key) const override;
  std::unique_ptr<Backend> dup() const override;

  void all_reduce(const void* send, void* recv, std::size_t count, DType type, ReduceOp op,
                  void* stream) override;
  void reduce_scatter(const void* send, void* recv, std::size_t recv_count, DType type,
                      ReduceOp op, void* stream) override;
  void reduce_scatter_v(const void* send, void* recv, const std::size_t* recv_counts, DType type,
                        ReduceOp op, void* stream) override;
  void all_gather(const void* send, void* recv, std::size_t send_count, DType type,
                  void* stream) override;
  void all_gather_v(const void* send, void* recv, const std::size_t* recv_counts, DType type,
                    void* stream) override;
  void broadcast(const void* send, void* recv, std::size_t count, DType type, int root,
                 void* stream) override;
  void reduce(const void* send, void* recv, std::size_t count, DType type, ReduceOp op,
              int root, void* stream) override;
  void send(const void* buf, std::size_t count, DType type, int peer, int tag,
            void* stream) override;
  void recv(void* buf, std::size_t count, DType type, int peer, int tag, void* stream) override;
  void barrier(void* stream) override;

  RequestPtr iall_reduce(const void* send, void* recv, std::size_t count, DType type,
                         ReduceOp op, void* stream) override;
  RequestPtr ireduce_scatter(const void* send, void* recv, std::size_t recv_count, DType type,
                             ReduceOp op, void* stream) override;
  RequestPtr ireduce_scatter_v(const void* send, void* recv, const std::size_t* recv_counts,
                               DType type, ReduceOp op, void* stream) override;
  RequestPtr iall_gather_v(const void* send, void* recv, const std::size_t* recv_counts,
                           DType type, void* stream) override;
  RequestPtr iall_gather(const void* send, void* recv, std::size_t send_count, DType type,
                         void* stream) override;
  RequestPtr ibroadcast(const void* send, void* recv, std::size_t count, DType type, int root,
                        void* stream) override;
  RequestPtr isend(const void* buf, std::size_t count, DType type, int peer, int tag,
                   void* stream) override;
  RequestPtr irecv(void* buf, std::size_t count, DType type, int peer, int tag,
                   void* stream) override;

 private:
  void check_rank(int r, const char* what) const;
  void check_tag(int tag) const;
  // Reduction of block r of `send` to root r for every r, in chunks (counts beyond INT_MAX).
  void reduce_blocks_to_roots(const void* send, void* result, const std::size_t* counts,
                              DType type, ReduceOp op, bool in_place,
                              std::vector<MPI_Request>* pending);

  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0, size_ = 0, local_rank_ = 0, local_size_ = 1;
  int tag_ub_ = 32767;  // MPI_TAG_UB: MPI promises at least this much
  std::vector<int> world_ranks_;
  std::vector<int> counts_scratch_, displs_scratch_;  // for blocking v-collectives
  std::vector<std::size_t> offsets_scratch_;           // all_gather_v's block offsets
  // An in-place root other than 0 reduces a copy of its input (MPICH's bug, reduce_step()).
  static constexpr std::size_t kReduceCopyBytes = std::size_t{4} << 20;
  std::vector<char> reduce_copy_;
  std::size_t reduce_step(int root, std::size_t element_size) const;
  const void* copy_of(const void* piece, std::size_t bytes);  // into reduce_copy_
  std::vector<std::size_t> equal_counts_;             // size_ copies of one count
};

// Address arithmetic on untyped buffers.
inline char* byte_at(void* p, std::size_t offset) { return static_cast<char*>(p) + offset; }
inline const char* byte_at(const void* p, std::size_t offset) {
  return static_cast<const char*>(p) + offset;
}
inline bool overlaps(const void* a, std::size_t a_bytes, const void* b, std::size_t b_bytes) {
  const char* pa = static_cast<const char*>(a);
  const char* pb = static_cast<const char*>(b);
  return a_bytes && b_bytes && pa < pb + b_bytes && pb < pa + a_bytes;
}

// A _v gather's own block put where it goes in recv, so that every rank calls MPI in place:
// MPI wants MPI_IN_PLACE on every rank or none, and a rank cannot see how the others called.
inline void place_own_block(const void* send, void* mine, std::size_t bytes) {
  if (send != mine && bytes > 0) std::memmove(mine, send, bytes);
}

// Whether a _v reduce-scatter runs in place: recv inside send, also for an empty block, which
// sits at its offset there as the others' blocks do (every rank must decide alike).
inline bool reduce_scatter_in_place(const void* send, const void* recv, std::size_t block,
                                    std::size_t my_offset, std::size_t total) {
  return send == recv || (block ? overlaps(recv, block, send, total)
                                : recv == static_cast<const char*>(send) + my_offset);
}

}  // namespace dtrain::comm
