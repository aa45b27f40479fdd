#pragma once
// Switching between the emulator's fibers. On x86-64 a switch saves the callee-saved
// registers on the current stack and moves to the other stack: no system call, unlike
// swapcontext, which also saves the signal mask (and made emulated kernels slow).
// Elsewhere ucontext does the same job, slower.
#include <cstddef>
#include <cstdint>

#if defined(__x86_64__)

namespace dtrain_emu {

struct FiberContext {
  void* sp = nullptr;
};

// Pushes the callee-saved registers, stores the stack pointer in *save_sp, loads load_sp,
// pops that stack's registers and returns on it (defined in threads.cpp). MXCSR and the x87
// control word are not switched: kernels do not change rounding modes.
extern "C" void dtrain_emu_switch_stack(void** save_sp, void* load_sp);

inline void switch_fiber(FiberContext& from, FiberContext& to) {
  dtrain_emu_switch_stack(&from.sp, to.sp);
}

// The first switch to `c` enters `entry`, which must never return.
inline void prepare_fiber(FiberContext& c, char* stack, std::size_t bytes, void (*entry)()) {
  auto top = reinterpret_cast<std::uintptr_t>(stack + bytes) & ~std::uintptr_t(15);
  void** sp = reinterpret_cast<void**>(top);
  *--sp = nullptr;                           // entry's (unused) return address: rsp = 8 mod 16
  *--sp = reinterpret_cast<void*>(entry);    // where the switch's `ret` goes
  for (int i = 0; i < 6; ++i) *--sp = nullptr;  // rbp rbx r12 r13 r14 r15
  c.sp = sp;
}

}  // namespace dtrain_emu

#else

#include <ucontext.h>

namespace dtrain_emu {

struct FiberContext {
  ucontext_t uc;
};

inline void switch_fiber(FiberContext& from, FiberContext& to) { swapcontext(&from.uc, &to.uc); }

inline void prepare_fiber(FiberContext& c, char* stack, std::size_t bytes, void (*entry)()) {
  getcontext(&c.uc);
  c.uc.uc_stack.ss_sp = stack;
  c.uc.uc_stack.ss_size = bytes;
  c.uc.uc_link = nullptr;
  makecontext(&c.uc, entry, 0);
}

}  // namespace dtrain_emu

#endif
