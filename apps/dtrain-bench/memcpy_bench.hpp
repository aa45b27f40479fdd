#pragma once
#include "options.hpp"

namespace bench {
// One core's memcpy bandwidth over the size range: the ceiling for any shared-memory
// transport, which copies every byte at least once.
void run_memcpy(const Options& options);
}  // namespace bench
