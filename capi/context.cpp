// dt_init*, dt_finalize and the context's world.
#include "guard.hpp"

using namespace dtrain::capi;

namespace {

dt_result_t start(const char* func, dt_context_t* out, dtrain::Runtime (*make)(void*), void* arg) {
  return call_free(func, [&] {
    need_ptr(out, "ctx");
    *out = nullptr;
    auto ctx = std::make_unique<dt_context_s>(make(arg));
    register_handle(ctx.get());
    *out = user_handle(ctx.release());
  });
}

}  // namespace

extern "C" {

dt_result_t dt_init(int* argc, char*** argv, dt_context_t* ctx) {
  struct Args {
    int* argc;
    char*** argv;
  } args{argc, argv};
  return start(__func__, ctx, [](void* a) {
    auto* p = static_cast<Args*>(a);
    return dtrain::Runtime(p->argc, p->argv);
  }, &args);
}

dt_result_t dt_init_fortran_comm(int fortran_comm, dt_context_t* ctx) {
  return start(__func__, ctx, [](void* a) {
    return dtrain::Runtime::from_fortran_comm(*static_cast<int*>(a));
  }, &fortran_comm);
}

dt_result_t dt_finalize(dt_context_t ctx) {
  return call<dt_context_s>(__func__, ctx, Kind::context, "ctx", [](dt_context_s& c) {
    unregister_handle(&c);
    delete &c;  // releases children, then the runtime (and MPI when it initialised it)
  });
}

dt_result_t dt_context_rank(dt_context_t ctx, int* rank) {
  return call<dt_context_s>(__func__, ctx, Kind::context, "ctx", [&](dt_context_s& c) {
    need_ptr(rank, "rank");
    *rank = c.runtime.rank();
  });
}

dt_result_t dt_context_size(dt_context_t ctx, int* size) {
  return call<dt_context_s>(__func__, ctx, Kind::context, "ctx", [&](dt_context_s& c) {
    need_ptr(size, "size");
    *size = c.runtime.size();
  });
}

dt_result_t dt_context_cpu_threads(dt_context_t ctx, int* threads) {
  return call<dt_context_s>(__func__, ctx, Kind::context, "ctx", [&](dt_context_s& c) {
    need_ptr(threads, "threads");
    *threads = c.cpu_threads.threads;
  });
}

dt_result_t dt_context_world(dt_context_t ctx, dt_comm_t* world) {
  clear_output(world);
  return call<dt_context_s>(__func__, ctx, Kind::context, "ctx", [&](dt_context_s& c) {
    need_ptr(world, "world");
    *world = user_handle(c.world.get());
  });
}

}  // extern "C"
