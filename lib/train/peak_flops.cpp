#include "train/peak_flops.hpp"

#include <algorithm>

#include "dtrain/core/timer.hpp"

namespace dtrain::train {

double measure_peak_flops(Device& dev) {
  // A 512-cube GEMM keeps a CPU busy for milliseconds; a GPU finishes it in microseconds,
  // where the launch and the synchronisation would dominate: there a 4096 cube, four GEMMs
  // per timing, after one untimed warm-up.
  const bool cpu = dev.kind() == DeviceKind::cpu;
  const int n = cpu ? 512 : 4096, per_timing = cpu ? 1 : 4;
  const std::size_t numel = static_cast<std::size_t>(n) * n;
  DeviceBuffer a(dev, sizeof(float) * numel), b(dev, sizeof(float) * numel),
      c(dev, sizeof(float) * numel);
  dev.fill(a.as<float>(), 0.5f, static_cast<std::int64_t>(numel));
  dev.fill(b.as<float>(), 0.25f, static_cast<std::int64_t>(numel));
  auto gemm = [&] {
    dev.gemm(false, false, n, n, n, 1.0f, a.as<float>(), n, b.as<float>(), n, 0.0f,
             c.as<float>(), n);
  };
  if (!cpu) {
    gemm();
    dev.synchronize();
  }
  double best = 0;
  for (int rep = 0; rep < 6; ++rep) {
    Stopwatch w;
    for (int i = 0; i < per_timing; ++i) gemm();
    dev.synchronize();
    const double s = w.seconds();
    if (s > 0) best = std::max(best, 2.0 * n * n * n * per_timing / s);
  }
  return best;
}

}  // namespace dtrain::train
