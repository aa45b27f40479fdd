#include "collectives.hpp"

#include <mpi.h>  // the app (not the library) times raw MPI_Allreduce for --baseline

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <vector>

#include "dtrain/comm/agreed_failure.hpp"
#include "dtrain/core/buffer.hpp"
#include "dtrain/core/timer.hpp"
#include "values.hpp"

namespace bench {
namespace {

using dtrain::DType;

// nccl-tests' bus bandwidth factors: the bytes each link moves relative to the message size.
double bus_factor(const std::string& op, int n) {
  if (op == "all_reduce") return 2.0 * (n - 1) / n;
  if (op == "all_gather" || op == "reduce_scatter") return static_cast<double>(n - 1) / n;
  return 1.0;
}

MPI_Datatype mpi_type(DType t) {
  switch (t) {
    case DType::f32: return MPI_FLOAT;
    case DType::f64: return MPI_DOUBLE;
    case DType::i32: return MPI_INT32_T;
    case DType::i64: return MPI_INT64_T;
    case DType::u8: return MPI_UINT8_T;
    default: throw std::invalid_argument("--baseline: MPI has no 16-bit float type");
  }
}

MPI_Op mpi_op(dtrain::ReduceOp op) {
  switch (op) {
    case dtrain::ReduceOp::sum: return MPI_SUM;
    case dtrain::ReduceOp::max: return MPI_MAX;
    case dtrain::ReduceOp::min: return MPI_MIN;
    default: throw std::invalid_argument("--baseline: MPI has no avg reduction");
  }
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

class Bench {
 public:
  Bench(dtrain::Communicator& comm, const std::string& op, const Options& o)
      : comm_(comm), op_(op), o_(o), es_(dtrain::dtype_size(o.dtype)),
        send_(buffer_bytes(o)), recv_(buffer_bytes(o)) {
    if (o.baseline) {
      raw_type_ = mpi_type(o.dtype);
      raw_op_ = mpi_op(o.redop);
      raw_comm_ = MPI_COMM_WORLD;
    }
  }

  // Returns the wrong elements over every size (0 without --check), the same on every rank.
  long run() {
    const int n = comm_.size();
    print_header();
    long wrong = 0;
    std::size_t last_count = 0;
    for (double size = static_cast<double>(o_.min_bytes); size <= o_.max_bytes * kSizeSlack;
         size *= o_.step_factor) {
      // The count each rank passes; "size" is the whole message (nccl-tests' convention).
      const bool per_rank = op_ == "all_gather" || op_ == "reduce_scatter";
      std::size_t count = static_cast<std::size_t>(size) / es_;
      if (per_rank) count /= static_cast<std::size_t>(n);
      if (count == 0 || count == last_count) continue;  // a factor near 1 repeats sizes
      last_count = count;
      const std::size_t bytes = count * es_ * (per_rank ? n : 1);
      Line line{bytes, count};  // per rank, as nccl-tests prints it
      for (int in_place = 0; in_place < 2; ++in_place) {
        Result& r = line.forms[in_place];
        time_form(count, in_place != 0, r);
        if (o_.check) r.wrong = check(count, in_place != 0);
        wrong += r.wrong;
      }
      print_line(line);
    }
    return wrong;
  }

 private:
  struct Result {
    double t_us = 0, mpi_us = 0, ratio = 0;  // ratio: t_mpi / t_dtrain, > 1 = dtrain faster
    bool timed_raw = false;  // false above 2^31 - 1 elements, which MPI's int count cannot pass
    long wrong = 0;
  };
  struct Line {
    std::size_t bytes, count;
    Result forms[2];  // out-of-place, in-place
  };

  char* send() { return send_.as<char>(); }
  char* recv() { return recv_.as<char>(); }

  void issue(std::size_t count, bool in_place) {
    const DType t = o_.dtype;
    const std::size_t mine = static_cast<std::size_t>(comm_.rank()) * count * es_;
    if (op_ == "all_reduce")
      comm_.all_reduce(in_place ? recv() : send(), recv(), count, t, o_.redop);
    else if (op_ == "all_gather")
      comm_.all_gather(in_place ? recv() + mine : send(), recv(), count, t);
    else if (op_ == "reduce_scatter")
      comm_.reduce_scatter(in_place ? recv() : send(), in_place ? recv() + mine : recv(), count, t,
                           o_.redop);
    else
      comm_.broadcast(in_place ? recv() : send(), recv(), count, t, o_.root);
  }

  void issue_raw(std::size_t count, bool in_place) {
    MPI_Allreduce(in_place ? MPI_IN_PLACE : send(), recv(), static_cast<int>(count), raw_type_,
                  raw_op_, raw_comm_);
  }

  template <class F>
  double time_once(F&& f) {
    comm_.barrier();
    dtrain::Stopwatch watch;
    f();
    return watch.seconds() * 1e6;
  }

  // Times dtrain (and raw MPI when asked) alternately, so both see the same machine state.
  void time_form(std::size_t count, bool in_place, Result& r) {
    const bool raw = o_.baseline && count <= 0x7fffffff;
    std::vector<double> t(static_cast<std::size_t>(o_.iters)), t_raw(t.size());
    for (int it = -o_.warmup; it < o_.iters; ++it) {
      // Alternate which goes first, so neither always inherits the other's cache state.
      double us = 0, us_raw = 0;
      const bool raw_first = raw && (it & 1);
      if (raw_first) us_raw = time_once([&] { issue_raw(count, in_place); });
      us = time_once([&] { issue(count, in_place); });
      if (raw && !raw_first) us_raw = time_once([&] { issue_raw(count, in_place); });
      if (it >= 0) {
        t[static_cast<std::size_t>(it)] = us;
        t_raw[static_cast<std::size_t>(it)] = us_raw;
      }
    }
    // An iteration lasts as long as its slowest rank.
    comm_.all_reduce(t.data(), t.data(), t.size(), DType::f64, dtrain::ReduceOp::max);
    comm_.all_reduce(t_raw.data(), t_raw.data(), t_raw.size(), DType::f64, dtrain::ReduceOp::max);
    r.t_us = median(t);
    r.timed_raw = raw;
    if (!raw) return;
    r.mpi_us = median(t_raw);
    // Each raw call ran right next to its dtrain call: the median of the pairwise ratios
    // cancels slow drifts of the machine (other jobs, page-fault bursts) better.
    std::vector<double> ratios(t.size());
    for (std::size_t i = 0; i < t.size(); ++i) ratios[i] = t_raw[i] / t[i];
    r.ratio = median(ratios);
  }

  long check(std::size_t count, bool in_place) {
    const int n = comm_.size(), me = comm_.rank();
    const DType t = o_.dtype;
    const std::size_t mine = static_cast<std::size_t>(me) * count;
    long wrong = 0;
    // The receive buffer poisoned first (every bit set: NaN, or an integer no result takes),
    // so an element the checked call did not write counts as wrong, where the timed calls
    // before it had left right answers there.
    const bool whole = op_ == "all_gather" || (op_ == "reduce_scatter" && in_place);
    std::memset(recv(), 0xFF, count * es_ * (whole ? static_cast<std::size_t>(n) : 1));
    if (op_ == "all_reduce") {
      void* in = in_place ? recv() : send();
      for (std::size_t i = 0; i < count; ++i) set(in, t, i, reduce_input(me, i));
      issue(count, in_place);
      for (std::size_t i = 0; i < count; ++i) wrong += get(recv(), t, i) != reduce_result(n, i, o_.redop, t);
    } else if (op_ == "reduce_scatter") {
      void* in = in_place ? recv() : send();
      for (std::size_t j = 0; j < count * n; ++j) set(in, t, j, reduce_input(me, j));
      issue(count, in_place);
      const char* out = in_place ? recv() + mine * es_ : recv();
      for (std::size_t i = 0; i < count; ++i)
        wrong += get(out, t, i) != reduce_result(n, mine + i, o_.redop, t);
    } else if (op_ == "all_gather") {
      char* in = in_place ? recv() + mine * es_ : send();
      for (std::size_t i = 0; i < count; ++i) set(in, t, i, payload(me, i));
      issue(count, in_place);
      for (std::size_t j = 0; j < count * n; ++j)
        wrong += get(recv(), t, j) != payload(static_cast<int>(j / count), j % count);
    } else {
      void* in = in_place ? recv() : send();
      if (me == o_.root)
        for (std::size_t i = 0; i < count; ++i) set(in, t, i, payload(o_.root, i));
      issue(count, in_place);
      for (std::size_t i = 0; i < count; ++i) wrong += get(recv(), t, i) != payload(o_.root, i);
    }
    comm_.all_reduce(&wrong, &wrong, 1, DType::i64, dtrain::ReduceOp::sum);
    return wrong;
  }

  void print_header() const {
    if (comm_.rank() != 0) return;
    const bool reduces = op_ == "all_reduce" || op_ == "reduce_scatter";
    std::printf("# dtrain-bench %s: %d ranks, dtype %s, redop %s, iters %d, warmup %d "
                "(times: median over iterations of the slowest rank)\n",
                op_.c_str(), comm_.size(), dtrain::dtype_name(o_.dtype),
                reduces ? dtrain::reduce_op_name(o_.redop) : "none", o_.iters, o_.warmup);
    std::printf("#%11s %12s %5s %6s", "size(B)", "count", "type", "redop");
    for (const char* form : {"out-of-place", "in-place"}) {
      std::printf(" | %-12s %10s %8s %8s", form, "time_us", "algbw", "busbw");
      if (o_.check) std::printf(" %7s", "#wrong");
      if (o_.baseline) std::printf(" %10s %6s", "mpi_us", "ratio");
    }
    std::printf("\n");
  }

  void print_line(const Line& line) const {
    if (comm_.rank() != 0) return;
    const bool reduces = op_ == "all_reduce" || op_ == "reduce_scatter";
    std::printf("%12zu %12zu %5s %6s", line.bytes, line.count, dtrain::dtype_name(o_.dtype),
                reduces ? dtrain::reduce_op_name(o_.redop) : "none");
    for (const Result& r : line.forms) {
      const double algbw = static_cast<double>(line.bytes) / (r.t_us * 1e3);  // GB/s
      std::printf(" | %-12s %10.1f %8.3f %8.3f", "", r.t_us, algbw,
                  algbw * bus_factor(op_, comm_.size()));
      if (o_.check) std::printf(" %7ld", r.wrong);
      if (o_.baseline && !r.timed_raw) std::printf(" %10s %6s", "-", "-");
      else if (o_.baseline) std::printf(" %10.1f %6.3f", r.mpi_us, r.ratio);
    }
    std::printf("\n");
    std::fflush(stdout);
  }

  dtrain::Communicator& comm_;
  std::string op_;
  const Options& o_;
  std::size_t es_;
  dtrain::AlignedBuffer send_, recv_;  // allocated (and touched) once at the largest size
  MPI_Datatype raw_type_ = MPI_DATATYPE_NULL;
  MPI_Op raw_op_ = MPI_OP_NULL;
  MPI_Comm raw_comm_ = MPI_COMM_NULL;
};

}  // namespace

long run_collective(dtrain::Communicator& comm, const std::string& op, const Options& options) {
  // Buffers that one rank cannot allocate fail every rank, which would otherwise wait for it.
  dtrain::LocalFailure failure;
  std::unique_ptr<Bench> bench;
  try {
    bench = std::make_unique<Bench>(comm, op, options);
  } catch (const std::exception& e) {
    failure.record(e);
  }
  failure.agree(comm, "setting up " + op);
  return bench->run();
}

}  // namespace bench
