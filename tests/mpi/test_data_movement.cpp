// all_gather(_v), broadcast and point-to-point: every dtype, in-place and not, uneven and
// zero counts, blocking and non-blocking.
#include <mpi.h>

#include <climits>
#include <numeric>

#include "collective_checks.hpp"
#include "dtrain/core/error.hpp"

namespace dtrain::test {
namespace {

std::vector<std::vector<std::size_t>> uneven_count_sets(int n) {
  std::vector<std::size_t> cyclic(n), growing(n), zeros(n, 0);
  for (int r = 0; r < n; ++r) {
    cyclic[r] = static_cast<std::size_t>((3 * r + 1) % 5);
    growing[r] = static_cast<std::size_t>(7 + 2 * r);
  }
  return {cyclic, growing, zeros};
}

}  // namespace

TEST_P(CollectiveTest, AllGather) {
  Communicator& c = world();
  const int n = c.size(), r = c.rank();
  for (DType t : all_dtypes())
    for (std::size_t count : test_counts())
      for (Placement place : kPlacements)
        for (bool blocking : {true, false}) {
          Buffer mine(count, t), recv(count * n, t);
          const void* send = mine.data();
          for (std::size_t i = 0; i < count; ++i) {
            const double v = gather_input(r, i);
            if (place == Placement::separate) mine.set(i, v);
            if (place == Placement::in_place_nccl) recv.set(r * count + i, v);
            if (place == Placement::in_place_start) recv.set(i, v);
          }
          if (place == Placement::in_place_nccl) send = recv.at(r * count);
          if (place == Placement::in_place_start) send = recv.data();
          if (blocking)
            c.all_gather(send, recv.data(), count, t);
          else
            c.iall_gather(send, recv.data(), count, t).wait();
          expect_elements(recv.data(), t, count * n,
                          [&](std::size_t j) { return gather_input(static_cast<int>(j / count), j % count); },
                          std::string(blocking ? "all_gather " : "iall_gather ") + dtype_name(t) +
                              " count=" + std::to_string(count) + " " + placement_name(place));
        }
}

TEST_P(CollectiveTest, AllGatherV) {
  Communicator& c = world();
  const int n = c.size(), r = c.rank();
  // also counts that are whole multiples of the lowered per-call limit (5)
  std::vector<std::vector<std::size_t>> count_sets = uneven_count_sets(n);
  count_sets.push_back(std::vector<std::size_t>(static_cast<std::size_t>(n), 10));
  for (const auto& counts : count_sets)
    for (DType t : all_dtypes())
      for (Placement place : kPlacements)
        for (const bool blocking : {true, false}) {
          std::vector<std::size_t> offsets(n + 1, 0);
          std::partial_sum(counts.begin(), counts.end(), offsets.begin() + 1);
          Buffer mine(counts[r], t), recv(offsets[n], t);
          const void* send = mine.data();
          for (std::size_t i = 0; i < counts[r]; ++i) {
            const double v = gather_input(r, i);
            if (place == Placement::separate) mine.set(i, v);
            if (place == Placement::in_place_nccl) recv.set(offsets[r] + i, v);
            if (place == Placement::in_place_start) recv.set(i, v);
          }
          if (place == Placement::in_place_nccl) send = recv.at(offsets[r]);
          if (place == Placement::in_place_start) send = recv.data();
          if (blocking)
            c.all_gather_v(send, recv.data(), counts.data(), t);
          else
            c.iall_gather_v(send, recv.data(), counts.data(), t).wait();  // ZeRO 3's gathers
          expect_elements(
              recv.data(), t, offsets[n],
              [&](std::size_t j) {
                int q = 0;
                while (j >= offsets[q + 1]) ++q;
                return gather_input(q, j - offsets[q]);
              },
              std::string(blocking ? "all_gather_v " : "iall_gather_v ") + dtype_name(t) + " " +
                  placement_name(place));
        }
}

TEST_P(CollectiveTest, Broadcast) {
  Communicator& c = world();
  const int n = c.size(), r = c.rank();
  for (int root : {n - 1, 0})
    for (DType t : all_dtypes())
      for (std::size_t count : test_counts())
        for (bool in_place : {false, true})
          for (bool blocking : {true, false}) {
            Buffer send(count, t), recv(count, t);
            Buffer& source = in_place ? recv : send;
            if (r == root)
              for (std::size_t i = 0; i < count; ++i) source.set(i, gather_input(root, i));
            const void* from = r == root ? source.data() : nullptr;  // unused off the root
            if (blocking)
              c.broadcast(from, recv.data(), count, t, root);
            else
              c.ibroadcast(from, recv.data(), count, t, root).wait();
            expect_elements(recv.data(), t, count, [&](std::size_t i) { return gather_input(root, i); },
                            std::string(blocking ? "broadcast" : "ibroadcast") + " from " +
                                std::to_string(root) + " " + dtype_name(t) + " count=" +
                                std::to_string(count) + (in_place ? " in-place" : ""));
          }
}

TEST_P(CollectiveTest, SendRecvRing) {
  Communicator& c = world();
  const int n = c.size(), r = c.rank();
  const int next = (r + 1) % n, prev = (r + n - 1) % n;
  for (DType t : all_dtypes())
    for (std::size_t count : test_counts()) {
      Buffer out(count, t), in(count, t);
      for (std::size_t i = 0; i < count; ++i) out.set(i, gather_input(r, i));
      const auto from_prev = [&](std::size_t i) { return gather_input(prev, i); };
      const std::string what = std::string(dtype_name(t)) + " count=" + std::to_string(count);

      // Non-blocking both ways (also a rank sending to itself when n == 1).
      Request rx = c.irecv(in.data(), count, t, prev, 7);
      Request tx = c.isend(out.data(), count, t, next, 7);
      tx.wait();
      rx.wait();
      EXPECT_FALSE(rx.valid());
      expect_elements(in.data(), t, count, from_prev, "isend/irecv ring " + what);

      if (n == 1) continue;  // a blocking send to oneself may never match
      Buffer in2(count, t);
      if (r % 2 == 0) {  // even ranks send first, odd ranks receive first: no cycle of waits
        c.send(out.data(), count, t, next, 3);
        c.recv(in2.data(), count, t, prev, 3);
      } else {
        c.recv(in2.data(), count, t, prev, 3);
        c.send(out.data(), count, t, next, 3);
      }
      expect_elements(in2.data(), t, count, from_prev, "send/recv ring " + what);
    }
  c.barrier();
}

// A tag MPI would refuse is refused before MPI sees it, with the range in the message, and
// the communicator still works after.
TEST(PointToPoint, TagOutsideMpiRangeIsRefused) {
  Communicator& c = world();
  const int peer = (c.rank() + 1) % c.size();
  float x = 1;
  std::vector<int> outside = {-1, INT_MIN};
  int* tag_ub = nullptr;
  int found = 0;
  MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &tag_ub, &found);
  ASSERT_TRUE(found && tag_ub && *tag_ub >= 32767);
  if (*tag_ub < INT_MAX) outside.push_back(*tag_ub + 1);  // MPICH's; Open MPI's is INT_MAX
  for (int tag : outside) {
    try {
      c.isend(&x, 1, DType::f32, peer, tag);
      ADD_FAILURE() << "tag " << tag << " was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("MPI_TAG_UB"), std::string::npos) << e.what();
    }
    EXPECT_THROW(c.recv(&x, 1, DType::f32, peer, tag), Error);
  }
  c.barrier();
}

// Null buffers with elements to move are refused (each rank checks its own arguments; here
// every rank passes them, so none waits); with none to move they are fine.
TEST(CollectiveArguments, NullBuffersWithElementsAreRefused) {
  Communicator& c = world();
  const int n = c.size(), peer = (c.rank() + 1) % n;
  float x[8] = {};
  std::vector<std::size_t> counts(static_cast<std::size_t>(n), 1);
  const auto refused = [](auto&& call, const char* what) {
    try {
      call();
      ADD_FAILURE() << what << " accepted a null buffer";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("null"), std::string::npos) << what << ": " << e.what();
    }
  };
  refused([&] { c.all_reduce(nullptr, x, 1, DType::f32, ReduceOp::sum); }, "all_reduce");
  refused([&] { c.all_reduce(x, nullptr, 1, DType::f32, ReduceOp::sum); }, "all_reduce recv");
  refused([&] { c.reduce_scatter(x, nullptr, 1, DType::f32, ReduceOp::sum); }, "reduce_scatter");
  refused([&] { c.reduce_scatter_v(x, x, nullptr, DType::f32, ReduceOp::sum); }, "reduce_scatter_v counts");
  refused([&] { c.all_gather(nullptr, x, 1, DType::f32); }, "all_gather");
  refused([&] { c.all_gather_v(x, nullptr, counts.data(), DType::f32); }, "all_gather_v");
  refused([&] { c.broadcast(x, nullptr, 1, DType::f32, 0); }, "broadcast");
  refused([&] { c.reduce(nullptr, x, 1, DType::f32, ReduceOp::sum, 0); }, "reduce");
  refused([&] { c.iall_reduce(x, nullptr, 1, DType::f32, ReduceOp::sum); }, "iall_reduce");
  refused([&] { c.iall_gather_v(nullptr, x, counts.data(), DType::f32); }, "iall_gather_v");
  refused([&] { c.isend(nullptr, 1, DType::f32, peer, 0); }, "isend");
  refused([&] { c.recv(nullptr, 1, DType::f32, peer, 0); }, "recv");
  // Nothing to move: null is fine (and the root's recv is all a reduce writes).
  c.all_reduce(nullptr, nullptr, 0, DType::f32, ReduceOp::sum);
  c.reduce(x, c.rank() == 0 ? x : nullptr, 1, DType::f32, ReduceOp::sum, 0);
  c.broadcast(c.rank() == 0 ? x : nullptr, x, 1, DType::f32, 0);
  c.barrier();
}

TEST_P(CollectiveTest, RequestTestPollsToCompletion) {
  Communicator& c = world();
  Buffer value(1, DType::i64);
  value.set(0, c.rank() + 1);
  Request req = c.iall_reduce(value.data(), value.data(), 1, DType::i64, ReduceOp::sum);
  while (!req.test()) {
  }
  EXPECT_FALSE(req.valid());
  EXPECT_EQ(value.get(0), c.size() * (c.size() + 1) / 2.0);
  req.wait();  // waiting on a completed request is a no-op
}

}  // namespace dtrain::test
