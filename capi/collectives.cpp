// Communicator queries, the blocking collectives, and communicators for device buffers.
#include <algorithm>
#include <cstdint>
#include <string>

#include "dtrain/device/device.hpp"
#include "dtrain/parallel/device_world.hpp"
#include "agree.hpp"
#include "guard.hpp"

using namespace dtrain::capi;

namespace {

dtrain::DType dtype_of(dt_dtype_t t) {
  if (static_cast<int>(t) < DT_F32 || static_cast<int>(t) > DT_U8)
    fail(DT_ERR_INVALID_ARGUMENT, "unknown dtype " + std::to_string(static_cast<int>(t)));
  return static_cast<dtrain::DType>(t);
}

dtrain::ReduceOp op_of(dt_reduce_op_t op) {
  if (static_cast<int>(op) < DT_SUM || static_cast<int>(op) > DT_MIN)
    fail(DT_ERR_INVALID_ARGUMENT, "unknown reduce op " + std::to_string(static_cast<int>(op)));
  return static_cast<dtrain::ReduceOp>(op);
}

// Buffers may be NULL only when there is nothing to move.
// count elements of dtype, `blocks` times over in the larger buffer (one block per rank).
// No object holds more than PTRDIFF_MAX bytes, so a larger count (a negative one cast to
// size_t, say) is refused before MPI reads past a buffer.
void need_count(std::size_t count, dt_dtype_t dtype, std::size_t blocks = 1) {
  const std::size_t limit =
      static_cast<std::size_t>(PTRDIFF_MAX) / dtrain::dtype_size(dtype_of(dtype)) / blocks;
  if (count > limit)
    fail(DT_ERR_INVALID_ARGUMENT, "count " + std::to_string(count) +
                                      " is larger than any buffer can hold (at most " +
                                      std::to_string(limit) + " here)");
}

void need_buffers(const void* send, const void* recv, std::size_t count, dt_dtype_t dtype,
                  std::size_t blocks = 1) {
  need_count(count, dtype, blocks);
  if (count > 0) {
    need_ptr(send, "send");
    need_ptr(recv, "recv");
  }
}

template <class F>
dt_result_t with_comm(const char* func, dt_comm_t h, F&& body) {
  return call<dt_comm_s>(func, h, Kind::comm, "comm", [&](dt_comm_s& c) { body(*c.comm); });
}

}  // namespace

extern "C" {

dt_result_t dt_comm_rank(dt_comm_t comm, int* rank) {
  return with_comm(__func__, comm, [&](dtrain::Communicator& c) {
    need_ptr(rank, "rank");
    *rank = c.rank();
  });
}

dt_result_t dt_comm_size(dt_comm_t comm, int* size) {
  return with_comm(__func__, comm, [&](dtrain::Communicator& c) {
    need_ptr(size, "size");
    *size = c.size();
  });
}

// "World" in the C API is the context's world (dt_context_rank), which dt_init_mpi_comm may
// make a part of MPI_COMM_WORLD: the communicator's MPI_COMM_WORLD ranks are translated.
dt_result_t dt_comm_world_ranks(dt_comm_t comm, int* ranks, int capacity, int* count) {
  return call<dt_comm_s>(__func__, comm, Kind::comm, "comm", [&](dt_comm_s& c) {
    need_ptr(count, "count");
    const auto& members = c.comm->world_ranks();
    *count = static_cast<int>(members.size());
    if (capacity == 0 && !ranks) return;  // size query
    need_ptr(ranks, "ranks");
    need(capacity >= *count, "capacity is smaller than the group size");
    const auto& world = c.ctx->world->comm->world_ranks();
    for (int i = 0; i < *count; ++i) {
      const auto at = std::find(world.begin(), world.end(), members[static_cast<std::size_t>(i)]);
      if (at == world.end()) fail(DT_ERR_INTERNAL, "a group member is outside the context's world");
      ranks[i] = static_cast<int>(at - world.begin());
    }
  });
}

dt_result_t dt_all_reduce(dt_comm_t comm, const void* send, void* recv, size_t count,
                          dt_dtype_t dtype, dt_reduce_op_t op) {
  return with_comm(__func__, comm, [&](dtrain::Communicator& c) {
    need_buffers(send, recv, count, dtype);
    c.all_reduce(send, recv, count, dtype_of(dtype), op_of(op));
  });
}

dt_result_t dt_all_gather(dt_comm_t comm, const void* send, void* recv, size_t send_count,
                          dt_dtype_t dtype) {
  return with_comm(__func__, comm, [&](dtrain::Communicator& c) {
    need_buffers(send, recv, send_count, dtype, static_cast<std::size_t>(c.size()));
    c.all_gather(send, recv, send_count, dtype_of(dtype));
  });
}

dt_result_t dt_reduce_scatter(dt_comm_t comm, const void* send, void* recv, size_t recv_count,
                              dt_dtype_t dtype, dt_reduce_op_t op) {
  return with_comm(__func__, comm, [&](dtrain::Communicator& c) {
    need_buffers(send, recv, recv_count, dtype, static_cast<std::size_t>(c.size()));
    c.reduce_scatter(send, recv, recv_count, dtype_of(dtype), op_of(op));
  });
}

dt_result_t dt_broadcast(dt_comm_t comm, const void* send, void* recv, size_t count,
                         dt_dtype_t dtype, int root) {
  return with_comm(__func__, comm, [&](dtrain::Communicator& c) {
    need(root >= 0 && root < c.size(), "root is not a rank of the communicator");
    need_count(count, dtype);
    if (count > 0) {
      need_ptr(recv, "recv");
      if (c.rank() == root) need_ptr(send, "send");
    }
    c.broadcast(send, recv, count, dtype_of(dtype), root);
  });
}

dt_result_t dt_barrier(dt_comm_t comm) {
  return with_comm(__func__, comm, [](dtrain::Communicator& c) { c.barrier(); });
}

dt_result_t dt_comm_device(dt_comm_t comm, dt_comm_t* device_comm) {
  clear_output(device_comm);
  return call<dt_comm_s>(__func__, comm, Kind::comm, "comm", [&](dt_comm_s& c) {
    if (c.host) {  // already one: it is its own
      need_ptr(device_comm, "device_comm");
      *device_comm = user_handle(&c);
      return;
    }
    if (!c.device_handle) {
      dtrain::Communicator& host = *c.comm;
      // The first call is collective: a rank's NULL fails every rank, none waits below.
      agreed_checks(host, true, [&] { need_ptr(device_comm, "device_comm"); });
      // Every rank answers, so that none waits in the set-up below for one that failed.
      const int here = dtrain::cuda_available() ? 1 : 0;
      int everywhere = here;
      host.all_reduce(&here, &everywhere, 1, dtrain::DType::i32, dtrain::ReduceOp::min);
      if (!everywhere)
        fail(DT_ERR_UNAVAILABLE, here ? "another rank of comm has no usable GPU"
                                      : "this rank has no usable GPU (no CUDA plugin, driver or device)");
      dtrain::Device& dev = dtrain::select_device("cuda");
      c.device_comm = std::make_unique<dtrain::Communicator>(
          dtrain::parallel::device_world(host, dev, host.name() + ".device"));
      // Out of memory on some rank (making or registering the handle): no rank keeps the
      // handle or its group, so that all make them again together at the next call.
      std::unique_ptr<dt_comm_s> handle;
      try {
        agreed_checks(host, true, [&] {
          handle = std::make_unique<dt_comm_s>(c.ctx, c.device_comm.get(), c.grid);
          handle->host = &c;
          handle->device = &dev;
          register_handle(handle.get());
        });
      } catch (...) {
        if (handle) unregister_handle(handle.get());
        c.device_comm.reset();
        throw;
      }
      c.device_handle = std::move(handle);
    }
    need_ptr(device_comm, "device_comm");
    *device_comm = user_handle(c.device_handle.get());
  });
}

}  // extern "C"
