// Layer split over pipeline stages: balanced, explicit, and the errors every rank throws.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "dtrain/core/error.hpp"
#include "dtrain/parallel/pipeline_partition.hpp"

using namespace dtrain;
using namespace dtrain::parallel;

namespace {
std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::invalid_config);
    return e.what();
  }
  return "";
}
}  // namespace

TEST(PipelinePartition, BalancedByLayerCount) {
  EXPECT_EQ(partition_layers(8, 4), (std::vector<LayerRange>{{0, 2}, {2, 2}, {4, 2}, {6, 2}}));
  EXPECT_EQ(partition_layers(7, 3), (std::vector<LayerRange>{{0, 3}, {3, 2}, {5, 2}}));
  EXPECT_EQ(partition_layers(4, 1), (std::vector<LayerRange>{{0, 4}}));
  for (int L = 1; L <= 20; ++L)
    for (int P = 1; P <= L; ++P) {
      const auto r = partition_layers(L, P);
      ASSERT_EQ(static_cast<int>(r.size()), P);
      int next = 0;
      for (const auto& x : r) {
        EXPECT_EQ(x.first, next);
        EXPECT_GE(x.count, L / P);
        EXPECT_LE(x.count, L / P + 1);
        next += x.count;
      }
      EXPECT_EQ(next, L);
    }
}

TEST(PipelinePartition, ExplicitSplit) {
  EXPECT_EQ(partition_layers(6, 3, parse_pipeline_layers("1,3,2")),
            (std::vector<LayerRange>{{0, 1}, {1, 3}, {4, 2}}));
  EXPECT_TRUE(parse_pipeline_layers("").empty());
  EXPECT_NE(error_of([] { partition_layers(6, 2, {1, 3, 2}); }).find("lists 3 stages"),
            std::string::npos);
  EXPECT_NE(error_of([] { partition_layers(6, 3, {1, 3, 1}); }).find("adds up to 5"),
            std::string::npos);
  EXPECT_NE(error_of([] { partition_layers(6, 3, {0, 4, 2}); }).find("entry 1 is 0; every chunk"),
            std::string::npos);
  EXPECT_NE(error_of([] { partition_layers(6, 3, {4, 2, 0}); }).find("entry 3 is 0"), std::string::npos);
  for (const char* bad : {"1,,2", "1,2,", "a", "-1,2", "1 2"})
    EXPECT_NE(error_of([&] { parse_pipeline_layers(bad); }).find("comma-separated"),
              std::string::npos)
        << bad;
}

TEST(PipelinePartition, FewerLayersThanStagesIsAClearError) {
  const std::string e = error_of([] { partition_layers(2, 4); });
  EXPECT_NE(e.find("--layers 2 is fewer than the 4 pipeline stages"), std::string::npos) << e;
}
