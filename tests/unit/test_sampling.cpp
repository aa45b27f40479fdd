// Choosing the next token: greedy, temperature and top-k against the softmax computed here.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "dtrain/core/error.hpp"
#include "dtrain/train/sampling.hpp"

using namespace dtrain;
using namespace dtrain::train;

namespace {
const std::vector<float> kLogits = {0.5f, 2.0f, -1.0f, 2.0f, 1.0f};  // 1 and 3 tie

// The token choose_token should return for `uniform`: the inverse of the cumulative softmax
// of logits / temperature over the tokens in `order` (decreasing probability).
int expected_token(const std::vector<int>& order, double temperature, double uniform) {
  double total = 0;
  for (int t : order) total += std::exp(kLogits[t] / temperature);
  double cumulative = 0;
  for (int t : order) {
    cumulative += std::exp(kLogits[t] / temperature) / total;
    if (uniform < cumulative) return t;
  }
  return order.back();
}
}  // namespace

TEST(Sampling, ZeroTemperatureIsTheMostLikelyTokenLowestIdAmongEquals) {
  EXPECT_EQ(choose_token(kLogits.data(), 5, {0.0, 0}, 0.99), 1);
  EXPECT_EQ(choose_token(kLogits.data(), 5, {0.0, 3}, 0.0), 1);
  EXPECT_EQ(choose_token(kLogits.data(), 3, {0.0, 0}, 0.5), 1);  // only the first 3 tokens
}

TEST(Sampling, DrawsByTheCumulativeSoftmaxInDecreasingOrder) {
  const std::vector<int> order = {1, 3, 4, 0, 2};
  for (double temperature : {0.5, 1.0, 3.0}) {
    for (double u = 0.005; u < 1.0; u += 0.01) {
      EXPECT_EQ(choose_token(kLogits.data(), 5, {temperature, 0}, u), expected_token(order, temperature, u))
          << "temperature " << temperature << ", uniform " << u;
    }
  }
}

TEST(Sampling, TopKDrawsOnlyAmongTheKMostLikely) {
  const std::vector<int> top3 = {1, 3, 4};
  for (double u = 0.005; u < 1.0; u += 0.01) {
    const int t = choose_token(kLogits.data(), 5, {1.0, 3}, u);
    EXPECT_EQ(t, expected_token(top3, 1.0, u)) << "uniform " << u;
  }
  EXPECT_EQ(choose_token(kLogits.data(), 5, {1.0, 1}, 0.999), 1);
  EXPECT_EQ(choose_token(kLogits.data(), 5, {1.0, 50}, 0.999), 2);  // k above the vocabulary: all
}

// Probabilities at temperature 1, in order 1, 3, 4, 0, 2: .379, .379, .139, .085, .019
// (cumulative .379, .757, .897, .981, 1).
TEST(Sampling, TopPDrawsAmongTheFewestTokensHoldingThatMass) {
  struct Case {
    double top_p;
    int top_k;
    std::vector<int> kept;
  };
  for (const Case& c : {Case{0.3, 0, {1}}, Case{0.7, 0, {1, 3}}, Case{0.76, 0, {1, 3, 4}},
                        Case{0.9, 0, {1, 3, 4, 0}}, Case{0.99, 0, {1, 3, 4, 0, 2}},
                        Case{1.0, 0, {1, 3, 4, 0, 2}},
                        // within the top 3 the masses are .422, .845, 1
                        Case{0.8, 3, {1, 3}}, Case{0.85, 3, {1, 3, 4}}}) {
    for (double u = 0.005; u < 1.0; u += 0.01) {
      SamplingConfig cfg;
      cfg.top_k = c.top_k;
      cfg.top_p = c.top_p;
      EXPECT_EQ(choose_token(kLogits.data(), 5, cfg, u), expected_token(c.kept, 1.0, u))
          << "top-p " << c.top_p << ", top-k " << c.top_k << ", uniform " << u;
    }
  }
}

TEST(Sampling, BadArgumentsAreErrors) {
  EXPECT_THROW(choose_token(kLogits.data(), 0, {}, 0.5), Error);
  for (const double p : {0.0, -0.5, 1.5}) {
    SamplingConfig cfg;
    cfg.top_p = p;
    EXPECT_THROW(choose_token(kLogits.data(), 5, cfg, 0.5), Error) << p;
  }
  // a NaN or infinite temperature drew the -inf token every time; a negative one was greedy
  for (const double t : {std::nan(""), static_cast<double>(INFINITY), -1.0}) {
    SamplingConfig cfg;
    cfg.temperature = t;
    EXPECT_THROW(choose_token(kLogits.data(), 5, cfg, 0.5), Error) << t;
  }
  SamplingConfig negative_k;
  negative_k.top_k = -5;
  EXPECT_THROW(choose_token(kLogits.data(), 5, negative_k, 0.5), Error);
  for (const double u : {-0.1, 1.0, std::nan("")})
    EXPECT_THROW(choose_token(kLogits.data(), 5, {}, u), Error) << u;
}

// Rounding can leave the cumulative sum a little below 1: a draw above it takes the least
// likely token that can be drawn, never a -inf logit or one whose weight underflowed to 0.
TEST(Sampling, ADrawAboveTheRoundedSumNeverTakesAnImpossibleToken) {
  std::vector<float> logits(54, 1.0f);  // 54 equal weights add up to just below 1
  logits.push_back(-INFINITY);
  const double last = std::nextafter(1.0, 0.0);
  EXPECT_EQ(choose_token(logits.data(), 55, {}, last), 53);
  SamplingConfig cold;
  cold.temperature = 0.01;  // a gap of 20 underflows: exp(-2000) is 0
  const std::vector<float> gap = {0.0f, 0.0f, -20.0f};
  EXPECT_EQ(choose_token(gap.data(), 3, cold, last), 1);
}
