// all_reduce, reduce, reduce_scatter(_v): every dtype and op, in-place and not, odd and
// zero counts, blocking and non-blocking, against closed-form sums/maxima.
#include <cmath>
#include <cstdint>
#include <numeric>

#include "collective_checks.hpp"
#include "comm/mpi_util.hpp"

namespace dtrain::test {
namespace {

// Uneven per-rank counts, including zero-sized blocks.
std::vector<std::vector<std::size_t>> uneven_count_sets(int n) {
  std::vector<std::size_t> cyclic(n), growing(n), zeros(n, 0);
  for (int r = 0; r < n; ++r) {
    cyclic[r] = static_cast<std::size_t>((3 * r + 1) % 5);
    growing[r] = static_cast<std::size_t>(7 + 2 * r);
  }
  return {cyclic, growing, zeros};
}

std::size_t offset_of(const std::vector<std::size_t>& counts, int r) {
  return std::accumulate(counts.begin(), counts.begin() + r, std::size_t{0});
}

}  // namespace

void CollectiveTest::SetUp() { comm::set_max_elements_per_call(GetParam()); }
void CollectiveTest::TearDown() { comm::set_max_elements_per_call(0); }

TEST_P(CollectiveTest, AllReduce) {
  Communicator& c = world();
  const int n = c.size(), r = c.rank();
  for (DType t : all_dtypes())
    for (ReduceOp op : all_ops())
      for (std::size_t count : test_counts())
        for (bool in_place : {false, true})
          for (bool blocking : {true, false}) {
            Buffer send(count, t), recv(count, t);
            for (std::size_t i = 0; i < count; ++i) send.set(i, reduce_input(r, i, op, t));
            void* out = in_place ? send.data() : recv.data();
            if (blocking)
              c.all_reduce(send.data(), out, count, t, op);
            else
              c.iall_reduce(send.data(), out, count, t, op).wait();
            expect_elements(out, t, count, [&](std::size_t i) { return reduce_expected(n, i, op, t); },
                            (blocking ? "all_reduce " : "iall_reduce ") + describe(t, op, count, in_place));
          }
}

TEST_P(CollectiveTest, Reduce) {
  Communicator& c = world();
  const int n = c.size(), r = c.rank();
  for (int root : {n - 1, 0})
    for (DType t : all_dtypes())
      for (ReduceOp op : all_ops())
        for (std::size_t count : test_counts())
          for (bool in_place : {false, true}) {
            Buffer send(count, t), recv(count, t);
            for (std::size_t i = 0; i < count; ++i) send.set(i, reduce_input(r, i, op, t));
            void* out = in_place ? send.data() : (r == root ? recv.data() : nullptr);
            c.reduce(send.data(), out, count, t, op, root);
            if (r == root)
              expect_elements(out, t, count, [&](std::size_t i) { return reduce_expected(n, i, op, t); },
                              "reduce to " + std::to_string(root) + " " + describe(t, op, count, in_place));
          }
}

TEST_P(CollectiveTest, ReduceScatter) {
  Communicator& c = world();
  const int n = c.size(), r = c.rank();
  for (DType t : all_dtypes())
    for (ReduceOp op : all_ops())
      for (std::size_t count : test_counts())
        for (Placement place : kPlacements)
          for (bool blocking : {true, false}) {
            Buffer send(count * n, t), recv(count, t);
            for (std::size_t j = 0; j < count * n; ++j) send.set(j, reduce_input(r, j, op, t));
            void* out = place == Placement::separate      ? recv.data()
                        : place == Placement::in_place_nccl ? send.at(r * count)
                                                            : send.data();
            if (blocking)
              c.reduce_scatter(send.data(), out, count, t, op);
            else
              c.ireduce_scatter(send.data(), out, count, t, op).wait();
            expect_elements(out, t, count,
                            [&](std::size_t i) { return reduce_expected(n, r * count + i, op, t); },
                            std::string(blocking ? "reduce_scatter " : "ireduce_scatter ") +
                                placement_name(place) + " " + describe(t, op, count, false));
          }
}

TEST_P(CollectiveTest, ReduceScatterV) {
  Communicator& c = world();
  const int n = c.size(), r = c.rank();
  for (const auto& counts : uneven_count_sets(n))
    for (DType t : all_dtypes())
      for (ReduceOp op : all_ops())
        for (Placement place : kPlacements)
          for (bool blocking : {true, false}) {
            const std::size_t total = offset_of(counts, n), mine = offset_of(counts, r);
            Buffer send(total, t), recv(counts[r], t);
            for (std::size_t j = 0; j < total; ++j) send.set(j, reduce_input(r, j, op, t));
            void* out = place == Placement::separate      ? recv.data()
                        : place == Placement::in_place_nccl ? send.at(mine)
                                                            : send.data();
            if (blocking)
              c.reduce_scatter_v(send.data(), out, counts.data(), t, op);
            else
              c.ireduce_scatter_v(send.data(), out, counts.data(), t, op).wait();
            expect_elements(out, t, counts[r],
                            [&](std::size_t i) { return reduce_expected(n, mine + i, op, t); },
                            std::string(blocking ? "reduce_scatter_v " : "ireduce_scatter_v ") +
                                placement_name(place) + " " + describe(t, op, counts[r], false));
          }
}

// avg divides by the group size as an int: a u8 of 256 ranks was 0 (SIGFPE), of 300 was 44.
TEST(Reductions, AverageOfBytesOverManyRanks) {
  std::uint8_t v[2] = {200, 100};
  comm::divide_in_place(v, 2, DType::u8, 300);
  EXPECT_EQ(v[0], 0);
  EXPECT_EQ(v[1], 0);
  std::uint8_t w[2] = {255, 7};
  comm::divide_in_place(w, 2, DType::u8, 256);
  EXPECT_EQ(w[0], 0);
  std::uint8_t x[2] = {255, 7};
  comm::divide_in_place(x, 2, DType::u8, 3);  // and the small divisors as before
  EXPECT_EQ(x[0], 85);
  EXPECT_EQ(x[1], 2);
}

// max and min of 16-bit floats: a NaN on any rank is the result on every rank, whichever rank
// it is and wherever it falls in MPI's order of pairs.
TEST(Reductions, SixteenBitMaxAndMinKeepANaNFromAnyRank) {
  const int n = world().size(), me = world().rank();
  for (const DType t : {DType::bf16, DType::f16}) {
    for (int holder = 0; holder < n; ++holder) {
      std::vector<std::uint16_t> x(3);
      x[0] = t == DType::bf16 ? f32_to_bf16_bits(static_cast<float>(me))
                              : f32_to_f16_bits(static_cast<float>(me));
      x[1] = me == holder ? 0x7fc0 : x[0];  // a NaN in both formats
      x[2] = x[0];
      for (const ReduceOp op : {ReduceOp::max, ReduceOp::min}) {
        std::vector<std::uint16_t> out(3);
        world().all_reduce(x.data(), out.data(), 3, t, op);
        const float lo = t == DType::bf16 ? bf16_bits_to_f32(out[1]) : f16_bits_to_f32(out[1]);
        EXPECT_TRUE(std::isnan(lo)) << dtype_name(t) << " NaN on rank " << holder;
        const float z = t == DType::bf16 ? bf16_bits_to_f32(out[0]) : f16_bits_to_f32(out[0]);
        EXPECT_EQ(z, op == ReduceOp::max ? n - 1 : 0);
      }
    }
  }
}

// 16-bit sums round to nearest, ties to even (the other ranks add exact zeros): with bf16's
// spacing of 2^-7 above 1, 1 + 2^-8 is a tie that goes down to 1 (even), and
// (1 + 2^-7) + 2^-8 one that goes up to 1 + 2^-6 (even); truncation or ties away from zero
// would give another result in one of them.
TEST(Reductions, SixteenBitSumsRoundToNearestEven) {
  if (world().size() == 1) GTEST_SKIP() << "a sum of one value rounds nothing";
  const int me = world().rank();
  const float tie_down[2] = {1.0f, 1.0f / 256}, tie_up[2] = {1.0f + 1.0f / 128, 1.0f / 256};
  for (const auto& [parts, want] : {std::pair{tie_down, 1.0f}, std::pair{tie_up, 1.0f + 1.0f / 64}}) {
    const std::uint16_t mine = f32_to_bf16_bits(me < 2 ? parts[me] : 0.0f);
    std::uint16_t out = 0;
    world().all_reduce(&mine, &out, 1, DType::bf16, ReduceOp::sum);
    EXPECT_EQ(bf16_bits_to_f32(out), want) << parts[0] << " + " << parts[1];
  }
}

INSTANTIATE_TEST_SUITE_P(Limits, CollectiveTest, testing::Values(std::size_t{0}, std::size_t{5}),
                         [](const testing::TestParamInfo<std::size_t>& info) {
                           return info.param == 0 ? std::string("MpiLimit") : std::string("Chunked");
                         });

}  // namespace dtrain::test
