// all_reduce, reduce, reduce_scatter(_v): every dtype and op, in-place and not, odd and
// zero counts, blocking and non-blocking, against closed-form sums/maxima.
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

INSTANTIATE_TEST_SUITE_P(Limits, CollectiveTest, testing::Values(std::size_t{0}, std::size_t{5}),
                         [](const testing::TestParamInfo<std::size_t>& info) {
                           return info.param == 0 ? std::string("MpiLimit") : std::string("Chunked");
                         });

}  // namespace dtrain::test
