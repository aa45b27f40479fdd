// The emulated NCCL (see include/nccl.h here). Collectives are simple and exact: the
// contributions travel to one rank, which combines them in rank order and sends the result
// back. Point-to-point calls are posted non-blocking and waited for at the end of their
// group (a lone call is a group of one), so a group may pair a send and a receive in either
// order, as in NCCL.
#include <mpi.h>

#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "device/half_bits.hpp"
#include "nccl.h"

struct ncclComm {
  int rank = 0, size = 0;
  std::vector<int> world;  // the MPI_COMM_WORLD rank of each member
  int tag = 0;             // the messages of this communicator
  std::string last_error;
};

namespace {

constexpr char kMagic[] = "dtrain-emu-nccl";
constexpr int kTagBase = 1000, kTagRange = 15000;  // operations, then set-up, below 32767

struct IdFields {
  char magic[sizeof kMagic];
  int creator;  // world rank of the caller of ncclGetUniqueId
  int serial;
};

int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

ncclResult_t fail(ncclComm_t c, ncclResult_t r, const std::string& why) {
  std::fprintf(stderr, "NCCL emulator: %s\n", why.c_str());
  if (c) c->last_error = why;
  return r;
}

std::size_t elem_size(ncclDataType_t t) {
  switch (t) {
    case ncclInt8: case ncclUint8: return 1;
    case ncclFloat16: case ncclBfloat16: return 2;
    case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
    case ncclInt64: case ncclUint64: case ncclFloat64: return 8;
  }
  return 0;
}

template <class T> T apply(ncclRedOp_t op, T a, T b) {
  switch (op) {
    case ncclSum: case ncclAvg: return a + b;
    case ncclProd: return a * b;
    case ncclMax: return a < b ? b : a;
    case ncclMin: return b < a ? b : a;
  }
  return a;
}

template <class T> void combine_as(void* acc, const void* src, std::size_t n, ncclRedOp_t op) {
  T* a = static_cast<T*>(acc);
  const T* s = static_cast<const T*>(src);
  for (std::size_t i = 0; i < n; ++i) a[i] = apply(op, a[i], s[i]);
}

// 16-bit floats combine in fp32 and round back after each step, like a reduction in the type.
void combine_16(void* acc, const void* src, std::size_t n, ncclRedOp_t op, bool bf16) {
  using namespace dtrain::halfbits;
  auto* a = static_cast<std::uint16_t*>(acc);
  const auto* s = static_cast<const std::uint16_t*>(src);
  for (std::size_t i = 0; i < n; ++i) {
    const float x = bf16 ? from_bf16(a[i]) : from_f16(a[i]);
    const float y = bf16 ? from_bf16(s[i]) : from_f16(s[i]);
    const float r = apply(op, x, y);
    a[i] = bf16 ? to_bf16(r) : to_f16(r);
  }
}

void combine(void* acc, const void* src, std::size_t n, ncclDataType_t t, ncclRedOp_t op) {
  switch (t) {
    case ncclInt8: combine_as<std::int8_t>(acc, src, n, op); break;
    case ncclUint8: combine_as<std::uint8_t>(acc, src, n, op); break;
    case ncclInt32: combine_as<std::int32_t>(acc, src, n, op); break;
    case ncclUint32: combine_as<std::uint32_t>(acc, src, n, op); break;
    case ncclInt64: combine_as<std::int64_t>(acc, src, n, op); break;
    case ncclUint64: combine_as<std::uint64_t>(acc, src, n, op); break;
    case ncclFloat32: combine_as<float>(acc, src, n, op); break;
    case ncclFloat64: combine_as<double>(acc, src, n, op); break;
    case ncclFloat16: combine_16(acc, src, n, op, false); break;
    case ncclBfloat16: combine_16(acc, src, n, op, true); break;
  }
}

void divide(void* acc, std::size_t n, ncclDataType_t t, int by) {
  using namespace dtrain::halfbits;
  if (t == ncclFloat32)
    for (std::size_t i = 0; i < n; ++i) static_cast<float*>(acc)[i] /= static_cast<float>(by);
  else if (t == ncclFloat64)
    for (std::size_t i = 0; i < n; ++i) static_cast<double*>(acc)[i] /= by;
  else {
    const bool bf16 = t == ncclBfloat16;
    auto* a = static_cast<std::uint16_t*>(acc);
    for (std::size_t i = 0; i < n; ++i) {
      const float x = (bf16 ? from_bf16(a[i]) : from_f16(a[i])) / static_cast<float>(by);
      a[i] = bf16 ? to_bf16(x) : to_f16(x);
    }
  }
}

void send_bytes(const ncclComm& c, const void* p, std::size_t bytes, int to) {
  MPI_Send(p, static_cast<int>(bytes), MPI_BYTE, c.world[to], c.tag, MPI_COMM_WORLD);
}
void recv_bytes(const ncclComm& c, void* p, std::size_t bytes, int from) {
  MPI_Recv(p, static_cast<int>(bytes), MPI_BYTE, c.world[from], c.tag, MPI_COMM_WORLD,
           MPI_STATUS_IGNORE);
}

// Combines every rank's n elements on `root`, in rank order, into `out` (root only).
void reduce_to(const ncclComm& c, const void* in, void* out, std::size_t n, ncclDataType_t t,
               ncclRedOp_t op, int root) {
  const std::size_t bytes = n * elem_size(t);
  if (c.rank != root) {
    send_bytes(c, in, bytes, root);
    return;
  }
  std::vector<char> acc(bytes), part(bytes);
  for (int r = 0; r < c.size; ++r) {
    char* dst = r == 0 ? acc.data() : part.data();
    if (r == root) std::memcpy(dst, in, bytes);
    else recv_bytes(c, dst, bytes, r);
    if (r > 0) combine(acc.data(), part.data(), n, t, op);
  }
  if (op == ncclAvg) divide(acc.data(), n, t, c.size);
  std::memcpy(out, acc.data(), bytes);
}

void broadcast_from(const ncclComm& c, const void* in, void* out, std::size_t bytes, int root) {
  if (c.rank == root) {
    for (int r = 0; r < c.size; ++r)
      if (r != root) send_bytes(c, in, bytes, r);
    if (out != in) std::memmove(out, in, bytes);
  } else {
    recv_bytes(c, out, bytes, root);
  }
}

// ---- queuing -----------------------------------------------------------------------------

struct Pending {
  cudaStream_t stream;
  std::function<void()> collective;          // run in order
  std::function<void(std::vector<MPI_Request>&)> post;  // point-to-point: posted, waited at the end
};

int g_group_depth = 0;
std::vector<Pending> g_group;

void run_group(const std::vector<Pending>& ops) {
  std::vector<MPI_Request> requests;
  for (const Pending& p : ops)
    if (p.post) p.post(requests);
  for (const Pending& p : ops)
    if (p.collective) p.collective();
  if (!requests.empty())
    MPI_Waitall(static_cast<int>(requests.size()), requests.data(), MPI_STATUSES_IGNORE);
}

ncclResult_t submit(Pending p) {
  if (g_group_depth > 0) {
    g_group.push_back(std::move(p));
    return ncclSuccess;
  }
  const cudaStream_t s = p.stream;
  dtrain_emu::enqueue(s, [p = std::move(p)] { run_group({p}); });
  return ncclSuccess;
}

bool overlaps(const void* a, std::size_t an, const void* b, std::size_t bn) {
  const char* pa = static_cast<const char*>(a);
  const char* pb = static_cast<const char*>(b);
  return an && bn && pa < pb + bn && pb < pa + an;
}

// The common checks: a communicator, a known type, device buffers, and NCCL's in-place rule
// (input and output may overlap only in the operation's in-place form).
ncclResult_t check(ncclComm_t c, ncclDataType_t t, const void* in, std::size_t in_bytes,
                   const void* out, std::size_t out_bytes, bool in_place, const char* what) {
  if (!c) return fail(c, ncclInvalidArgument, std::string(what) + ": no communicator");
  if (!elem_size(t)) return fail(c, ncclInvalidArgument, std::string(what) + ": unknown type");
  if ((in_bytes && !dtrain_emu::device_range_ok(in, in_bytes, what)) ||
      (out_bytes && !dtrain_emu::device_range_ok(out, out_bytes, what)))
    return fail(c, ncclInvalidArgument, std::string(what) + ": buffers must be device memory");
  if (!in_place && overlaps(in, in_bytes, out, out_bytes))
    return fail(c, ncclInvalidArgument,
                std::string(what) + ": input and output overlap other than in NCCL's in-place form");
  if (in_bytes > 0x7fffffff || out_bytes > 0x7fffffff)
    return fail(c, ncclInvalidArgument, std::string(what) + ": more than 2 GiB (emulator limit)");
  return ncclSuccess;
}

const char* at(const void* p, std::size_t offset) { return static_cast<const char*>(p) + offset; }

}  // namespace

const char* ncclGetErrorString(ncclResult_t r) {
  switch (r) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error";
    case ncclSystemError: return "unhandled system error";
    case ncclInternalError: return "internal error";
    case ncclInvalidArgument: return "invalid argument";
    case ncclInvalidUsage: return "invalid usage";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
  }
  return "unknown result code";
}

const char* ncclGetLastError(ncclComm_t c) { return c ? c->last_error.c_str() : ""; }

ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  static int serial = 0;
  int initialised = 0;
  MPI_Initialized(&initialised);
  if (!initialised) return fail(nullptr, ncclSystemError, "MPI is not initialised");
  IdFields f{};
  std::memcpy(f.magic, kMagic, sizeof kMagic);
  f.creator = world_rank();
  f.serial = serial++;
  std::memset(id, 0, sizeof *id);
  std::memcpy(id->internal, &f, sizeof f);
  return ncclSuccess;
}

ncclResult_t ncclCommInitRank(ncclComm_t* out, int nranks, ncclUniqueId id, int rank) {
  IdFields f{};
  std::memcpy(&f, id.internal, sizeof f);
  if (std::memcmp(f.magic, kMagic, sizeof kMagic) != 0)
    return fail(nullptr, ncclInvalidArgument, "ncclCommInitRank: not an id of ncclGetUniqueId");
  if (nranks < 1 || rank < 0 || rank >= nranks)
    return fail(nullptr, ncclInvalidArgument, "ncclCommInitRank: bad rank or size");
  if ((rank == 0) != (f.creator == world_rank()))
    return fail(nullptr, ncclInvalidUsage, "ncclCommInitRank: rank 0 must have made the id");
  auto* c = new ncclComm;
  c->rank = rank;
  c->size = nranks;
  c->world.assign(nranks, -1);
  c->world[rank] = world_rank();
  const int slot = (f.creator * 97 + f.serial) % kTagRange;
  c->tag = kTagBase + slot;
  const int setup_tag = kTagBase + kTagRange + slot;
  if (rank == 0) {  // learn every member's world rank, then tell them all
    for (int i = 1; i < nranks; ++i) {
      int pair[2];
      MPI_Recv(pair, 2, MPI_INT, MPI_ANY_SOURCE, setup_tag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      c->world[pair[0]] = pair[1];
    }
    for (int r = 1; r < nranks; ++r)
      MPI_Send(c->world.data(), nranks, MPI_INT, c->world[r], setup_tag, MPI_COMM_WORLD);
  } else {
    const int pair[2] = {rank, c->world[rank]};
    MPI_Send(pair, 2, MPI_INT, f.creator, setup_tag, MPI_COMM_WORLD);
    MPI_Recv(c->world.data(), nranks, MPI_INT, f.creator, setup_tag, MPI_COMM_WORLD,
             MPI_STATUS_IGNORE);
  }
  *out = c;
  return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t c) {
  delete c;
  return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t c) {
  delete c;
  return ncclSuccess;
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t c, ncclResult_t* async_error) {
  if (!c) return ncclInvalidArgument;
  *async_error = ncclSuccess;
  return ncclSuccess;
}

ncclResult_t ncclGroupStart() {
  ++g_group_depth;
  return ncclSuccess;
}

ncclResult_t ncclGroupEnd() {
  if (g_group_depth == 0) return fail(nullptr, ncclInvalidUsage, "ncclGroupEnd without ncclGroupStart");
  if (--g_group_depth > 0 || g_group.empty()) return ncclSuccess;
  std::vector<Pending> ops;
  ops.swap(g_group);
  for (const Pending& p : ops)
    if (p.stream != ops.front().stream)
      return fail(nullptr, ncclInvalidUsage, "a group's operations on different streams (emulator limit)");
  const cudaStream_t s = ops.front().stream;
  dtrain_emu::enqueue(s, [ops = std::move(ops)] { run_group(ops); });
  return ncclSuccess;
}

ncclResult_t ncclAllReduce(const void* send, void* recv, std::size_t count, ncclDataType_t t,
                           ncclRedOp_t op, ncclComm_t c, cudaStream_t s) {
  const std::size_t bytes = count * elem_size(t);
  if (ncclResult_t r = check(c, t, send, bytes, recv, bytes, send == recv, "ncclAllReduce"))
    return r;
  return submit({s, [=] {
                   std::vector<char> full(bytes);
                   reduce_to(*c, send, full.data(), count, t, op, 0);
                   broadcast_from(*c, full.data(), recv, bytes, 0);
                 }, nullptr});
}

ncclResult_t ncclReduce(const void* send, void* recv, std::size_t count, ncclDataType_t t,
                        ncclRedOp_t op, int root, ncclComm_t c, cudaStream_t s) {
  const std::size_t bytes = count * elem_size(t);
  const bool root_here = c && c->rank == root;
  if (ncclResult_t r = check(c, t, send, bytes, recv, root_here ? bytes : 0, send == recv, "ncclReduce"))
    return r;
  if (root < 0 || root >= c->size) return fail(c, ncclInvalidArgument, "ncclReduce: bad root");
  return submit({s, [=] { reduce_to(*c, send, recv, count, t, op, root); }, nullptr});
}

ncclResult_t ncclReduceScatter(const void* send, void* recv, std::size_t recv_count,
                               ncclDataType_t t, ncclRedOp_t op, ncclComm_t c, cudaStream_t s) {
  const std::size_t es = elem_size(t), bytes = recv_count * es;
  if (!c) return fail(c, ncclInvalidArgument, "ncclReduceScatter: no communicator");
  const std::size_t rank_at = static_cast<std::size_t>(c->rank) * bytes;
  if (ncclResult_t r = check(c, t, send, bytes * c->size, recv, bytes, recv == at(send, rank_at),
                             "ncclReduceScatter"))
    return r;
  return submit({s, [=] {
                   std::vector<char> full(bytes * c->size);
                   reduce_to(*c, send, full.data(), recv_count * c->size, t, op, 0);
                   broadcast_from(*c, full.data(), full.data(), full.size(), 0);
                   std::memmove(recv, full.data() + static_cast<std::size_t>(c->rank) * bytes, bytes);
                 }, nullptr});
}

ncclResult_t ncclAllGather(const void* send, void* recv, std::size_t send_count,
                           ncclDataType_t t, ncclComm_t c, cudaStream_t s) {
  const std::size_t bytes = send_count * elem_size(t);
  if (!c) return fail(c, ncclInvalidArgument, "ncclAllGather: no communicator");
  const std::size_t rank_at = static_cast<std::size_t>(c->rank) * bytes;
  if (ncclResult_t r = check(c, t, send, bytes, recv, bytes * c->size, send == at(recv, rank_at),
                             "ncclAllGather"))
    return r;
  return submit({s, [=] {
                   std::vector<char> full(bytes * c->size);
                   if (c->rank == 0) {
                     for (int r = 0; r < c->size; ++r) {
                       char* dst = full.data() + static_cast<std::size_t>(r) * bytes;
                       if (r == 0) std::memcpy(dst, send, bytes);
                       else recv_bytes(*c, dst, bytes, r);
                     }
                   } else {
                     send_bytes(*c, send, bytes, 0);
                   }
                   broadcast_from(*c, full.data(), recv, full.size(), 0);
                 }, nullptr});
}

ncclResult_t ncclBroadcast(const void* send, void* recv, std::size_t count, ncclDataType_t t,
                           int root, ncclComm_t c, cudaStream_t s) {
  const std::size_t bytes = count * elem_size(t);
  const bool root_here = c && c->rank == root;
  if (ncclResult_t r = check(c, t, send, root_here ? bytes : 0, recv, bytes, send == recv, "ncclBroadcast"))
    return r;
  if (root < 0 || root >= c->size) return fail(c, ncclInvalidArgument, "ncclBroadcast: bad root");
  return submit({s, [=] { broadcast_from(*c, send, recv, bytes, root); }, nullptr});
}

ncclResult_t ncclSend(const void* send, std::size_t count, ncclDataType_t t, int peer,
                      ncclComm_t c, cudaStream_t s) {
  const std::size_t bytes = count * elem_size(t);
  if (ncclResult_t r = check(c, t, send, bytes, nullptr, 0, false, "ncclSend")) return r;
  if (peer < 0 || peer >= c->size) return fail(c, ncclInvalidArgument, "ncclSend: bad peer");
  return submit({s, nullptr, [=](std::vector<MPI_Request>& reqs) {
                   reqs.emplace_back();
                   MPI_Isend(send, static_cast<int>(bytes), MPI_BYTE, c->world[peer], c->tag,
                             MPI_COMM_WORLD, &reqs.back());
                 }});
}

ncclResult_t ncclRecv(void* recv, std::size_t count, ncclDataType_t t, int peer, ncclComm_t c,
                      cudaStream_t s) {
  const std::size_t bytes = count * elem_size(t);
  if (ncclResult_t r = check(c, t, nullptr, 0, recv, bytes, false, "ncclRecv")) return r;
  if (peer < 0 || peer >= c->size) return fail(c, ncclInvalidArgument, "ncclRecv: bad peer");
  return submit({s, nullptr, [=](std::vector<MPI_Request>& reqs) {
                   reqs.emplace_back();
                   MPI_Irecv(recv, static_cast<int>(bytes), MPI_BYTE, c->world[peer], c->tag,
                             MPI_COMM_WORLD, &reqs.back());
                 }});
}
