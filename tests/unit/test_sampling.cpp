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

TEST(Sampling, EmptyVocabularyIsAnError) {
  EXPECT_THROW(choose_token(kLogits.data(), 0, {}, 0.5), Error);
}
