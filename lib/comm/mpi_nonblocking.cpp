// MPI backend: non-blocking operations and their requests.
#include <algorithm>
#include <cstring>
#include <mutex>
#include <vector>

#include "comm/mpi_backend.hpp"
#include "comm/watchdog.hpp"
#include "dtrain/core/error.hpp"

namespace dtrain::comm {
namespace {

// Freed MpiRequest objects' storage and their emptied lists, for the next operations: as many
// as were ever in flight at once, kept for the life of the process.
struct RequestPool {
  std::mutex mutex;
  std::vector<void*> storage;
  std::vector<void*> lists;
};
RequestPool& request_pool() {
  static RequestPool* pool = new RequestPool;  // never destroyed: requests may outlive statics
  return *pool;
}

}  // namespace

void* MpiRequest::operator new(std::size_t bytes) {
  RequestPool& pool = request_pool();
  {
    std::lock_guard<std::mutex> lock(pool.mutex);
    if (!pool.storage.empty()) {
      void* p = pool.storage.back();
      pool.storage.pop_back();
      return p;
    }
  }
  return ::operator new(bytes < sizeof(MpiRequest) ? sizeof(MpiRequest) : bytes);
}

void MpiRequest::operator delete(void* p) noexcept {
  if (!p) return;
  RequestPool& pool = request_pool();
  try {
    std::lock_guard<std::mutex> lock(pool.mutex);
    pool.storage.push_back(p);
  } catch (...) {  // no room in the pool's list: back to the heap
    ::operator delete(p);
  }
}

MpiRequest::Lists* MpiRequest::take_lists() {
  RequestPool& pool = request_pool();
  {
    std::lock_guard<std::mutex> lock(pool.mutex);
    if (!pool.lists.empty()) {
      Lists* lists = static_cast<Lists*>(pool.lists.back());
      pool.lists.pop_back();
      return lists;
    }
  }
  return new Lists;
}

MpiRequest::MpiRequest() : lists_(take_lists()) {}

MpiRequest::~MpiRequest() {
  // Operations posted but never finished (a post that failed part-way, a failed wait): MPI may
  // still read and write their buffers, which the caller frees next, so they are waited for,
  // errors ignored on this failure path, under the watchdog (a peer that never posts its part
  // ends the job, as in any wait). After MPI_Finalize there is nothing to wait for.
  const bool pending = std::any_of(requests.begin(), requests.end(),
                                   [](MPI_Request r) { return r != MPI_REQUEST_NULL; });
  int finalized = 0;
  if (!done_ && pending && MPI_Finalized(&finalized) == MPI_SUCCESS && !finalized) {
    WatchScope watch(*op_name ? op_name : "a failed non-blocking operation's posted parts", group);
    MPI_Waitall(static_cast<int>(requests.size()), requests.data(), MPI_STATUSES_IGNORE);
  }
  lists_->requests.clear();
  lists_->types.clear();  // frees derived types MPI no longer reads (finish() did, if it ran)
  lists_->counts.clear();
  RequestPool& pool = request_pool();
  try {
    std::lock_guard<std::mutex> lock(pool.mutex);
    pool.lists.push_back(lists_);
  } catch (...) {
    delete lists_;
  }
}

void MpiRequest::finish() {
  done_ = true;
  if (move_bytes && move_to != move_from) std::memmove(move_to, move_from, move_bytes);
  if (avg_buffer) divide_in_place(avg_buffer, avg_count, avg_type, avg_divisor);
  types.clear();
}

namespace {
// A request outliving MPI (the program finalised it, or the last Runtime ended): MPI would
// abort the job on the wait, so it is an error instead, as for a communicator.
void check_not_finalized() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  DTRAIN_CHECK(!finalized, Errc::comm,
               "waiting for a non-blocking operation after MPI_Finalize: finish it first");
}
}  // namespace

void MpiRequest::wait() {
  if (done_) return;
  check_not_finalized();
  mpi_check(MPI_Waitall(static_cast<int>(requests.size()), requests.data(), MPI_STATUSES_IGNORE),
            "MPI_Waitall");
  finish();
}

bool MpiRequest::test() {
  if (done_) return true;
  check_not_finalized();
  int flag = 0;
  mpi_check(MPI_Testall(static_cast<int>(requests.size()), requests.data(), &flag,
                        MPI_STATUSES_IGNORE),
            "MPI_Testall");
  if (flag) finish();
  return flag != 0;
}

namespace {
void divide_on_completion(MpiRequest& req, ReduceOp op, void* buf, std::size_t count, DType type,
                          int size) {
  if (op != ReduceOp::avg) return;
  req.avg_buffer = buf;
  req.avg_count = count;
  req.avg_type = type;
  req.avg_divisor = size;
}
}  // namespace

RequestPtr MpiBackend::iall_reduce(const void* send, void* recv, std::size_t count, DType type,
                                   ReduceOp op, void*) {
  auto req = std::make_unique<MpiRequest>();
  if (count == 0) return req;
  const MPI_Datatype dt = mpi_datatype(type);
  const MPI_Op mop = mpi_op(op, type);
  const std::size_t es = dtype_size(type), step = max_elements_per_call();
  const bool in_place = send == recv;
  for (std::size_t off = 0; off < count; off += step) {
    const int n = static_cast<int>(std::min(step, count - off));
    req->requests.push_back(MPI_REQUEST_NULL);  // until posted: nothing to wait for
    mpi_check(MPI_Iallreduce(in_place ? MPI_IN_PLACE : byte_at(send, off * es),
                             byte_at(recv, off * es), n, dt, mop, comm_, &req->requests.back()),
              "MPI_Iallreduce");
  }
  divide_on_completion(*req, op, recv, count, type, size_);
  return req;
}

RequestPtr MpiBackend::ireduce_scatter(const void* send, void* recv, std::size_t recv_count,
                                       DType type, ReduceOp op, void*) {
  auto req = std::make_unique<MpiRequest>();
  if (recv_count == 0) return req;
  const std::size_t block = recv_count * dtype_size(type);
  const bool in_place = overlaps(recv, block, send, block * size_);
  void* input = const_cast<void*>(send);
  // The whole input must fit too: Open MPI's libnbc adds the blocks up in an int.
  if (fits_one_call(recv_count * static_cast<std::size_t>(size_))) {
    req->requests.push_back(MPI_REQUEST_NULL);  // until posted: nothing to wait for
    mpi_check(MPI_Ireduce_scatter_block(in_place ? MPI_IN_PLACE : send, in_place ? input : recv,
                                        static_cast<int>(recv_count), mpi_datatype(type),
                                        mpi_op(op, type), comm_, &req->requests.back()),
              "MPI_Ireduce_scatter_block");
    if (in_place) req->move_from = input;
  } else {
    equal_counts_.assign(static_cast<std::size_t>(size_), recv_count);
    reduce_blocks_to_roots(send, recv, equal_counts_.data(), type, op, in_place, &req->requests);
    if (in_place) req->move_from = byte_at(send, static_cast<std::size_t>(rank_) * block);
  }
  if (in_place) {
    req->move_to = recv;
    req->move_bytes = block;
  }
  divide_on_completion(*req, op, recv, recv_count, type, size_);
  return req;
}

RequestPtr MpiBackend::ireduce_scatter_v(const void* send, void* recv,
                                         const std::size_t* recv_counts, DType type, ReduceOp op,
                                         void* stream) {
  auto req = std::make_unique<MpiRequest>();
  const std::size_t es = dtype_size(type);
  std::size_t total = 0, my_displ = 0;
  for (int r = 0; r < size_; ++r) {
    if (r == rank_) my_displ = total;
    total += recv_counts[r];
  }
  const bool fits = fits_one_call(total);  // each block and their sum, which MPI keeps in an int
  if (total == 0) return req;
  if (!fits) {  // huge blocks: the blocking path splits them; the request is complete at once
    reduce_scatter_v(send, recv, recv_counts, type, op, stream);
    return req;
  }
  const std::size_t block = recv_counts[rank_] * es;
  const bool in_place = reduce_scatter_in_place(send, recv, block, my_displ * es, total * es);
  void* input = const_cast<void*>(send);
  req->counts.assign(recv_counts, recv_counts + size_);
  req->requests.push_back(MPI_REQUEST_NULL);  // until posted: nothing to wait for
  // In place, MPI reads the whole input from recvbuf and leaves this rank's block at its start.
  mpi_check(MPI_Ireduce_scatter(in_place ? MPI_IN_PLACE : send, in_place ? input : recv,
                                req->counts.data(), mpi_datatype(type), mpi_op(op, type), comm_,
                                &req->requests.back()),
            "MPI_Ireduce_scatter");
  if (in_place) {
    req->move_from = input;
    req->move_to = recv;
    req->move_bytes = block;
  }
  divide_on_completion(*req, op, recv, recv_counts[rank_], type, size_);
  return req;
}

RequestPtr MpiBackend::iall_gather(const void* send, void* recv, std::size_t send_count,
                                   DType type, void*) {
  auto req = std::make_unique<MpiRequest>();
  if (send_count == 0) return req;
  const MPI_Datatype dt = mpi_datatype(type);
  const std::size_t block = send_count * dtype_size(type);
  char* mine = byte_at(recv, static_cast<std::size_t>(rank_) * block);
  bool in_place = send == mine;
  if (!in_place && overlaps(send, block, recv, block * size_)) {
    std::memmove(mine, send, block);
    in_place = true;
  }
  const void* src = in_place ? MPI_IN_PLACE : send;
  req->requests.push_back(MPI_REQUEST_NULL);  // until posted: nothing to wait for
  if (fits_one_call(send_count)) {
    const int n = static_cast<int>(send_count);
    mpi_check(MPI_Iallgather(src, n, dt, recv, n, dt, comm_, &req->requests.back()),
              "MPI_Iallgather");
  } else {
    req->types.emplace_back(send_count, dt);
    const MPI_Datatype whole = req->types.back().get();
    mpi_check(MPI_Iallgather(src, 1, whole, recv, 1, whole, comm_, &req->requests.back()),
              "MPI_Iallgather");
  }
  return req;
}

RequestPtr MpiBackend::iall_gather_v(const void* send, void* recv,
                                     const std::size_t* recv_counts, DType type, void* stream) {
  auto req = std::make_unique<MpiRequest>();
  const std::size_t es = dtype_size(type);
  // counts and displacements, in one array MPI reads until completion
  req->counts.resize(2 * static_cast<std::size_t>(size_));
  std::size_t total = 0;
  bool fits = true;
  for (int r = 0; r < size_; ++r) {
    fits = fits && fits_one_call(recv_counts[r]) && fits_one_call(total);
    req->counts[r] = static_cast<int>(recv_counts[r]);
    req->counts[size_ + r] = static_cast<int>(total);
    total += recv_counts[r];
  }
  if (total == 0) return req;
  if (!fits) {  // huge blocks: the blocking path splits them; the request is complete at once
    all_gather_v(send, recv, recv_counts, type, stream);
    req->counts.clear();
    return req;
  }
  place_own_block(send, byte_at(recv, static_cast<std::size_t>(req->counts[size_ + rank_]) * es),
                  recv_counts[rank_] * es);
  const MPI_Datatype dt = mpi_datatype(type);
  req->requests.push_back(MPI_REQUEST_NULL);  // until posted: nothing to wait for
  mpi_check(MPI_Iallgatherv(MPI_IN_PLACE, req->counts[rank_], dt, recv,
                            req->counts.data(), req->counts.data() + size_, dt, comm_,
                            &req->requests.back()),
            "MPI_Iallgatherv");
  return req;
}

RequestPtr MpiBackend::ibroadcast(const void* send, void* recv, std::size_t count, DType type,
                                  int root, void*) {
  check_rank(root, "broadcast root");
  auto req = std::make_unique<MpiRequest>();
  if (count == 0) return req;
  const MPI_Datatype dt = mpi_datatype(type);
  const std::size_t es = dtype_size(type), step = max_elements_per_call();
  if (rank_ == root && send != recv) std::memmove(recv, send, count * es);
  for (std::size_t off = 0; off < count; off += step) {
    const int n = static_cast<int>(std::min(step, count - off));
    req->requests.push_back(MPI_REQUEST_NULL);  // until posted: nothing to wait for
    mpi_check(MPI_Ibcast(byte_at(recv, off * es), n, dt, root, comm_, &req->requests.back()),
              "MPI_Ibcast");
  }
  return req;
}

namespace {
// Posts one point-to-point call per chunk of at most `step` elements (at least one call, so
// a zero-count message still matches its peer). post(ptr, n, request) issues the MPI call.
template <class Buf, class Post>
RequestPtr post_chunked(Buf* buf, std::size_t count, DType type, std::size_t step,
                        Post post) {
  auto req = std::make_unique<MpiRequest>();
  const std::size_t es = dtype_size(type);
  std::size_t off = 0;
  do {
    const int n = static_cast<int>(std::min(step, count - off));
    req->requests.push_back(MPI_REQUEST_NULL);  // until posted: nothing to wait for
    post(byte_at(buf, off * es), n, &req->requests.back());
    off += step;
  } while (off < count);
  return req;
}
}  // namespace

RequestPtr MpiBackend::isend(const void* buf, std::size_t count, DType type, int peer, int tag,
                             void*) {
  check_rank(peer, "send peer");
  check_tag(tag);
  const MPI_Datatype dt = mpi_datatype(type);
  return post_chunked(buf, count, type, max_elements_per_call(),
                      [&](const void* p, int n, MPI_Request* r) {
                        mpi_check(MPI_Isend(p, n, dt, peer, tag, comm_, r), "MPI_Isend");
                      });
}

RequestPtr MpiBackend::irecv(void* buf, std::size_t count, DType type, int peer, int tag, void*) {
  check_rank(peer, "recv peer");
  check_tag(tag);
  const MPI_Datatype dt = mpi_datatype(type);
  return post_chunked(buf, count, type, max_elements_per_call(),
                      [&](void* p, int n, MPI_Request* r) {
                        mpi_check(MPI_Irecv(p, n, dt, peer, tag, comm_, r), "MPI_Irecv");
                      });
}

}  // namespace dtrain::comm
