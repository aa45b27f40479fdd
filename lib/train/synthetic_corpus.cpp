// The built-in synthetic corpus (see data.hpp for its definition).
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <vector>

#include "dtrain/core/rng.hpp"
#include "dtrain/train/data.hpp"

namespace dtrain::train {
namespace {

constexpr char kAlphabet[] = "abcdefghijklmnopqrstuvwxyz .,;!?";
constexpr int kSymbols = 32;
constexpr int kCandidates = 6;  // possible successors of a symbol
constexpr int kSuccessors = 4;  // successors of a two-symbol context
constexpr std::array<float, kSuccessors> kProbs = {0.50f, 0.25f, 0.15f, 0.10f};
constexpr int kBurnIn = 16;  // steps from a random context before the first emitted token

class SyntheticCorpus final : public TokenSource {
 public:
  explicit SyntheticCorpus(std::uint64_t seed) : seed_(seed), successors_(kSymbols * kSymbols) {
    // Two levels, so a model can learn the structure step by step: the previous symbol b
    // fixes kCandidates possible successors; the context (a, b) picks kSuccessors of them,
    // in its own order of probability. Order-1 statistics alone leave about ln(6) nats;
    // only a model that also looks two symbols back reaches the entropy rate H(p).
    const std::uint64_t stream = rng::stream_id("synthetic.successors");
    std::vector<std::array<int, kCandidates>> candidates(kSymbols);
    for (int b = 0; b < kSymbols; ++b) {
      std::array<int, kSymbols> pool;
      for (int i = 0; i < kSymbols; ++i) pool[i] = i;
      pick_distinct(pool.data(), kSymbols, kCandidates, stream, 1000000 + b * 16);
      std::copy(pool.begin(), pool.begin() + kCandidates, candidates[b].begin());
    }
    for (int a = 0; a < kSymbols; ++a) {
      for (int b = 0; b < kSymbols; ++b) {
        std::array<int, kCandidates> pool = candidates[b];
        const int ctx = a * kSymbols + b;
        pick_distinct(pool.data(), kCandidates, kSuccessors, stream, static_cast<std::uint64_t>(ctx) * 16);
        std::copy(pool.begin(), pool.begin() + kSuccessors, successors_[ctx].begin());
      }
    }
  }

  void sample(Split split, std::uint64_t index, int length, std::int32_t* out) const override {
    const std::uint64_t stream =
        rng::stream_id(split == Split::train ? "synthetic.train" : "synthetic.val");
    const std::uint64_t per_sample = static_cast<std::uint64_t>(length) + kBurnIn + 2;
    const std::uint64_t base = index * per_sample;
    int a = static_cast<int>(rng::uniform(seed_, stream, base) * kSymbols) % kSymbols;
    int b = static_cast<int>(rng::uniform(seed_, stream, base + 1) * kSymbols) % kSymbols;
    for (int t = 0; t < length + kBurnIn; ++t) {
      const float u = rng::uniform(seed_, stream, base + 2 + t);
      const auto& next = successors_[a * kSymbols + b];
      int k = 0;
      float acc = kProbs[0];
      while (u >= acc && k < kSuccessors - 1) acc += kProbs[++k];
      a = b;
      b = next[k];
      if (t >= kBurnIn) out[t - kBurnIn] = static_cast<unsigned char>(kAlphabet[b]);
    }
  }

  int vocab_needed() const override { return 128; }  // ASCII bytes

  std::string describe() const override {
    char rate[32];  // rounded as the progress lines print it (to_string's digits were cut off)
    std::snprintf(rate, sizeof rate, "%.4f", entropy_rate());
    return std::string("built-in synthetic corpus (order-2 Markov source, 32 symbols, entropy rate ") + rate +
           " nats/token)";
  }

  double entropy_rate() const override {
    double h = 0;
    for (float p : kProbs) h -= p * std::log(static_cast<double>(p));
    return h;
  }

 private:
  // Partial Fisher-Yates: moves `count` distinct random elements of pool[0, n) to the front.
  void pick_distinct(int* pool, int n, int count, std::uint64_t stream, std::uint64_t index) const {
    for (int k = 0; k < count; ++k) {
      const float u = rng::uniform(seed_, stream, index + k);
      const int j = std::min(k + static_cast<int>(u * (n - k)), n - 1);
      std::swap(pool[k], pool[j]);
    }
  }

  std::uint64_t seed_;
  std::vector<std::array<int, kSuccessors>> successors_;
};

}  // namespace

std::unique_ptr<TokenSource> make_synthetic_corpus(std::uint64_t seed) {
  return std::make_unique<SyntheticCorpus>(seed);
}

}  // namespace dtrain::train
