// The public Communicator: argument checks, the watchdog mark and byte accounting around
// one backend call. Nothing here touches the payload.
#include "dtrain/comm/communicator.hpp"

#include <numeric>

#include <mpi.h>

#include "comm/comm_state.hpp"
#include "comm/mpi_backend.hpp"
#include "comm/watchdog.hpp"
#include "dtrain/core/error.hpp"

namespace dtrain {

using comm::WatchScope;

Communicator::Communicator() noexcept = default;

Communicator::Communicator(std::unique_ptr<comm::CommState> state) noexcept
    : state_(std::move(state)) {
  if (state_) {
    rank_ = state_->backend->rank();
    size_ = state_->backend->size();
  }
}

Communicator::~Communicator() = default;

Communicator::Communicator(Communicator&& other) noexcept
    : state_(std::move(other.state_)), rank_(other.rank_), size_(other.size_) {
  other.rank_ = other.size_ = 0;
}

Communicator& Communicator::operator=(Communicator&& other) noexcept {
  if (this != &other) {
    state_ = std::move(other.state_);
    rank_ = other.rank_;
    size_ = other.size_;
    other.rank_ = other.size_ = 0;
  }
  return *this;
}

namespace {
comm::CommState& checked(const std::unique_ptr<comm::CommState>& state) {
  DTRAIN_CHECK(state != nullptr, Errc::invalid_argument,
               "operation on an empty Communicator (moved-from, or left out by split)");
  // A program that finalised MPI itself while dtrain's communicators live: MPI would abort.
  int finalized = 0;
  MPI_Finalized(&finalized);
  DTRAIN_CHECK(!finalized, Errc::comm, "operation on communicator '" << state->name
                                           << "' after MPI_Finalize: finalise dtrain first");
  return *state;
}

Communicator wrap(std::unique_ptr<comm::Backend> backend, const std::string& name) {
  if (!backend) return Communicator();
  comm::watchdog::ensure_running();  // lazily, once communicators exist
  return Communicator(std::make_unique<comm::CommState>(std::move(backend), name));
}

void count_bytes(comm::CommState& s, std::size_t count, DType type) {
  s.bytes_sent.fetch_add(count * dtype_size(type), std::memory_order_relaxed);
}

Request make_request(comm::RequestPtr impl, const char* op, const comm::CommState& s) {
  if (!impl) return Request();
  impl->op_name = op;
  impl->group = s.label;
  return Request(std::move(impl));
}

std::size_t sum_counts(const std::size_t* counts, int n) {
  return std::accumulate(counts, counts + n, std::size_t{0});
}

// A null buffer with elements to move would crash inside MPI (or NCCL), on some ranks only:
// refused first. `send_used` / `recv_used`: whether this rank reads / writes that buffer.
void need_buffers(const char* op, const void* send, bool send_used, const void* recv, bool recv_used) {
  DTRAIN_CHECK((send || !send_used) && (recv || !recv_used), Errc::invalid_argument,
               op << ": a null " << (send || !send_used ? "recv" : "send")
                  << " buffer with elements to move");
}
void need_counts(const std::size_t* counts, const char* op) {
  DTRAIN_CHECK(counts != nullptr, Errc::invalid_argument, op << ": null counts");
}
}  // namespace

Communicator Communicator::from_fortran_comm(int fortran_comm_handle, const std::string& name) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  DTRAIN_CHECK(initialized, Errc::invalid_config, "MPI must be initialised to wrap a user communicator");
  MPI_Comm user = comm::communicator_of_fortran_handle(fortran_comm_handle);
  MPI_Comm mine = MPI_COMM_NULL;
  comm::mpi_check(MPI_Comm_dup(user, &mine), "MPI_Comm_dup");
  return wrap(std::make_unique<comm::MpiBackend>(mine), name);
}

int Communicator::local_rank() const noexcept { return state_ ? state_->backend->local_rank() : 0; }
int Communicator::local_size() const noexcept { return state_ ? state_->backend->local_size() : 0; }
const std::string& Communicator::name() const { return checked(state_).name; }
const std::vector<int>& Communicator::world_ranks() const {
  return checked(state_).backend->world_ranks();
}
BackendKind Communicator::backend() const { return checked(state_).backend->kind(); }
int Communicator::fortran_handle() const { return checked(state_).backend->fortran_handle(); }
std::uint64_t Communicator::bytes_sent() const noexcept {
  return state_ ? state_->bytes_sent.load(std::memory_order_relaxed) : 0;
}

Communicator Communicator::split(int color, int key, const std::string& name) const {
  comm::CommState& s = checked(state_);
  WatchScope watch("split", s.label);
  return wrap(s.backend->split(color, key), name);
}

Communicator Communicator::dup(const std::string& name) const {
  comm::CommState& s = checked(state_);
  WatchScope watch("dup", s.label);
  return wrap(s.backend->dup(), name);
}

void Communicator::all_reduce(const void* send, void* recv, std::size_t count, DType type,
                              ReduceOp op) {
  comm::CommState& s = checked(state_);
  need_buffers("all_reduce", send, count > 0, recv, count > 0);
  {
    WatchScope watch("all_reduce", s.label);
    s.backend->all_reduce(send, recv, count, type, op, nullptr);
  }
  count_bytes(s, count, type);
}

void Communicator::reduce_scatter(const void* send, void* recv, std::size_t recv_count,
                                  DType type, ReduceOp op) {
  comm::CommState& s = checked(state_);
  need_buffers("reduce_scatter", send, recv_count > 0, recv, recv_count > 0);
  {
    WatchScope watch("reduce_scatter", s.label);
    s.backend->reduce_scatter(send, recv, recv_count, type, op, nullptr);
  }
  count_bytes(s, recv_count * static_cast<std::size_t>(size_), type);
}

void Communicator::reduce_scatter_v(const void* send, void* recv, const std::size_t* recv_counts,
                                    DType type, ReduceOp op) {
  comm::CommState& s = checked(state_);
  need_counts(recv_counts, "reduce_scatter_v");
  need_buffers("reduce_scatter_v", send, sum_counts(recv_counts, size_) > 0, recv, recv_counts[rank_] > 0);
  {
    WatchScope watch("reduce_scatter_v", s.label);
    s.backend->reduce_scatter_v(send, recv, recv_counts, type, op, nullptr);
  }
  count_bytes(s, sum_counts(recv_counts, size_), type);
}

void Communicator::all_gather(const void* send, void* recv, std::size_t send_count, DType type) {
  comm::CommState& s = checked(state_);
  need_buffers("all_gather", send, send_count > 0, recv, send_count > 0);
  {
    WatchScope watch("all_gather", s.label);
    s.backend->all_gather(send, recv, send_count, type, nullptr);
  }
  count_bytes(s, send_count, type);
}

void Communicator::all_gather_v(const void* send, void* recv, const std::size_t* recv_counts,
                                DType type) {
  comm::CommState& s = checked(state_);
  need_counts(recv_counts, "all_gather_v");
  need_buffers("all_gather_v", send, recv_counts[rank_] > 0, recv, sum_counts(recv_counts, size_) > 0);
  {
    WatchScope watch("all_gather_v", s.label);
    s.backend->all_gather_v(send, recv, recv_counts, type, nullptr);
  }
  count_bytes(s, recv_counts[rank_], type);
}

void Communicator::broadcast(const void* send, void* recv, std::size_t count, DType type,
                             int root) {
  comm::CommState& s = checked(state_);
  need_buffers("broadcast", send, count > 0 && rank_ == root, recv, count > 0);
  {
    WatchScope watch("broadcast", s.label);
    s.backend->broadcast(send, recv, count, type, root, nullptr);
  }
  if (rank_ == root) count_bytes(s, count, type);
}

void Communicator::reduce(const void* send, void* recv, std::size_t count, DType type,
                          ReduceOp op, int root) {
  comm::CommState& s = checked(state_);
  need_buffers("reduce", send, count > 0, recv, count > 0 && rank_ == root);
  {
    WatchScope watch("reduce", s.label);
    s.backend->reduce(send, recv, count, type, op, root, nullptr);
  }
  count_bytes(s, count, type);
}

void Communicator::send(const void* buf, std::size_t count, DType type, int peer, int tag) {
  comm::CommState& s = checked(state_);
  need_buffers("send", buf, count > 0, nullptr, false);
  {
    WatchScope watch("send", s.label);
    s.backend->send(buf, count, type, peer, tag, nullptr);
  }
  count_bytes(s, count, type);
}

void Communicator::recv(void* buf, std::size_t count, DType type, int peer, int tag) {
  comm::CommState& s = checked(state_);
  need_buffers("recv", nullptr, false, buf, count > 0);
  WatchScope watch("recv", s.label);
  s.backend->recv(buf, count, type, peer, tag, nullptr);
}

void Communicator::barrier() {
  comm::CommState& s = checked(state_);
  WatchScope watch("barrier", s.label);
  s.backend->barrier(nullptr);
}

Request Communicator::iall_reduce(const void* send, void* recv, std::size_t count, DType type,
                                  ReduceOp op) {
  comm::CommState& s = checked(state_);
  need_buffers("iall_reduce", send, count > 0, recv, count > 0);
  auto req = s.backend->iall_reduce(send, recv, count, type, op, nullptr);
  count_bytes(s, count, type);
  return make_request(std::move(req), "iall_reduce", s);
}

Request Communicator::ireduce_scatter(const void* send, void* recv, std::size_t recv_count,
                                      DType type, ReduceOp op) {
  comm::CommState& s = checked(state_);
  need_buffers("ireduce_scatter", send, recv_count > 0, recv, recv_count > 0);
  auto req = s.backend->ireduce_scatter(send, recv, recv_count, type, op, nullptr);
  count_bytes(s, recv_count * static_cast<std::size_t>(size_), type);
  return make_request(std::move(req), "ireduce_scatter", s);
}

Request Communicator::ireduce_scatter_v(const void* send, void* recv,
                                        const std::size_t* recv_counts, DType type, ReduceOp op) {
  comm::CommState& s = checked(state_);
  need_counts(recv_counts, "ireduce_scatter_v");
  need_buffers("ireduce_scatter_v", send, sum_counts(recv_counts, size_) > 0, recv, recv_counts[rank_] > 0);
  comm::RequestPtr req;
  {  // watched: blocks too large for one MPI call take the blocking path here
    WatchScope watch("ireduce_scatter_v", s.label);
    req = s.backend->ireduce_scatter_v(send, recv, recv_counts, type, op, nullptr);
  }
  std::size_t total = 0;
  for (int r = 0; r < size_; ++r) total += recv_counts[r];
  count_bytes(s, total, type);
  return make_request(std::move(req), "ireduce_scatter_v", s);
}

Request Communicator::iall_gather(const void* send, void* recv, std::size_t send_count,
                                  DType type) {
  comm::CommState& s = checked(state_);
  need_buffers("iall_gather", send, send_count > 0, recv, send_count > 0);
  auto req = s.backend->iall_gather(send, recv, send_count, type, nullptr);
  count_bytes(s, send_count, type);
  return make_request(std::move(req), "iall_gather", s);
}

namespace comm {
RequestPtr Backend::iall_gather_v(const void*, void*, const std::size_t*, DType, void*) {
  DTRAIN_FAIL(Errc::not_implemented,
              "the " << backend_name(kind()) << " backend has no non-blocking all_gather_v");
}
}  // namespace comm

Request Communicator::iall_gather_v(const void* send, void* recv,
                                    const std::size_t* recv_counts, DType type) {
  comm::CommState& s = checked(state_);
  need_counts(recv_counts, "iall_gather_v");
  need_buffers("iall_gather_v", send, recv_counts[rank_] > 0, recv, sum_counts(recv_counts, size_) > 0);
  comm::RequestPtr req;
  {  // watched: blocks too large for one MPI call take the blocking path here
    WatchScope watch("iall_gather_v", s.label);
    req = s.backend->iall_gather_v(send, recv, recv_counts, type, nullptr);
  }
  count_bytes(s, recv_counts[rank_], type);
  return make_request(std::move(req), "iall_gather_v", s);
}

Request Communicator::ibroadcast(const void* send, void* recv, std::size_t count, DType type,
                                 int root) {
  comm::CommState& s = checked(state_);
  need_buffers("ibroadcast", send, count > 0 && rank_ == root, recv, count > 0);
  auto req = s.backend->ibroadcast(send, recv, count, type, root, nullptr);
  if (rank_ == root) count_bytes(s, count, type);
  return make_request(std::move(req), "ibroadcast", s);
}

Request Communicator::isend(const void* buf, std::size_t count, DType type, int peer, int tag) {
  comm::CommState& s = checked(state_);
  need_buffers("isend", buf, count > 0, nullptr, false);
  auto req = s.backend->isend(buf, count, type, peer, tag, nullptr);
  count_bytes(s, count, type);
  return make_request(std::move(req), "isend", s);
}

Request Communicator::irecv(void* buf, std::size_t count, DType type, int peer, int tag) {
  comm::CommState& s = checked(state_);
  need_buffers("irecv", nullptr, false, buf, count > 0);
  auto req = s.backend->irecv(buf, count, type, peer, tag, nullptr);
  return make_request(std::move(req), "irecv", s);
}

}  // namespace dtrain
