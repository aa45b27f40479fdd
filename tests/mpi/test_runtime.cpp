// Runtime and Communicator plumbing: ranks, node-local ranks, split/dup membership, the
// Fortran-handle bridge, byte accounting and argument errors.
#include <gtest/gtest.h>
#include <mpi.h>

#include <numeric>

#include "dtrain/comm/mpi_interop.hpp"
#include "dtrain/core/error.hpp"
#include "test_support.hpp"

namespace dtrain::test {
namespace {

std::vector<int> gather_world_ranks(Communicator& c) {
  int me = world().rank();
  std::vector<int> all(static_cast<std::size_t>(c.size()));
  c.all_gather(&me, all.data(), 1, DType::i32);
  return all;
}

}  // namespace

TEST(Runtime, RanksMatchMpi) {
  int rank = -1, size = -1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  EXPECT_EQ(runtime().rank(), rank);
  EXPECT_EQ(runtime().size(), size);
  EXPECT_EQ(world().name(), "world");
  EXPECT_EQ(world().backend(), BackendKind::mpi);
  std::vector<int> expected(static_cast<std::size_t>(size));
  std::iota(expected.begin(), expected.end(), 0);
  EXPECT_EQ(world().world_ranks(), expected);
}

TEST(Runtime, NodeLocalRanks) {
  // The tests run on one node: node-local ranks are the world ranks.
  EXPECT_EQ(runtime().local_size(), runtime().size());
  EXPECT_EQ(runtime().local_rank(), runtime().rank());
  EXPECT_EQ(runtime().local_device_index(0), -1);
  EXPECT_EQ(runtime().local_device_index(2), runtime().local_rank() % 2);
  EXPECT_EQ(runtime().local_device_index(1), 0);
  EXPECT_GE(runtime().thread_level(), MPI_THREAD_FUNNELED);
}

TEST(Communicator, SplitGroupsByColorOrderedByKey) {
  const int r = world().rank(), n = world().size();
  // Two colors (even / odd ranks), ranked in reverse world order.
  Communicator half = world().split(r % 2, n - r, "parity");
  ASSERT_TRUE(half.valid());
  EXPECT_EQ(half.name(), "parity");
  std::vector<int> expected;
  for (int q = n - 1; q >= 0; --q)
    if (q % 2 == r % 2) expected.push_back(q);
  EXPECT_EQ(half.size(), static_cast<int>(expected.size()));
  EXPECT_EQ(half.world_ranks(), expected);
  EXPECT_EQ(gather_world_ranks(half), expected);
  EXPECT_EQ(half.world_ranks()[half.rank()], r);
}

TEST(Communicator, NegativeColorLeavesRankOut) {
  const int r = world().rank();
  Communicator only_zero = world().split(r == 0 ? 0 : -1, 0, "zero");
  EXPECT_EQ(only_zero.valid(), r == 0);
  if (r == 0) EXPECT_EQ(only_zero.size(), 1);
  else EXPECT_THROW(only_zero.barrier(), Error);
}

TEST(Communicator, DupIsIndependentAndMovable) {
  Communicator copy = world().dup("copy");
  EXPECT_EQ(copy.size(), world().size());
  EXPECT_EQ(copy.rank(), world().rank());
  EXPECT_NE(copy.fortran_handle(), world().fortran_handle());
  Communicator moved = std::move(copy);
  EXPECT_FALSE(copy.valid());  // NOLINT(bugprone-use-after-move): moved-from is empty
  EXPECT_EQ(moved.name(), "copy");
  EXPECT_EQ(gather_world_ranks(moved), world().world_ranks());
}

TEST(Communicator, MpiInteropBridge) {
  Communicator wrapped = communicator_from_mpi_comm(MPI_COMM_WORLD, "wrapped");
  int result = MPI_UNEQUAL;
  MPI_Comm_compare(to_mpi_comm(wrapped), MPI_COMM_WORLD, &result);
  EXPECT_EQ(result, MPI_CONGRUENT);  // a duplicate: same group, separate traffic
  Runtime second = runtime_from_mpi_comm(MPI_COMM_WORLD);  // MPI already up: not re-initialised
  EXPECT_EQ(second.rank(), world().rank());
  EXPECT_EQ(second.size(), world().size());
  EXPECT_EQ(gather_world_ranks(second.world()), world().world_ranks());
}

TEST(Communicator, CountsBytesSent) {
  Communicator c = world().dup("bytes");
  EXPECT_EQ(c.bytes_sent(), 0u);
  std::vector<float> a(10, 1.0f), b(10);
  c.all_reduce(a.data(), b.data(), 10, DType::f32, ReduceOp::sum);
  EXPECT_EQ(c.bytes_sent(), 40u);
  std::vector<float> gathered(10 * static_cast<std::size_t>(c.size()));
  c.all_gather(a.data(), gathered.data(), 10, DType::f32);
  EXPECT_EQ(c.bytes_sent(), 80u);
  c.broadcast(a.data(), a.data(), 10, DType::f32, 0);
  EXPECT_EQ(c.bytes_sent(), c.rank() == 0 ? 120u : 80u);
}

TEST(Communicator, RejectsBadArguments) {
  Communicator empty;
  EXPECT_FALSE(empty.valid());
  EXPECT_THROW(empty.barrier(), Error);
  float x = 0;
  try {
    world().broadcast(&x, &x, 1, DType::f32, world().size());  // no such root
    ADD_FAILURE() << "expected an error for a bad root";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::invalid_argument);
  }
}

TEST(Communicator, DestroyingPendingRequestWaits) {
  std::vector<double> v(3, world().rank() + 1.0);
  { Request pending = world().iall_reduce(v.data(), v.data(), 3, DType::f64, ReduceOp::sum); }
  const double n = world().size();
  EXPECT_EQ(v[2], n * (n + 1) / 2);
}

}  // namespace dtrain::test
