#include "train/peak_flops.hpp"

#include <algorithm>

#include "dtrain/core/timer.hpp"

namespace dtrain::train {

double measure_peak_flops(Device& dev) {
  constexpr int n = 512;
  const std::size_t bytes = sizeof(float) * n * n;
  DeviceBuffer a(dev, bytes), b(dev, bytes), c(dev, bytes);
  dev.fill(a.as<float>(), 0.5f, n * n);
  dev.fill(b.as<float>(), 0.25f, n * n);
  double best = 0;
  for (int rep = 0; rep < 6; ++rep) {
    Stopwatch w;
    dev.gemm(false, false, n, n, n, 1.0f, a.as<float>(), n, b.as<float>(), n, 0.0f, c.as<float>(), n);
    dev.synchronize();
    const double s = w.seconds();
    if (s > 0) best = std::max(best, 2.0 * n * n * n / s);
  }
  return best;
}

}  // namespace dtrain::train
