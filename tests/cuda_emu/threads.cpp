// Kernel grids on the CPU: blocks run one after another (ascending in one launch of a kernel,
// descending in its next); the threads of a block are fibers that switch only at
// __syncthreads, warp shuffles and warp-wide calls, so a barrier waits for every live thread
// of the block and a shuffle for every lane its mask names, as on a GPU.
// A kernel whose first launch never synchronised later runs its threads as a plain loop
// (much faster); should such a kernel synchronise after all, the emulator stops with a
// message rather than compute something a GPU would not. A thread's cp.async copies stay in
// flight until it waits for them (their destinations read as NaN meanwhile), and each block's
// __shared__ variables start as NaN.
#include <sys/mman.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <unordered_map>
#include <vector>

#include "cuda_runtime.h"
#include "fiber_switch.hpp"

#if defined(__x86_64__)
asm(R"(
        .pushsection .text
        .globl  dtrain_emu_switch_stack
        .hidden dtrain_emu_switch_stack
        .type   dtrain_emu_switch_stack, @function
dtrain_emu_switch_stack:
        pushq   %rbp
        pushq   %rbx
        pushq   %r12
        pushq   %r13
        pushq   %r14
        pushq   %r15
        movq    %rsp, (%rdi)
        movq    %rsi, %rsp
        popq    %r15
        popq    %r14
        popq    %r13
        popq    %r12
        popq    %rbx
        popq    %rbp
        ret
        .size   dtrain_emu_switch_stack, .-dtrain_emu_switch_stack
        .popsection
)");
#endif

uint3 threadIdx{0, 0, 0};
uint3 blockIdx{0, 0, 0};
dim3 blockDim{1, 1, 1};
dim3 gridDim{1, 1, 1};

namespace dtrain_emu {
namespace {

constexpr std::size_t kStackBytes = 256 * 1024;
constexpr int kMaxThreads = 1024;

enum class State { ready, at_barrier, at_shuffle, done };

// A thread's cp.async copies: issued and not yet committed, then committed groups, oldest first.
struct AsyncCopy {
  void* dst;
  const void* src;  // null: zeros
};
struct AsyncCopies {
  std::vector<AsyncCopy> open;
  std::deque<std::vector<AsyncCopy>> committed;
};

struct Fiber {
  FiberContext context;
  char* stack = nullptr;
  uint3 index{};
  State state = State::ready;
  int src_lane = 0;          // of the shuffle this lane waits in
  std::uint64_t result = 0;  // what that shuffle gives it, set when the last lane arrives
  void* gathered = nullptr;  // where the gather this lane waits in copies every lane's bytes
  AsyncCopies copies;
};

constexpr std::size_t kGatherBytes = 32;  // the most a lane hands to warp_gather

struct Warp {
  unsigned mask = 0;     // the mask of the exchange in progress
  unsigned arrived = 0;  // lanes that have deposited their slot this round
  std::size_t gather_bytes = 0;  // of the gather in progress; 0 for a shuffle
  std::uint64_t slots[32] = {};
  unsigned char gather[32 * kGatherBytes] = {};
};

struct Block {
  int threads = 0;
  int live = 0;
  int at_barrier = 0;
  int predicate_or = 0, predicate_and = 1, predicate_count = 0;   // of the barrier in progress
  int result_or = 0, result_and = 1, result_count = 0;            // of the last one released
  std::vector<Fiber> fibers;
  std::vector<Warp> warps;
  FiberContext scheduler;
  int current = -1;  // the running fiber; -1 in direct mode
  std::vector<std::uint64_t> ready;  // one bit per fiber that may run
  const Task* body = nullptr;
};

Block g_block;
AsyncCopies g_direct_copies;  // of the thread running in direct mode
bool g_direct = false;       // running a kernel known not to synchronise, as a plain loop
std::uint64_t g_block_serial = 0;  // counts the blocks run, to tell a block's first thread
std::unordered_map<const void*, std::uint64_t> g_shared_filled;  // variable -> block serial
bool g_synchronised = false;  // this launch called a barrier or a shuffle
std::unordered_map<const void*, bool> g_kernel_syncs;
std::unordered_map<const void*, unsigned> g_kernel_launches;

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr,
               "CUDA emulator: %s (block %u,%u,%u of grid %u,%u,%u; thread %u,%u,%u of block "
               "%u,%u,%u)\n",
               what, blockIdx.x, blockIdx.y, blockIdx.z, gridDim.x, gridDim.y, gridDim.z,
               threadIdx.x, threadIdx.y, threadIdx.z, blockDim.x, blockDim.y, blockDim.z);
  std::abort();
}

int linear(const uint3& t) {
  return static_cast<int>(t.x + blockDim.x * (t.y + blockDim.y * t.z));
}

// Lanes of warp w that exist (the last warp of a block may be partial).
unsigned existing_lanes(int w) {
  const int first = 32 * w, n = g_block.threads - first;
  return n >= 32 ? 0xffffffffu : ((1u << n) - 1u);
}

void make_ready(int k) {
  g_block.fibers[k].state = State::ready;
  g_block.ready[k >> 6] |= std::uint64_t(1) << (k & 63);
}

// The ready fiber with the lowest (or highest) index, or -1.
int next_ready(bool highest) {
  const auto& r = g_block.ready;
  const int words = static_cast<int>(r.size());
  for (int i = 0; i < words; ++i) {
    const int w = highest ? words - 1 - i : i;
    if (r[w]) return 64 * w + (highest ? 63 - __builtin_clzll(r[w]) : __builtin_ctzll(r[w]));
  }
  return -1;
}

void release_barrier_if_complete() {
  Block& b = g_block;
  if (b.at_barrier == 0 || b.at_barrier < b.live) return;
  for (int k = 0; k < b.threads; ++k)
    if (b.fibers[k].state == State::at_barrier) make_ready(k);
  b.at_barrier = 0;
  b.result_or = b.predicate_or;
  b.result_and = b.predicate_and;
  b.result_count = b.predicate_count;
  b.predicate_or = 0;
  b.predicate_and = 1;
  b.predicate_count = 0;
}

void switch_to_scheduler() {
  Fiber& f = g_block.fibers[g_block.current];
  switch_fiber(f.context, g_block.scheduler);
}

// A thread's copies, once it has ended: all waited for (the last group may be empty).
void check_copies_done(AsyncCopies& c) {
  bool pending = !c.open.empty();
  for (const auto& group : c.committed) pending = pending || !group.empty();
  if (pending) fail("a thread ended with asynchronous copies it never waited for");
  c.committed.clear();
}

// Every fiber starts here, with g_block.current naming it, and ends by switching away.
void fiber_main() {
  (*g_block.body)();
  Fiber& f = g_block.fibers[g_block.current];
  check_copies_done(f.copies);
  f.state = State::done;
  --g_block.live;
  release_barrier_if_complete();
  switch_to_scheduler();  // never resumed
}

char* new_stack() {
  void* p = mmap(nullptr, kStackBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                 -1, 0);
  if (p == MAP_FAILED) fail("no memory for a thread stack");
  mprotect(p, 4096, PROT_NONE);  // stack overflow faults instead of corrupting a neighbour
  return static_cast<char*>(p);
}

void report_deadlock() {
  int barrier = 0, shuffle = 0;
  for (const Fiber& f : g_block.fibers) {
    barrier += f.state == State::at_barrier;
    shuffle += f.state == State::at_shuffle;
  }
  char msg[256];
  std::snprintf(msg, sizeof msg,
                "deadlock: %d threads wait at __syncthreads, %d at a warp shuffle, %d exited "
                "(a barrier not reached by every thread, or a shuffle naming lanes that "
                "cannot join)",
                barrier, shuffle, g_block.threads - g_block.live);
  fail(msg);
}

// Every other block runs its threads in descending order (see run_block_as_fibers).
bool next_block_descends() {
  static unsigned blocks_run = 0;
  return (blocks_run++ & 1u) != 0;
}

void run_block_as_fibers() {
  Block& b = g_block;
  b.live = b.threads;
  b.at_barrier = 0;
  b.predicate_or = 0;
  b.predicate_and = 1;
  b.predicate_count = 0;
  if (static_cast<int>(b.fibers.size()) < b.threads) b.fibers.resize(b.threads);
  b.warps.assign((b.threads + 31) / 32, Warp{});
  b.ready.assign((b.threads + 63) / 64, 0);
  int i = 0;
  for (unsigned z = 0; z < blockDim.z; ++z)
    for (unsigned y = 0; y < blockDim.y; ++y)
      for (unsigned x = 0; x < blockDim.x; ++x, ++i) {
        Fiber& f = b.fibers[i];
        if (!f.stack) f.stack = new_stack();
        f.index = uint3{x, y, z};
        make_ready(i);
        prepare_fiber(f.context, f.stack, kStackBytes, &fiber_main);
      }
  // The scheduler always resumes the first ready thread, in ascending order in one block and
  // descending in the next, so some warps run far ahead of others: code that lacks a barrier
  // then reads values a slower warp has not written, or that a faster one has overwritten.
  const bool highest_first = next_block_descends();
  while (b.live > 0) {
    const int k = next_ready(highest_first);
    if (k < 0) report_deadlock();
    b.ready[k >> 6] &= ~(std::uint64_t(1) << (k & 63));
    b.current = k;
    threadIdx = b.fibers[k].index;
    switch_fiber(b.scheduler, b.fibers[k].context);
  }
  b.current = -1;
}

void run_block_directly(const Task& body, bool highest_first) {
  const int n = static_cast<int>(blockDim.x * blockDim.y * blockDim.z);
  for (int j = 0; j < n; ++j) {
    const unsigned i = static_cast<unsigned>(highest_first ? n - 1 - j : j);
    threadIdx = uint3{i % blockDim.x, (i / blockDim.x) % blockDim.y, i / (blockDim.x * blockDim.y)};
    body();
    check_copies_done(g_direct_copies);
  }
}

void enter_sync_point() {
  g_synchronised = true;
  if (g_direct)
    fail("a kernel synchronised that had not on its first launch; the emulator ran it as a "
         "plain loop (give it a first launch that reaches its barriers)");
  if (g_block.current < 0) fail("__syncthreads or a shuffle outside a kernel");
}

int barrier(int predicate) {
  enter_sync_point();
  Block& b = g_block;
  Fiber& f = b.fibers[b.current];
  b.predicate_or |= predicate != 0;
  b.predicate_and &= predicate != 0;
  b.predicate_count += predicate != 0;
  f.state = State::at_barrier;
  ++b.at_barrier;
  release_barrier_if_complete();
  switch_to_scheduler();
  return 0;
}

AsyncCopies& running_thread_copies() {
  if (!g_block.body) fail("an asynchronous copy outside a kernel");
  return g_block.current >= 0 ? g_block.fibers[g_block.current].copies : g_direct_copies;
}

}  // namespace

void fresh_shared(void* variable, std::size_t bytes) {
  if (!g_block.body) fail("a __shared__ variable outside a kernel");
  std::uint64_t& filled = g_shared_filled[variable];
  if (filled == g_block_serial) return;
  filled = g_block_serial;
  std::memset(variable, 0xFF, bytes);  // NaN in every floating-point format
}

void async_copy_16(void* dst, const void* src) {
  if (reinterpret_cast<std::uintptr_t>(dst) % 16 != 0 ||
      reinterpret_cast<std::uintptr_t>(src) % 16 != 0)
    fail("an asynchronous copy between addresses not 16-byte aligned");
  running_thread_copies().open.push_back(AsyncCopy{dst, src});
  std::memset(dst, 0xFF, 16);  // NaN in fp32, bf16 and fp16 until the copy lands
}

void async_copy_commit() {
  AsyncCopies& c = running_thread_copies();
  c.committed.push_back(std::move(c.open));
  c.open.clear();
}

void async_copy_wait(int pending) {
  AsyncCopies& c = running_thread_copies();
  while (static_cast<int>(c.committed.size()) > pending) {
    for (const AsyncCopy& copy : c.committed.front()) {
      if (copy.src) std::memcpy(copy.dst, copy.src, 16);
      else std::memset(copy.dst, 0, 16);
    }
    c.committed.pop_front();
  }
}

std::uint64_t warp_exchange(unsigned mask, std::uint64_t mine, int src_lane) {
  enter_sync_point();
  Block& b = g_block;
  Fiber& f = b.fibers[b.current];
  const int id = linear(f.index), lane = id & 31, first = id & ~31;
  Warp& w = b.warps[id >> 5];
  const unsigned members = mask & existing_lanes(id >> 5);
  if (!(mask & (1u << lane))) fail("a lane shuffles with a mask that leaves itself out");
  if (members != mask) fail("a shuffle mask names lanes that do not exist in this block");
  if (w.arrived != 0 && w.mask != mask) fail("lanes of one warp shuffle with different masks");
  if (w.arrived != 0 && w.gather_bytes != 0) fail("lanes of one warp shuffle and gather at once");
  w.mask = mask;
  w.gather_bytes = 0;
  w.slots[lane] = mine;
  f.src_lane = src_lane;
  w.arrived |= 1u << lane;
  if (w.arrived != members) {
    f.state = State::at_shuffle;
    switch_to_scheduler();
    return f.result;
  }
  // The last lane in hands every lane its value (a source outside the mask is undefined on
  // a GPU; here it reads its own value) and releases the others.
  for (int k = 0; k < 32; ++k) {
    if (!(members & (1u << k))) continue;
    Fiber& other = b.fibers[first + k];
    other.result = (members & (1u << other.src_lane)) ? w.slots[other.src_lane] : w.slots[k];
    if (other.state == State::at_shuffle) make_ready(first + k);
  }
  w.arrived = 0;
  return f.result;
}

void warp_gather(const void* mine, std::size_t bytes, void* all) {
  enter_sync_point();
  Block& b = g_block;
  Fiber& f = b.fibers[b.current];
  const int id = linear(f.index), lane = id & 31, first = id & ~31;
  Warp& w = b.warps[id >> 5];
  const unsigned members = existing_lanes(id >> 5);
  if (members != 0xffffffffu) fail("a warp-wide matrix call in a warp of fewer than 32 threads");
  if (bytes == 0 || bytes > kGatherBytes) fail("a warp gather of more bytes than it holds");
  if (w.arrived != 0 && w.gather_bytes != bytes)
    fail("lanes of one warp make different warp-wide calls at once");
  w.mask = members;
  w.gather_bytes = bytes;
  std::memcpy(w.gather + lane * bytes, mine, bytes);
  f.gathered = all;
  w.arrived |= 1u << lane;
  if (w.arrived != members) {
    f.state = State::at_shuffle;
    switch_to_scheduler();
    return;
  }
  // The last lane in copies every lane's bytes to each waiting lane and releases them.
  for (int k = 0; k < 32; ++k) {
    Fiber& other = b.fibers[first + k];
    std::memcpy(other.gathered, w.gather, 32 * bytes);
    if (other.state == State::at_shuffle) make_ready(first + k);
  }
  w.arrived = 0;
}

bool launch_config_ok(dim3 grid, dim3 block, std::size_t shared_bytes) {
  const unsigned long long threads = 1ull * block.x * block.y * block.z;
  const char* why = nullptr;
  if (grid.x == 0 || grid.y == 0 || grid.z == 0 || threads == 0) why = "an empty grid or block";
  else if (grid.x > 0x7fffffffu || grid.y > 65535 || grid.z > 65535) why = "grid too large";
  else if (block.x > 1024 || block.y > 1024 || block.z > 64 || threads > kMaxThreads)
    why = "block too large";
  else if (shared_bytes > 48 * 1024) why = "more than 48 KiB of dynamic shared memory";
  if (!why) return true;
  std::fprintf(stderr, "CUDA emulator: invalid launch (%s): grid %u,%u,%u block %u,%u,%u\n", why,
               grid.x, grid.y, grid.z, block.x, block.y, block.z);
  set_last_error(cudaErrorInvalidConfiguration);
  return false;
}

void enqueue_grid(cudaStream_t stream, dim3 grid, dim3 block, const void* kernel, Task body) {
  enqueue(stream, [grid, block, kernel, body = std::move(body)] {
    gridDim = grid;
    blockDim = block;
    auto known = g_kernel_syncs.find(kernel);
    g_direct = known != g_kernel_syncs.end() && !known->second;
    g_synchronised = false;
    g_block.threads = static_cast<int>(block.x * block.y * block.z);
    g_block.body = &body;
    // A kernel's blocks run in ascending order in one launch and descending in its next: a
    // block that reads what another block of the same launch writes (no order on a GPU) then
    // sees it unwritten in one of the two.
    const bool backwards = (g_kernel_launches[kernel]++ & 1u) != 0;
    const std::uint64_t blocks = 1ull * grid.x * grid.y * grid.z;
    for (std::uint64_t k = 0; k < blocks; ++k) {
      const std::uint64_t i = backwards ? blocks - 1 - k : k;
      blockIdx = uint3{static_cast<unsigned>(i % grid.x),
                       static_cast<unsigned>(i / grid.x % grid.y),
                       static_cast<unsigned>(i / (1ull * grid.x * grid.y))};
      ++g_block_serial;
      if (g_direct) run_block_directly(body, next_block_descends());
      else run_block_as_fibers();
    }
    if (known == g_kernel_syncs.end()) g_kernel_syncs.emplace(kernel, g_synchronised);
    g_direct = false;
    g_block.body = nullptr;
  });
}

}  // namespace dtrain_emu

void __syncthreads() { dtrain_emu::barrier(1); }
int __syncthreads_or(int predicate) {
  dtrain_emu::barrier(predicate);
  return dtrain_emu::g_block.result_or;
}
int __syncthreads_and(int predicate) {
  dtrain_emu::barrier(predicate);
  return dtrain_emu::g_block.result_and;
}
int __syncthreads_count(int predicate) {
  dtrain_emu::barrier(predicate);
  return dtrain_emu::g_block.result_count;
}
