// Pipeline schedules without MPI: all ranks' action lists run together in an event
// simulation with the executor's semantics (sends post and return, receives block), which
// shows they finish without deadlock, match every send with a receive in order, keep each
// forward before its backward, stay within the in-flight bound, and, with unit costs, idle
// as much as theory says.
#include <gtest/gtest.h>

#include <algorithm>
#include <deque>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "dtrain/core/error.hpp"
#include "dtrain/parallel/pipeline_schedule.hpp"
#include "parallel/pp/schedule.hpp"

using namespace dtrain;
using namespace dtrain::parallel;

namespace {

struct Sim {
  bool ok = true;
  std::string error;
  std::vector<int> peak_in_flight;  // per stage, activations summed over chunks
  std::vector<double> busy;         // per stage
  double makespan = 0;
};

struct Message {
  int micro_batch, sender_chunk;
  double time;
};

// Forward of a chunk costs tf / V, backward tb / V (a chunk is 1/V of a stage's layers).
Sim simulate(ScheduleKind kind, int N, int M, int V, double tf = 1, double tb = 2) {
  Sim sim;
  std::vector<std::vector<PipelineAction>> lists;
  for (int s = 0; s < N; ++s) lists.push_back(build_schedule(kind, N, s, M, V));
  std::vector<std::size_t> pc(N, 0);
  std::vector<double> clock(N, 0);
  sim.busy.assign(N, 0);
  sim.peak_in_flight.assign(N, 0);
  std::vector<int> in_flight(N, 0);
  using Key = std::tuple<int, int, bool, int>;  // src, dst, is_grad, receiver's chunk
  std::map<Key, std::deque<Message>> channels;
  using Done = std::set<std::tuple<int, int, int>>;  // stage, micro-batch, chunk
  Done fwd, bwd, got_act, got_grad;
  auto fail = [&](int s, const PipelineAction& a, const std::string& why) {
    if (!sim.ok) return;
    std::ostringstream os;
    os << "stage " << s << " action " << static_cast<int>(a.type) << " mb " << a.micro_batch
       << " chunk " << a.chunk << ": " << why;
    sim.ok = false;
    sim.error = os.str();
  };
  // The input (gradient) of (s, mb, chunk) is here: first/last piece, neighbour chunk on
  // this rank done, or received.
  auto have_input = [&](int s, int mb, int c) {
    const auto prev = pp::previous_piece(N, V, s, c);
    if (prev.stage < 0) return true;
    if (prev.stage == s) return fwd.count({s, mb, prev.chunk}) > 0;
    return got_act.count({s, mb, c}) > 0;
  };
  auto have_grad = [&](int s, int mb, int c) {
    const auto next = pp::next_piece(N, V, s, c);
    if (next.stage < 0) return true;
    if (next.stage == s) return bwd.count({s, mb, next.chunk}) > 0;
    return got_grad.count({s, mb, c}) > 0;
  };

  for (bool progress = true; progress && sim.ok;) {
    progress = false;
    for (int s = 0; s < N && sim.ok; ++s) {
      while (pc[s] < lists[s].size() && sim.ok) {
        const auto& a = lists[s][pc[s]];
        const std::tuple<int, int, int> id{s, a.micro_batch, a.chunk};
        bool blocked = false;
        switch (a.type) {
          case ActionType::forward:
            if (!have_input(s, a.micro_batch, a.chunk)) fail(s, a, "forward before its input");
            if (!fwd.insert(id).second) fail(s, a, "forward twice");
            clock[s] += tf / V;
            sim.busy[s] += tf / V;
            sim.peak_in_flight[s] = std::max(sim.peak_in_flight[s], ++in_flight[s]);
            break;
          case ActionType::backward:
            if (!fwd.count(id)) fail(s, a, "backward before forward");
            if (!have_grad(s, a.micro_batch, a.chunk)) fail(s, a, "backward before its grad");
            if (!bwd.insert(id).second) fail(s, a, "backward twice");
            clock[s] += tb / V;
            sim.busy[s] += tb / V;
            --in_flight[s];
            break;
          case ActionType::send_activation:
          case ActionType::send_grad: {
            const bool grad = a.type == ActionType::send_grad;
            if (!(grad ? bwd : fwd).count(id)) fail(s, a, "send before the data exists");
            if (a.peer < 0 || a.peer >= N || a.peer == s) fail(s, a, "bad peer");
            channels[Key{s, a.peer, grad, a.peer_chunk}].push_back(
                {a.micro_batch, a.chunk, clock[s]});
            break;
          }
          case ActionType::recv_activation:
          case ActionType::recv_grad: {
            const bool grad = a.type == ActionType::recv_grad;
            auto& q = channels[Key{a.peer, s, grad, a.chunk}];
            if (q.empty()) {
              blocked = true;
              break;
            }
            const Message m = q.front();
            q.pop_front();
            if (m.micro_batch != a.micro_batch || m.sender_chunk != a.peer_chunk)
              fail(s, a, "message out of order: got mb " + std::to_string(m.micro_batch));
            (grad ? got_grad : got_act).insert(id);
            clock[s] = std::max(clock[s], m.time);
            break;
          }
        }
        if (blocked) break;
        ++pc[s];
        progress = true;
      }
    }
  }
  for (int s = 0; s < N && sim.ok; ++s)
    if (pc[s] != lists[s].size()) {
      sim.ok = false;
      sim.error = "deadlock: stage " + std::to_string(s) + " stuck at action " +
                  std::to_string(pc[s]);
    }
  for (const auto& [key, q] : channels)
    if (sim.ok && !q.empty()) {
      sim.ok = false;
      sim.error = "a message was never received";
    }
  if (sim.ok && (fwd.size() != static_cast<std::size_t>(N * M * V) || bwd.size() != fwd.size())) {
    sim.ok = false;
    sim.error = "wrong number of forwards/backwards";
  }
  sim.makespan = *std::max_element(clock.begin(), clock.end());
  return sim;
}

std::vector<int> micro_batch_counts(int N, bool multiples_only) {
  std::set<int> ms = {N, 2 * N, 3 * N, 4 * N};
  if (!multiples_only)
    for (int m : {1, 2, 3, 5, N + 1, 2 * N + 3}) ms.insert(m);
  return {ms.begin(), ms.end()};
}

}  // namespace

TEST(PipelineSchedule, GpipeAnd1F1BRunCleanly) {
  for (auto kind : {ScheduleKind::gpipe, ScheduleKind::one_f_one_b})
    for (int N = 1; N <= 8; ++N)
      for (int M : micro_batch_counts(N, false)) {
        SCOPED_TRACE(std::string(schedule_kind_name(kind)) + " N=" + std::to_string(N) +
                     " M=" + std::to_string(M));
        const Sim sim = simulate(kind, N, M, 1);
        ASSERT_TRUE(sim.ok) << sim.error;
        for (int s = 0; s < N; ++s) {
          EXPECT_EQ(sim.peak_in_flight[s], max_in_flight(kind, N, s, M, 1));
          if (kind == ScheduleKind::one_f_one_b) EXPECT_LE(sim.peak_in_flight[s], N - s);
          else EXPECT_EQ(sim.peak_in_flight[s], M);
          // Unit costs, free communication: every stage idles exactly the theoretical bubble.
          EXPECT_NEAR(1 - sim.busy[s] / sim.makespan, bubble_fraction(kind, N, M, 1), 1e-12);
        }
      }
}

TEST(PipelineSchedule, InterleavedRunsCleanly) {
  for (int N = 1; N <= 8; ++N)
    for (int V = 1; V <= 4; ++V)
      for (int M : micro_batch_counts(N, true)) {
        SCOPED_TRACE("N=" + std::to_string(N) + " V=" + std::to_string(V) +
                     " M=" + std::to_string(M));
        const Sim sim = simulate(ScheduleKind::interleaved, N, M, V);
        ASSERT_TRUE(sim.ok) << sim.error;
        for (int s = 0; s < N; ++s) {
          const int bound = max_in_flight(ScheduleKind::interleaved, N, s, M, V);
          EXPECT_LE(sim.peak_in_flight[s], bound);
          EXPECT_LE(bound, M * V);
          // Unit costs: the warm-up and cool-down shrink to (N-1)/V of a stage's fwd+bwd.
          const double idle = 1 - sim.busy[s] / sim.makespan;
          EXPECT_NEAR(idle, bubble_fraction(ScheduleKind::interleaved, N, M, V), 1e-12);
        }
      }
}

TEST(PipelineSchedule, CountsAndPeers) {
  const int N = 4, M = 8, V = 2;
  for (int s = 0; s < N; ++s) {
    const auto list = build_schedule(ScheduleKind::interleaved, N, s, M, V);
    int f = 0, b = 0;
    for (const auto& a : list) {
      f += a.type == ActionType::forward;
      b += a.type == ActionType::backward;
      const bool comm = a.type != ActionType::forward && a.type != ActionType::backward;
      EXPECT_EQ(comm, a.peer >= 0);
      if (a.type == ActionType::send_activation || a.type == ActionType::recv_grad)
        EXPECT_EQ(a.peer, (s + 1) % N);  // the next piece: next rank, wrapping to chunk+1
      if (a.type == ActionType::recv_activation || a.type == ActionType::send_grad)
        EXPECT_EQ(a.peer, (s + N - 1) % N);
    }
    EXPECT_EQ(f, M * V);
    EXPECT_EQ(b, M * V);
  }
  // A single stage without chunks needs no communication at all.
  for (const auto& a : build_schedule(ScheduleKind::interleaved, 1, 0, 3, 3)) EXPECT_LT(a.peer, 0);
}

TEST(PipelineSchedule, OneFOneBLastStageAlternates) {
  const auto list = build_schedule(ScheduleKind::one_f_one_b, 3, 2, 3, 1);
  std::vector<ActionType> types;
  for (const auto& a : list) types.push_back(a.type);
  using T = ActionType;
  const std::vector<T> want = {T::recv_activation, T::forward, T::backward, T::send_grad,
                               T::recv_activation, T::forward, T::backward, T::send_grad,
                               T::recv_activation, T::forward, T::backward, T::send_grad};
  EXPECT_EQ(types, want);
}

TEST(PipelineSchedule, InvalidArgumentsAreClearErrors) {
  auto code_of = [](auto&& f) {
    try {
      f();
    } catch (const Error& e) {
      return e.code();
    }
    return Errc::ok;
  };
  EXPECT_EQ(code_of([] { build_schedule(ScheduleKind::interleaved, 4, 0, 6, 2); }),
            Errc::invalid_config);
  auto message_of = [](auto&& f) {
    try {
      f();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message_of([] { validate_schedule(ScheduleKind::interleaved, 4, 6, 2); })
                .find("multiple of --pp"),
            std::string::npos);
  // a step of more micro-batches than a schedule is built for: refused before the list is
  // built (its size overflowed an int from 2^29 micro-batches)
  EXPECT_NE(message_of([] { build_schedule(ScheduleKind::gpipe, 2, 0, 1 << 29, 1); })
                .find("a smaller --global-batch"),
            std::string::npos);
  EXPECT_NE(message_of([] { validate_schedule(ScheduleKind::interleaved, 2, 1 << 19, 4); })
                .find("at most 1048576"),
            std::string::npos);
  EXPECT_NO_THROW(validate_schedule(ScheduleKind::interleaved, 2, 1 << 19, 2));
  EXPECT_EQ(code_of([] { build_schedule(ScheduleKind::one_f_one_b, 2, 0, 4, 2); }),
            Errc::invalid_config);
  EXPECT_EQ(code_of([] { build_schedule(ScheduleKind::gpipe, 2, 0, 0, 1); }),
            Errc::invalid_config);
  EXPECT_EQ(code_of([] { build_schedule(ScheduleKind::gpipe, 2, 2, 4, 1); }),
            Errc::invalid_argument);
  EXPECT_EQ(code_of([] { max_in_flight(ScheduleKind::one_f_one_b, 2, 3, 4, 1); }),
            Errc::invalid_argument);  // was min(4, 2 - 3) = -1
  EXPECT_EQ(code_of([] { parse_schedule_kind("zigzag"); }), Errc::invalid_config);
  EXPECT_EQ(parse_schedule_kind("1f1b"), ScheduleKind::one_f_one_b);
  EXPECT_EQ(bubble_fraction(ScheduleKind::gpipe, 1, 4, 1), 0.0);
  EXPECT_DOUBLE_EQ(bubble_fraction(ScheduleKind::one_f_one_b, 4, 8, 1), 3.0 / 11.0);
  EXPECT_DOUBLE_EQ(bubble_fraction(ScheduleKind::interleaved, 4, 8, 2), 3.0 / 19.0);
}

// The executor keeps micro-batch m of chunk c in activation slot m % chunk_slots()[c]: no
// forward may land in a slot whose micro-batch still waits for its backward, and the slot
// counts are exactly the peaks (one chunk: max_in_flight).
TEST(PipelineSchedule, ChunkSlotsAreNeverOverwrittenInUse) {
  struct Case {
    ScheduleKind kind;
    int V;
  };
  for (const Case k : {Case{ScheduleKind::gpipe, 1}, Case{ScheduleKind::one_f_one_b, 1},
                       Case{ScheduleKind::interleaved, 1}, Case{ScheduleKind::interleaved, 2},
                       Case{ScheduleKind::interleaved, 3}})
    for (int N = 1; N <= 6; ++N)
      for (int M : micro_batch_counts(N, k.kind == ScheduleKind::interleaved))
        for (int s = 0; s < N; ++s) {
          SCOPED_TRACE(std::string(schedule_kind_name(k.kind)) + " N=" + std::to_string(N) +
                       " V=" + std::to_string(k.V) + " M=" + std::to_string(M) +
                       " stage=" + std::to_string(s));
          const std::vector<int> slots = chunk_slots(k.kind, N, s, M, k.V);
          ASSERT_EQ(slots.size(), static_cast<std::size_t>(k.V));
          if (k.V == 1) EXPECT_EQ(slots[0], max_in_flight(k.kind, N, s, M, 1));
          std::vector<std::vector<int>> holder(k.V);  // micro-batch in each slot, -1 free
          for (int c = 0; c < k.V; ++c) holder[c].assign(slots[c], -1);
          std::vector<int> live(k.V, 0), peak(k.V, 0);
          for (const PipelineAction& a : build_schedule(k.kind, N, s, M, k.V)) {
            int& h = holder[a.chunk][a.micro_batch % slots[a.chunk]];
            if (a.type == ActionType::forward) {
              ASSERT_EQ(h, -1) << "mb " << a.micro_batch << " chunk " << a.chunk
                               << " overwrites mb " << h;
              h = a.micro_batch;
              peak[a.chunk] = std::max(peak[a.chunk], ++live[a.chunk]);
            } else if (a.type == ActionType::backward) {
              ASSERT_EQ(h, a.micro_batch);
              h = -1;
              --live[a.chunk];
            }
          }
          EXPECT_EQ(peak, slots);
        }
}
