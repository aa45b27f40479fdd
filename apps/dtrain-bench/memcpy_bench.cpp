#include "memcpy_bench.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <vector>

#include "dtrain/core/buffer.hpp"
#include "dtrain/core/timer.hpp"

namespace bench {

void run_memcpy(const Options& o) {
  dtrain::AlignedBuffer src(buffer_bytes(o)), dst(buffer_bytes(o));  // touched once, here
  std::memset(src.data(), 1, buffer_bytes(o));
  std::printf("# memcpy on one core: median of %d copies after %d warm-up copies\n", o.iters,
              o.warmup);
  std::printf("#%11s %10s %10s\n", "size(B)", "time_us", "GB/s");
  std::size_t last = 0;
  for (double size = static_cast<double>(o.min_bytes); size <= o.max_bytes * kSizeSlack;
       size *= o.step_factor) {
    const std::size_t bytes = static_cast<std::size_t>(size);
    if (bytes == last) continue;  // a factor near 1 repeats sizes
    last = bytes;
    std::vector<double> t;
    for (int it = -o.warmup; it < o.iters; ++it) {
      dtrain::Stopwatch watch;
      std::memcpy(dst.data(), src.data(), bytes);
      const double us = watch.seconds() * 1e6;
      if (it >= 0) t.push_back(us);
    }
    std::sort(t.begin(), t.end());
    const double us = t[t.size() / 2];
    std::printf("%12zu %10.3f %10.3f\n", bytes, us, static_cast<double>(bytes) / (us * 1e3));
  }
}

}  // namespace bench
