// Collectives on device buffers: NCCL (argument "nccl", one GPU per rank, run at 1 rank) and
// MPI staged through pinned host memory (argument "staged", any number of ranks on one GPU,
// run at 1-4 ranks). Every collective of the Communicator contract, the in-place forms,
// non-blocking requests and split groups, on exact small-integer values. Without a GPU the
// program checks that asking for a device communicator fails cleanly (Errc::unavailable)
// and exits with CTest's skip code 77 on every rank.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "comm/nccl_loader.hpp"
#include "dtrain/comm/runtime.hpp"
#include "dtrain/core/error.hpp"
#include "dtrain/device/device.hpp"

namespace {

using dtrain::Communicator;
using dtrain::CopyKind;
using dtrain::DType;
using dtrain::ReduceOp;

int failures = 0;

void check(bool ok, const std::string& what, int rank) {
  if (!ok) {
    ++failures;
    std::fprintf(stderr, "[rank %d] FAILED: %s\n", rank, what.c_str());
  }
}

// A device buffer of floats with host-side set/get.
class Buf {
 public:
  Buf(dtrain::Device& dev, std::size_t n) : dev_(dev), n_(n), mem_(dev, n * sizeof(float)) {}
  float* get() { return mem_.as<float>(); }
  void set(const std::vector<float>& v) {
    dev_.copy(mem_.data(), v.data(), v.size() * sizeof(float), CopyKind::host_to_device);
  }
  std::vector<float> host() {
    std::vector<float> v(n_);
    dev_.copy(v.data(), mem_.data(), n_ * sizeof(float), CopyKind::device_to_host);
    return v;
  }

 private:
  dtrain::Device& dev_;
  std::size_t n_;
  dtrain::DeviceBuffer mem_;
};

// value of element i on rank r: small integers, so every sum is exact in fp32
float value(int r, std::size_t i) { return static_cast<float>((r + 1) * 10 + static_cast<int>(i % 7)); }

void run_checks(Communicator& c, dtrain::Device& gpu) {
  const int P = c.size(), r = c.rank();
  const std::size_t n = 1000;
  std::vector<float> mine(n);
  for (std::size_t i = 0; i < n; ++i) mine[i] = value(r, i);
  auto sum_of = [&](std::size_t i) {
    float s = 0;
    for (int q = 0; q < P; ++q) s += value(q, i);
    return s;
  };

  {  // all_reduce: out of place, in place, avg, max
    Buf a(gpu, n), b(gpu, n);
    a.set(mine);
    c.all_reduce(a.get(), b.get(), n, DType::f32, ReduceOp::sum);
    auto got = b.host();
    bool ok = true;
    for (std::size_t i = 0; i < n; ++i) ok &= got[i] == sum_of(i);
    check(ok, "all_reduce sum", r);
    c.all_reduce(a.get(), a.get(), n, DType::f32, ReduceOp::avg);
    got = a.host();
    ok = true;
    for (std::size_t i = 0; i < n; ++i) {  // NCCL may scale before summing: last-bit slack
      const float want = sum_of(i) / static_cast<float>(P);
      ok &= std::fabs(got[i] - want) <= 1e-6f * want;
    }
    check(ok, "all_reduce avg in place", r);
    a.set(mine);
    c.all_reduce(a.get(), a.get(), n, DType::f32, ReduceOp::max);
    got = a.host();
    ok = true;
    for (std::size_t i = 0; i < n; ++i) ok &= got[i] == value(P - 1, i);
    check(ok, "all_reduce max", r);
  }
  {  // reduce_scatter: out of place, NCCL in place, dtrain in place (result at the start)
    const std::size_t k = 64;
    std::vector<float> full(k * P);
    for (std::size_t i = 0; i < full.size(); ++i) full[i] = value(r, i);
    Buf s(gpu, k * P), out(gpu, k);
    s.set(full);
    c.reduce_scatter(s.get(), out.get(), k, DType::f32, ReduceOp::sum);
    auto got = out.host();
    bool ok = true;
    for (std::size_t i = 0; i < k; ++i) ok &= got[i] == sum_of(r * k + i);
    check(ok, "reduce_scatter", r);
    c.reduce_scatter(s.get(), s.get() + r * k, k, DType::f32, ReduceOp::sum);
    got = s.host();
    ok = true;
    for (std::size_t i = 0; i < k; ++i) ok &= got[r * k + i] == sum_of(r * k + i);
    check(ok, "reduce_scatter in place (own block)", r);
    s.set(full);
    c.reduce_scatter(s.get(), s.get(), k, DType::f32, ReduceOp::sum);
    got = s.host();
    ok = true;
    for (std::size_t i = 0; i < k; ++i) ok &= got[i] == sum_of(r * k + i);
    check(ok, "reduce_scatter in place (at the start)", r);
  }
  {  // v-variants with uneven blocks (rank q holds q + 3 elements)
    std::vector<std::size_t> counts(P);
    for (int q = 0; q < P; ++q) counts[q] = static_cast<std::size_t>(q + 3);
    const std::size_t total = std::accumulate(counts.begin(), counts.end(), std::size_t{0});
    std::size_t at = 0;
    for (int q = 0; q < r; ++q) at += counts[q];
    std::vector<float> full(total);
    for (std::size_t i = 0; i < total; ++i) full[i] = value(r, i);
    Buf s(gpu, total), out(gpu, counts[r]);
    s.set(full);
    c.reduce_scatter_v(s.get(), out.get(), counts.data(), DType::f32, ReduceOp::sum);
    auto got = out.host();
    bool ok = true;
    for (std::size_t i = 0; i < counts[r]; ++i) ok &= got[i] == sum_of(at + i);
    check(ok, "reduce_scatter_v", r);
    Buf g(gpu, total), piece(gpu, counts[r]);
    piece.set(std::vector<float>(counts[r], static_cast<float>(r + 1)));
    c.all_gather_v(piece.get(), g.get(), counts.data(), DType::f32);
    got = g.host();
    ok = true;
    std::size_t i = 0;
    for (int q = 0; q < P; ++q)
      for (std::size_t j = 0; j < counts[q]; ++j) ok &= got[i++] == static_cast<float>(q + 1);
    check(ok, "all_gather_v", r);
  }
  {  // all_gather: out of place, NCCL in place, dtrain in place (input at the start)
    const std::size_t k = 50;
    Buf in(gpu, k), out(gpu, k * P);
    in.set(std::vector<float>(k, static_cast<float>(r + 1)));
    c.all_gather(in.get(), out.get(), k, DType::f32);
    auto expect_blocks = [&](const std::vector<float>& got) {
      bool ok = true;
      for (int q = 0; q < P; ++q)
        for (std::size_t i = 0; i < k; ++i) ok &= got[q * k + i] == static_cast<float>(q + 1);
      return ok;
    };
    check(expect_blocks(out.host()), "all_gather", r);
    std::vector<float> staged(k * P, -1.0f);
    std::fill(staged.begin() + r * k, staged.begin() + (r + 1) * k, static_cast<float>(r + 1));
    out.set(staged);
    c.all_gather(out.get() + r * k, out.get(), k, DType::f32);
    check(expect_blocks(out.host()), "all_gather in place (own block)", r);
    std::fill(staged.begin(), staged.end(), -1.0f);
    std::fill(staged.begin(), staged.begin() + k, static_cast<float>(r + 1));
    out.set(staged);
    c.all_gather(out.get(), out.get(), k, DType::f32);
    check(expect_blocks(out.host()), "all_gather in place (at the start)", r);
  }
  {  // broadcast from the last rank, reduce to rank 0
    Buf b(gpu, n);
    b.set(mine);
    c.broadcast(b.get(), b.get(), n, DType::f32, P - 1);
    auto got = b.host();
    bool ok = true;
    for (std::size_t i = 0; i < n; ++i) ok &= got[i] == value(P - 1, i);
    check(ok, "broadcast", r);
    Buf s(gpu, n), out(gpu, n);
    s.set(mine);
    c.reduce(s.get(), out.get(), n, DType::f32, ReduceOp::sum, 0);
    if (r == 0) {
      got = out.host();
      ok = true;
      for (std::size_t i = 0; i < n; ++i) ok &= got[i] == sum_of(i);
      check(ok, "reduce to root", r);
    }
  }
  {  // non-blocking: all-reduce waited, all-gather polled, a ring of send/recv
    Buf a(gpu, n);
    a.set(mine);
    dtrain::Request req = c.iall_reduce(a.get(), a.get(), n, DType::f32, ReduceOp::sum);
    req.wait();
    auto got = a.host();
    bool ok = true;
    for (std::size_t i = 0; i < n; ++i) ok &= got[i] == sum_of(i);
    check(ok, "iall_reduce", r);
    Buf in(gpu, 8), out(gpu, 8 * P);
    in.set(std::vector<float>(8, static_cast<float>(r)));
    dtrain::Request g = c.iall_gather(in.get(), out.get(), 8, DType::f32);
    while (!g.test()) {
    }
    got = out.host();
    ok = true;
    for (int q = 0; q < P; ++q) ok &= got[q * 8] == static_cast<float>(q);
    check(ok, "iall_gather polled with test()", r);
    if (P > 1) {
      Buf to(gpu, 16), from(gpu, 16);
      to.set(std::vector<float>(16, static_cast<float>(r)));
      std::vector<dtrain::Request> reqs;
      reqs.push_back(c.irecv(from.get(), 16, DType::f32, (r + P - 1) % P));
      reqs.push_back(c.isend(to.get(), 16, DType::f32, (r + 1) % P));
      dtrain::wait_all(reqs);
      check(from.host()[15] == static_cast<float>((r + P - 1) % P), "ring isend/irecv", r);
    }
  }
  {  // stream order: inputs written by device work still queued when the collective is called
    Buf a(gpu, n), b(gpu, n);
    gpu.fill(a.get(), static_cast<float>(r + 1), static_cast<std::int64_t>(n));
    c.all_reduce(a.get(), b.get(), n, DType::f32, ReduceOp::sum);
    gpu.fill(a.get(), static_cast<float>(2 * r), static_cast<std::int64_t>(n));
    dtrain::Request req = c.iall_reduce(a.get(), a.get(), n, DType::f32, ReduceOp::sum);
    req.wait();
    const auto got_b = b.host(), got_a = a.host();
    check(got_b[n - 1] == static_cast<float>(P * (P + 1) / 2), "all_reduce after queued fill", r);
    check(got_a[n - 1] == static_cast<float>(P * (P - 1)), "iall_reduce after queued fill", r);
  }
  {  // split: even and odd ranks each sum their own
    Communicator half = c.split(r % 2, r, "half");
    Buf a(gpu, 4);
    a.set(std::vector<float>(4, static_cast<float>(r)));
    half.all_reduce(a.get(), a.get(), 4, DType::f32, ReduceOp::sum);
    float want = 0;
    for (int q = r % 2; q < P; q += 2) want += static_cast<float>(q);
    check(a.host()[3] == want, "all_reduce over a split group", r);
    half.barrier();
  }
  c.barrier();
}

}  // namespace

int main(int argc, char** argv) {
  dtrain::Runtime rt(&argc, &argv);
  Communicator& world = rt.world();
  const std::string which = argc > 1 ? argv[1] : "staged";
  const auto transport = which == "nccl" ? dtrain::comm::DeviceTransport::nccl
                                         : dtrain::comm::DeviceTransport::mpi_staged;
  if (!dtrain::cuda_available()) {
    // The CPU-side half: a device communicator must be refused cleanly, on every rank.
    int ok = 0;
    try {
      dtrain::comm::device_communicator(world, transport, "world." + which);
    } catch (const dtrain::Error& e) {
      ok = e.code() == dtrain::Errc::unavailable ? 1 : 0;
      if (world.rank() == 0) std::printf("no GPU: %s\n", e.what());
    }
    world.all_reduce(&ok, &ok, 1, DType::i32, ReduceOp::min);
    if (!ok) {
      std::fprintf(stderr, "FAILED: a device communicator without a GPU was not refused cleanly\n");
      return 1;
    }
    return 77;
  }
  dtrain::Device& gpu = dtrain::select_device("cuda");
  std::unique_ptr<Communicator> made;
  try {
    made = std::make_unique<Communicator>(
        dtrain::comm::device_communicator(world, transport, "world." + which));
  } catch (const dtrain::Error& e) {
    // A plugin built without NCCL: every rank gets the same refusal, so every rank skips.
    if (e.code() != dtrain::Errc::unavailable) throw;
    if (world.rank() == 0) std::printf("skipped: %s\n", e.what());
    return 77;
  }
  Communicator& dev = *made;
  const bool expect_nccl = transport == dtrain::comm::DeviceTransport::nccl;
  check((dev.backend() == dtrain::BackendKind::nccl) == expect_nccl, "backend kind", world.rank());
  check(dev.size() == world.size() && dev.rank() == world.rank(), "same ranks as world",
        world.rank());
  run_checks(dev, gpu);
  world.all_reduce(&failures, &failures, 1, DType::i32, ReduceOp::sum);
  if (world.rank() == 0) {
    std::printf("%s device collectives at %d rank(s) on %s: %s\n", which.c_str(), world.size(),
                gpu.name().c_str(), failures ? "FAILED" : "ok");
  }
  return failures ? 1 : 0;
}
