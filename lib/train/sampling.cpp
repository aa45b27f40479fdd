#include "dtrain/train/sampling.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "dtrain/core/error.hpp"

namespace dtrain::train {

int choose_token(const float* logits, int vocab, const SamplingConfig& cfg, double uniform) {
  DTRAIN_CHECK(vocab >= 1, Errc::invalid_argument, "choose_token: vocab must be >= 1, got " << vocab);
  DTRAIN_CHECK(cfg.top_p > 0 && cfg.top_p <= 1, Errc::invalid_argument,
               "choose_token: top_p must be in (0, 1], got " << cfg.top_p);
  if (cfg.temperature <= 0) return static_cast<int>(std::max_element(logits, logits + vocab) - logits);

  // Token ids by decreasing logit (ties: lower id first); only the first k matter.
  auto k = static_cast<std::size_t>(cfg.top_k > 0 ? std::min(cfg.top_k, vocab) : vocab);
  std::vector<int> order(static_cast<std::size_t>(vocab));
  std::iota(order.begin(), order.end(), 0);
  std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(k), order.end(),
                    [&](int a, int b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); });
  std::vector<double> weight(k);
  double total = 0;
  for (std::size_t i = 0; i < k; ++i) {
    weight[i] = std::exp((logits[order[i]] - logits[order[0]]) / cfg.temperature);
    total += weight[i];
  }
  if (cfg.top_p < 1) {  // the nucleus: the fewest leading tokens holding top_p of the mass
    double kept = 0;
    std::size_t m = 0;
    while (m < k && kept < cfg.top_p * total) kept += weight[m++];
    k = m;
    total = kept;
  }
  double cumulative = 0;
  for (std::size_t i = 0; i < k; ++i) {
    cumulative += weight[i] / total;
    if (uniform < cumulative) return order[i];
  }
  return order[k - 1];  // uniform within rounding of 1
}

}  // namespace dtrain::train
