/* Preloaded into a program (LD_PRELOAD): counts the heap allocations it makes (malloc,
 * calloc, realloc, the aligned ones; C++'s operator new goes through malloc) and prints
 * "allocations of NAME: N" on stderr as it exits (NAME: the program's, as helper processes a
 * launcher starts print their own). A steady training step allocates nothing, so two
 * runs that differ only in their step count must print nearly the same N (steady_state.sh). */
#define _GNU_SOURCE
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

extern void* __libc_malloc(size_t);
extern void* __libc_calloc(size_t, size_t);
extern void* __libc_realloc(void*, size_t);
extern void* __libc_memalign(size_t, size_t);

static atomic_long g_allocations;

void* malloc(size_t n) {
  atomic_fetch_add_explicit(&g_allocations, 1, memory_order_relaxed);
  return __libc_malloc(n);
}
void* calloc(size_t k, size_t n) {
  atomic_fetch_add_explicit(&g_allocations, 1, memory_order_relaxed);
  return __libc_calloc(k, n);
}
void* realloc(void* p, size_t n) {
  atomic_fetch_add_explicit(&g_allocations, 1, memory_order_relaxed);
  return __libc_realloc(p, n);
}
void* memalign(size_t align, size_t n) {
  atomic_fetch_add_explicit(&g_allocations, 1, memory_order_relaxed);
  return __libc_memalign(align, n);
}
void* aligned_alloc(size_t align, size_t n) { return memalign(align, n); }
int posix_memalign(void** out, size_t align, size_t n) {
  void* p = memalign(align, n);
  if (!p) return ENOMEM;
  *out = p;
  return 0;
}

__attribute__((destructor)) static void report(void) {
  char line[256];
  const int len = snprintf(line, sizeof line, "allocations of %s: %ld\n", program_invocation_short_name,
                           atomic_load(&g_allocations));
  if (len > 0 && len < (int)sizeof line) {
    ssize_t unused = write(STDERR_FILENO, line, (size_t)len);
    (void)unused;
  }
}
