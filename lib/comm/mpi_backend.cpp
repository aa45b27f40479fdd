// MPI backend: construction and the blocking operations.
#include "comm/mpi_backend.hpp"

#include <algorithm>
#include <cstring>
#include <numeric>

#include "dtrain/core/error.hpp"

namespace dtrain::comm {

MpiBackend::MpiBackend(MPI_Comm owned) : comm_(owned) {
  // Errors come back as codes and become dtrain::Error instead of aborting the job.
  mpi_check(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
  mpi_check(MPI_Comm_rank(comm_, &rank_), "MPI_Comm_rank");
  mpi_check(MPI_Comm_size(comm_, &size_), "MPI_Comm_size");

  MPI_Comm node = MPI_COMM_NULL;
  mpi_check(MPI_Comm_split_type(comm_, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node),
            "MPI_Comm_split_type");
  MPI_Comm_rank(node, &local_rank_);
  MPI_Comm_size(node, &local_size_);
  MPI_Comm_free(&node);

  MPI_Group mine = MPI_GROUP_NULL, world = MPI_GROUP_NULL;
  MPI_Comm_group(comm_, &mine);
  MPI_Comm_group(MPI_COMM_WORLD, &world);
  std::vector<int> ranks(static_cast<std::size_t>(size_));
  std::iota(ranks.begin(), ranks.end(), 0);
  world_ranks_.resize(ranks.size());
  mpi_check(MPI_Group_translate_ranks(mine, size_, ranks.data(), world, world_ranks_.data()),
            "MPI_Group_translate_ranks");
  MPI_Group_free(&mine);
  MPI_Group_free(&world);

  int* tag_ub = nullptr;
  int found = 0;
  mpi_check(MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &tag_ub, &found), "MPI_Comm_get_attr");
  if (found && tag_ub) tag_ub_ = *tag_ub;
}

MpiBackend::~MpiBackend() {
  int finalized = 0;
  MPI_Finalized(&finalized);  // a communicator may outlive the Runtime; then MPI freed it
  if (comm_ != MPI_COMM_NULL && !finalized) MPI_Comm_free(&comm_);
}

std::unique_ptr<Backend> MpiBackend::split(int color, int key) const {
  MPI_Comm out = MPI_COMM_NULL;
  mpi_check(MPI_Comm_split(comm_, color < 0 ? MPI_UNDEFINED : color, key, &out), "MPI_Comm_split");
  if (out == MPI_COMM_NULL) return nullptr;
  return std::make_unique<MpiBackend>(out);
}

std::unique_ptr<Backend> MpiBackend::dup() const {
  MPI_Comm out = MPI_COMM_NULL;
  mpi_check(MPI_Comm_dup(comm_, &out), "MPI_Comm_dup");
  return std::make_unique<MpiBackend>(out);
}

void MpiBackend::check_rank(int r, const char* what) const {
  DTRAIN_CHECK(r >= 0 && r < size_, Errc::invalid_argument,
               what << " " << r << " is not a rank of a group of " << size_);
}

// Tags are dtrain's own counters (a parameter unit's index, a pipeline chunk's): the largest
// tag an MPI takes varies (MPI_TAG_UB, 32767 at least), so say which limit was passed.
void MpiBackend::check_tag(int tag) const {
  DTRAIN_CHECK(tag >= 0 && tag <= tag_ub_, Errc::invalid_argument,
               "message tag " << tag << " is outside this MPI's range [0, " << tag_ub_
                              << "] (MPI_TAG_UB)");
}

void MpiBackend::all_reduce(const void* send, void* recv, std::size_t count, DType type,
                            ReduceOp op, void*) {
  if (count == 0) return;
  const MPI_Datatype dt = mpi_datatype(type);
  const MPI_Op mop = mpi_op(op, type);
  const std::size_t es = dtype_size(type), step = max_elements_per_call();
  const bool in_place = send == recv;
  for (std::size_t off = 0; off < count; off += step) {
    const int n = static_cast<int>(std::min(step, count - off));
    const void* src = in_place ? MPI_IN_PLACE : byte_at(send, off * es);
    mpi_check(MPI_Allreduce(src, byte_at(recv, off * es), n, dt, mop, comm_), "MPI_Allreduce");
  }
  if (op == ReduceOp::avg) divide_in_place(recv, count, type, size_);
}

// MPICH 4.0-4.1.1 (and perhaps later) crash in MPI_Reduce with MPI_IN_PLACE at a root other
// than 0 past 2 KiB (its issue 6540; Debian 12 ships 4.0.2): there the root reduces a copy
// of its input instead, piece by piece, so the copy stays small. Every rank of a reduce to
// `root` splits it into pieces of this many elements.
std::size_t MpiBackend::reduce_step(int root, std::size_t element_size) const {
  return root != 0 ? std::min(max_elements_per_call(), kReduceCopyBytes / element_size)
                   : max_elements_per_call();
}

const void* MpiBackend::copy_of(const void* piece, std::size_t bytes) {
  if (reduce_copy_.size() < bytes) reduce_copy_.resize(bytes);  // at most kReduceCopyBytes
  std::memcpy(reduce_copy_.data(), piece, bytes);
  return reduce_copy_.data();
}

void MpiBackend::reduce(const void* send, void* recv, std::size_t count, DType type, ReduceOp op,
                        int root, void*) {
  check_rank(root, "reduce root");
  if (count == 0) return;
  const MPI_Datatype dt = mpi_datatype(type);
  const MPI_Op mop = mpi_op(op, type);
  const std::size_t es = dtype_size(type);
  const bool is_root = rank_ == root;
  const bool in_place = is_root && send == recv;
  const bool copy_input = in_place && root != 0;
  const std::size_t step = reduce_step(root, es);
  for (std::size_t off = 0; off < count; off += step) {
    const int n = static_cast<int>(std::min(step, count - off));
    const void* src = copy_input ? copy_of(byte_at(recv, off * es), n * es)
                      : in_place ? MPI_IN_PLACE
                                 : byte_at(send, off * es);
    void* dst = is_root ? byte_at(recv, off * es) : nullptr;
    mpi_check(MPI_Reduce(src, dst, n, dt, mop, root, comm_), "MPI_Reduce");
  }
  if (is_root && op == ReduceOp::avg) divide_in_place(recv, count, type, size_);
}

void MpiBackend::broadcast(const void* send, void* recv, std::size_t count, DType type, int root,
                           void*) {
  check_rank(root, "broadcast root");
  if (count == 0) return;
  const MPI_Datatype dt = mpi_datatype(type);
  const std::size_t es = dtype_size(type), step = max_elements_per_call();
  if (rank_ == root && send != recv) std::memmove(recv, send, count * es);
  for (std::size_t off = 0; off < count; off += step) {
    const int n = static_cast<int>(std::min(step, count - off));
    mpi_check(MPI_Bcast(byte_at(recv, off * es), n, dt, root, comm_), "MPI_Bcast");
  }
}

void MpiBackend::all_gather(const void* send, void* recv, std::size_t send_count, DType type,
                            void*) {
  if (send_count == 0) return;
  const MPI_Datatype dt = mpi_datatype(type);
  const std::size_t block = send_count * dtype_size(type);
  char* mine = byte_at(recv, static_cast<std::size_t>(rank_) * block);
  bool in_place = send == mine;
  if (!in_place && overlaps(send, block, recv, block * size_)) {
    std::memmove(mine, send, block);  // e.g. send == recv: put this rank's block in its slot
    in_place = true;
  }
  const void* src = in_place ? MPI_IN_PLACE : send;
  if (fits_one_call(send_count)) {
    const int n = static_cast<int>(send_count);
    mpi_check(MPI_Allgather(src, n, dt, recv, n, dt, comm_), "MPI_Allgather");
  } else {
    ContiguousType whole(send_count, dt);
    mpi_check(MPI_Allgather(src, 1, whole.get(), recv, 1, whole.get(), comm_), "MPI_Allgather");
  }
}

void MpiBackend::all_gather_v(const void* send, void* recv, const std::size_t* recv_counts,
                              DType type, void*) {
  const MPI_Datatype dt = mpi_datatype(type);
  const std::size_t es = dtype_size(type);
  std::vector<std::size_t>& displs = offsets_scratch_;
  displs.resize(static_cast<std::size_t>(size_));
  std::size_t total = 0;
  bool fits = true;
  for (int r = 0; r < size_; ++r) {
    displs[r] = total;
    total += recv_counts[r];
    fits = fits && fits_one_call(recv_counts[r]) && fits_one_call(displs[r]);
  }
  if (total == 0) return;
  place_own_block(send, byte_at(recv, displs[rank_] * es), recv_counts[rank_] * es);
  if (fits) {
    counts_scratch_.resize(displs.size());
    displs_scratch_.resize(displs.size());
    for (int r = 0; r < size_; ++r) {
      counts_scratch_[r] = static_cast<int>(recv_counts[r]);
      displs_scratch_[r] = static_cast<int>(displs[r]);
    }
    mpi_check(MPI_Allgatherv(MPI_IN_PLACE, counts_scratch_[rank_], dt, recv,
                             counts_scratch_.data(), displs_scratch_.data(), dt, comm_),
              "MPI_Allgatherv");
    return;
  }
  // Some block or offset exceeds one MPI call: each rank broadcasts its block in chunks.
  for (int r = 0; r < size_; ++r) {
    void* block_r = byte_at(recv, displs[r] * es);
    broadcast(block_r, block_r, recv_counts[r], type, r, nullptr);
  }
}

void MpiBackend::reduce_blocks_to_roots(const void* send, void* result, const std::size_t* counts,
                                        DType type, ReduceOp op, bool in_place,
                                        std::vector<MPI_Request>* pending) {
  const MPI_Datatype dt = mpi_datatype(type);
  const MPI_Op mop = mpi_op(op, type);
  const std::size_t es = dtype_size(type);
  std::size_t displ = 0;
  for (int r = 0; r < size_; ++r) {
    // As reduce(): blocking, an in-place root other than 0 reduces a copy of its input (the
    // non-blocking calls cannot share one copy; they keep MPI_IN_PLACE).
    const bool copy_input = !pending && in_place && r == rank_ && r != 0;
    const std::size_t step = pending ? max_elements_per_call() : reduce_step(r, es);
    for (std::size_t off = 0; off < counts[r]; off += step) {
      const int n = static_cast<int>(std::min(step, counts[r] - off));
      const char* block = byte_at(send, (displ + off) * es);
      const bool me = r == rank_;
      const void* src = copy_input ? copy_of(block, n * es) : me && in_place ? MPI_IN_PLACE : block;
      void* dst = !me ? nullptr : in_place ? const_cast<char*>(block) : byte_at(result, off * es);
      if (pending) {
        pending->push_back(MPI_REQUEST_NULL);  // until posted: nothing to wait for
        mpi_check(MPI_Ireduce(src, dst, n, dt, mop, r, comm_, &pending->back()), "MPI_Ireduce");
      } else {
        mpi_check(MPI_Reduce(src, dst, n, dt, mop, r, comm_), "MPI_Reduce");
      }
    }
    displ += counts[r];
  }
}

void MpiBackend::reduce_scatter(const void* send, void* recv, std::size_t recv_count, DType type,
                                ReduceOp op, void*) {
  if (recv_count == 0) return;
  const std::size_t block = recv_count * dtype_size(type);
  const bool in_place = overlaps(recv, block, send, block * size_);
  void* input = const_cast<void*>(send);  // in-place: the caller's buffer is writable
  const void* result = recv;
  // The whole input must fit too: MPI libraries add the blocks up in an int.
  if (fits_one_call(recv_count * static_cast<std::size_t>(size_))) {
    // In place, MPI reads the whole input from recvbuf and leaves the result at its start.
    mpi_check(MPI_Reduce_scatter_block(in_place ? MPI_IN_PLACE : send, in_place ? input : recv,
                                       static_cast<int>(recv_count), mpi_datatype(type),
                                       mpi_op(op, type), comm_),
              "MPI_Reduce_scatter_block");
    if (in_place) result = input;
  } else {
    equal_counts_.assign(static_cast<std::size_t>(size_), recv_count);
    reduce_blocks_to_roots(send, recv, equal_counts_.data(), type, op, in_place, nullptr);
    if (in_place) result = byte_at(send, static_cast<std::size_t>(rank_) * block);
  }
  if (result != recv) std::memmove(recv, result, block);
  if (op == ReduceOp::avg) divide_in_place(recv, recv_count, type, size_);
}

void MpiBackend::reduce_scatter_v(const void* send, void* recv, const std::size_t* recv_counts,
                                  DType type, ReduceOp op, void*) {
  const std::size_t es = dtype_size(type);
  std::size_t total = 0, my_displ = 0;
  for (int r = 0; r < size_; ++r) {
    if (r == rank_) my_displ = total;
    total += recv_counts[r];
  }
  const bool fits = fits_one_call(total);  // each block and their sum, which MPI keeps in an int
  if (total == 0) return;
  const std::size_t block = recv_counts[rank_] * es;
  const bool in_place = reduce_scatter_in_place(send, recv, block, my_displ * es, total * es);
  void* input = const_cast<void*>(send);
  const void* result = recv;
  if (fits) {
    counts_scratch_.resize(static_cast<std::size_t>(size_));
    for (int r = 0; r < size_; ++r) counts_scratch_[r] = static_cast<int>(recv_counts[r]);
    mpi_check(MPI_Reduce_scatter(in_place ? MPI_IN_PLACE : send, in_place ? input : recv,
                                 counts_scratch_.data(), mpi_datatype(type), mpi_op(op, type),
                                 comm_),
              "MPI_Reduce_scatter");
    if (in_place) result = input;
  } else {
    reduce_blocks_to_roots(send, recv, recv_counts, type, op, in_place, nullptr);
    if (in_place) result = byte_at(send, my_displ * es);
  }
  if (result != recv && block) std::memmove(recv, result, block);
  if (op == ReduceOp::avg) divide_in_place(recv, recv_counts[rank_], type, size_);
}

void MpiBackend::send(const void* buf, std::size_t count, DType type, int peer, int tag, void*) {
  check_rank(peer, "send peer");
  check_tag(tag);
  const MPI_Datatype dt = mpi_datatype(type);
  const std::size_t es = dtype_size(type), step = max_elements_per_call();
  std::size_t off = 0;
  do {  // a zero-count message still travels, so the receiver's matching recv completes
    const int n = static_cast<int>(std::min(step, count - off));
    mpi_check(MPI_Send(byte_at(buf, off * es), n, dt, peer, tag, comm_), "MPI_Send");
    off += step;
  } while (off < count);
}

void MpiBackend::recv(void* buf, std::size_t count, DType type, int peer, int tag, void*) {
  check_rank(peer, "recv peer");
  check_tag(tag);
  const MPI_Datatype dt = mpi_datatype(type);
  const std::size_t es = dtype_size(type), step = max_elements_per_call();
  std::size_t off = 0;
  do {
    const int n = static_cast<int>(std::min(step, count - off));
    mpi_check(MPI_Recv(byte_at(buf, off * es), n, dt, peer, tag, comm_, MPI_STATUS_IGNORE),
              "MPI_Recv");
    off += step;
  } while (off < count);
}

void MpiBackend::barrier(void*) { mpi_check(MPI_Barrier(comm_), "MPI_Barrier"); }

}  // namespace dtrain::comm
