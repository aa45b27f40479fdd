/* The Fortran module's own failure messages (array shapes the C library cannot see), kept per
 * thread as the C library keeps its own: Fortran has no thread-local variables. Internal to
 * libdtrain_fortran (hidden). */
#include <string.h>

enum { CAPACITY = 1024 }; /* "procedure: reason"; a longer one is cut */
static _Thread_local char message[CAPACITY];

__attribute__((visibility("hidden"))) void dtrain_fortran_set_error(const char* text, size_t length) {
  if (length >= CAPACITY) length = CAPACITY - 1;
  memcpy(message, text, length);
  message[length] = '\0';
}

__attribute__((visibility("hidden"))) const char* dtrain_fortran_error(void) { return message; }
