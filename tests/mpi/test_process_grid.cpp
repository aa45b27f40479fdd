// ProcessGrid: shape validation (pure), the order string's rank layout, and for every
// factorisation of the world the exact members of each group, checked against a reference
// layout computed here and against the communicators themselves.
#include <gtest/gtest.h>

#include <array>
#include <string>

#include "dtrain/comm/process_grid.hpp"
#include "dtrain/core/error.hpp"
#include "test_support.hpp"

namespace dtrain::test {
namespace {

const char* const kOrders[] = {"tp-dp-pp", "tp-pp-dp", "dp-tp-pp", "dp-pp-tp", "pp-tp-dp",
                               "pp-dp-tp"};

// Reference layout: the rank of (tp, dp, pp) by mixed-radix digits, fastest dimension first.
int reference_rank(const GridShape& s, int tp, int dp, int pp) {
  const std::string& o = s.order;
  const std::array<std::string, 3> names = {o.substr(0, 2), o.substr(3, 2), o.substr(6, 2)};
  int rank = 0, stride = 1;
  for (const std::string& d : names) {
    const int coord = d == "tp" ? tp : d == "dp" ? dp : pp;
    const int size = d == "tp" ? s.tp : d == "dp" ? s.dp : s.pp;
    rank += coord * stride;
    stride *= size;
  }
  return rank;
}

std::vector<int> members_of(Communicator& c) {
  int me = world().rank();
  std::vector<int> all(static_cast<std::size_t>(c.size()));
  c.all_gather(&me, all.data(), 1, DType::i32);
  return all;
}

std::vector<GridShape> factorisations(int n) {
  std::vector<GridShape> out;
  for (int tp = 1; tp <= n; ++tp)
    for (int pp = 1; pp <= n; ++pp)
      if (n % (tp * pp) == 0)
        for (const char* order : kOrders) out.push_back(GridShape{tp, pp, n / (tp * pp), order});
  return out;
}

Errc error_code_of(int world_size, const GridShape& s) {
  try {
    resolve_grid(world_size, s);
  } catch (const Error& e) {
    return e.code();
  }
  return Errc::ok;
}

}  // namespace

TEST(GridShape, ResolvesAndInfersDp) {
  const GridShape s = resolve_grid(8, GridShape{2, 2, 0, "tp-dp-pp"});
  EXPECT_EQ(s.dp, 2);
  EXPECT_EQ(resolve_grid(6, GridShape{3, 1, 0, "pp-dp-tp"}).dp, 2);
  EXPECT_EQ(resolve_grid(4, GridShape{1, 1, 4, "tp-dp-pp"}).dp, 4);
}

TEST(GridShape, RejectsInvalidShapes) {
  EXPECT_EQ(error_code_of(4, {0, 1, 0, "tp-dp-pp"}), Errc::invalid_config);   // zero tp
  EXPECT_EQ(error_code_of(4, {1, -2, 0, "tp-dp-pp"}), Errc::invalid_config);  // negative pp
  EXPECT_EQ(error_code_of(4, {1, 1, -1, "tp-dp-pp"}), Errc::invalid_config);  // negative dp
  EXPECT_EQ(error_code_of(4, {3, 1, 0, "tp-dp-pp"}), Errc::invalid_config);   // 3 does not divide 4
  EXPECT_EQ(error_code_of(4, {2, 1, 3, "tp-dp-pp"}), Errc::invalid_config);   // 6 != 4
  EXPECT_EQ(error_code_of(4, {1, 1, 0, "tp-dp"}), Errc::invalid_config);      // pp missing
  EXPECT_EQ(error_code_of(4, {1, 1, 0, "tp-tp-pp"}), Errc::invalid_config);   // repeated
  EXPECT_EQ(error_code_of(4, {1, 1, 0, "tp-dp-pp-"}), Errc::invalid_config);  // trailing '-'
  EXPECT_EQ(error_code_of(4, {1, 1, 0, "tp_dp_pp"}), Errc::invalid_config);   // bad separator
  EXPECT_EQ(error_code_of(0, {1, 1, 0, "tp-dp-pp"}), Errc::invalid_config);
  // tp*pp*dp past 2^63, wrapped to 1 (998724481 * 1119412321 * 33 = 1 mod 2^64): was taken
  EXPECT_EQ(error_code_of(1, {998724481, 1119412321, 33, "tp-dp-pp"}), Errc::invalid_config);
  try {
    resolve_grid(1, GridShape{998724481, 1119412321, 33, "tp-dp-pp"});
    ADD_FAILURE() << "a grid of more than 2^63 ranks was taken for one";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("= at least 2^63 does not equal the world size 1"), std::string::npos)
        << e.what();
  }
  try {
    resolve_grid(4, GridShape{2, 1, 3, "tp-dp-pp"});
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("does not equal the world size 4"), std::string::npos)
        << e.what();
  }
}

TEST(GridShape, DefaultOrderIsTensorFastest) {
  const GridShape s{2, 3, 4, "tp-dp-pp"};  // tp=2, pp=3, dp=4
  for (int pp = 0; pp < 3; ++pp)
    for (int dp = 0; dp < 4; ++dp)
      for (int tp = 0; tp < 2; ++tp) {
        const int g = tp + dp * 2 + pp * 2 * 4;  // Megatron-Core's layout
        EXPECT_EQ(ProcessGrid::rank_of(tp, dp, pp, s), g);
        const GridCoord c = ProcessGrid::coord_of(g, s);
        EXPECT_EQ(c.tp, tp);
        EXPECT_EQ(c.dp, dp);
        EXPECT_EQ(c.pp, pp);
      }
  EXPECT_THROW(ProcessGrid::rank_of(2, 0, 0, s), Error);  // coordinate out of range
}

TEST(ProcessGrid, EveryFactorisationHasTheRightGroups) {
  const int n = world().size();
  const int me = world().rank();
  for (const GridShape& shape : factorisations(n)) {
    SCOPED_TRACE("tp=" + std::to_string(shape.tp) + " pp=" + std::to_string(shape.pp) +
                 " dp=" + std::to_string(shape.dp) + " order=" + shape.order);
    GridShape inferred = shape;
    inferred.dp = 0;
    ProcessGrid grid(world(), inferred);
    ASSERT_EQ(grid.tp_size(), shape.tp);
    ASSERT_EQ(grid.pp_size(), shape.pp);
    ASSERT_EQ(grid.dp_size(), shape.dp);

    // This rank's coordinates, by searching the reference layout.
    int my_tp = -1, my_dp = -1, my_pp = -1;
    for (int t = 0; t < shape.tp; ++t)
      for (int d = 0; d < shape.dp; ++d)
        for (int p = 0; p < shape.pp; ++p)
          if (reference_rank(shape, t, d, p) == me) my_tp = t, my_dp = d, my_pp = p;
    EXPECT_EQ(grid.tp_rank(), my_tp);
    EXPECT_EQ(grid.dp_rank(), my_dp);
    EXPECT_EQ(grid.pp_rank(), my_pp);
    EXPECT_EQ(grid.is_first_stage(), my_pp == 0);
    EXPECT_EQ(grid.is_last_stage(), my_pp == shape.pp - 1);

    std::vector<int> tp_ref, dp_ref, pp_ref, emb_ref;
    for (int t = 0; t < shape.tp; ++t) tp_ref.push_back(reference_rank(shape, t, my_dp, my_pp));
    for (int d = 0; d < shape.dp; ++d) dp_ref.push_back(reference_rank(shape, my_tp, d, my_pp));
    for (int p = 0; p < shape.pp; ++p) pp_ref.push_back(reference_rank(shape, my_tp, my_dp, p));
    const bool in_embedding = my_pp == 0 || my_pp == shape.pp - 1;
    if (shape.pp == 1 || !in_embedding) emb_ref = {me};
    else emb_ref = {pp_ref.front(), pp_ref.back()};

    EXPECT_EQ(grid.tp_members(), tp_ref);
    EXPECT_EQ(grid.dp_members(), dp_ref);
    EXPECT_EQ(grid.pp_members(), pp_ref);
    EXPECT_EQ(grid.embedding_members(), emb_ref);
    EXPECT_EQ(grid.in_embedding_group(), in_embedding);

    // The communicators themselves hold exactly those ranks, in that order.
    EXPECT_EQ(members_of(grid.tp()), tp_ref);
    EXPECT_EQ(members_of(grid.dp()), dp_ref);
    EXPECT_EQ(members_of(grid.pp()), pp_ref);
    EXPECT_EQ(members_of(grid.embedding()), emb_ref);
    EXPECT_EQ(members_of(grid.world()), world().world_ranks());
    EXPECT_EQ(grid.tp().name(), "tp");
    EXPECT_EQ(grid.embedding().name(), "embedding");
  }
}

TEST(ProcessGrid, InvalidGridThrowsOnEveryRank) {
  const int n = world().size();
  const GridShape bad[] = {{n + 1, 1, 0, "tp-dp-pp"}, {1, 1, n + 1, "tp-dp-pp"},
                           {0, 1, 0, "tp-dp-pp"},     {1, -1, 0, "tp-dp-pp"},
                           {1, 1, 0, "tp-xx-pp"}};
  for (const GridShape& shape : bad) {
    int threw = 0;
    try {
      ProcessGrid grid(world(), shape);
    } catch (const Error& e) {
      threw = e.code() == Errc::invalid_config ? 1 : 0;
    }
    EXPECT_EQ(threw, 1);
    int everywhere = 0;
    world().all_reduce(&threw, &everywhere, 1, DType::i32, ReduceOp::min);
    EXPECT_EQ(everywhere, 1) << "some rank did not throw for tp=" << shape.tp;
  }
}

// Ranks given different shapes (one rank's invalid, or two valid but different grids) would
// build groups that do not match, or leave the others waiting in the splits: every rank throws.
TEST(ProcessGrid, ShapesThatDifferBetweenRanksThrowOnEveryRank) {
  const int n = world().size();
  if (n < 2) GTEST_SKIP() << "needs two ranks";
  const bool last = world().rank() == n - 1;
  const GridShape differing[] = {last ? GridShape{n + 1, 1, 0, "tp-dp-pp"} : GridShape{},
                                 last ? GridShape{n, 1, 0, "tp-dp-pp"} : GridShape{},
                                 last ? GridShape{1, 1, 0, "dp-tp-pp"} : GridShape{}};
  for (const GridShape& shape : differing) {
    int threw = 0;
    try {
      ProcessGrid grid(world(), shape);
    } catch (const AgreedError& e) {
      threw = e.code() == Errc::invalid_config ? 1 : 0;
      if (world().rank() == 0) EXPECT_NE(std::string(e.what()).find("rank"), std::string::npos) << e.what();
    }
    int everywhere = 0;
    world().all_reduce(&threw, &everywhere, 1, DType::i32, ReduceOp::min);
    EXPECT_EQ(everywhere, 1) << "some rank did not throw for tp=" << shape.tp << " order " << shape.order;
  }
}

}  // namespace dtrain::test
