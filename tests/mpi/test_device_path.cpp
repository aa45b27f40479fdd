// The Trainer's device-buffer data path, run on the CPU. On a GPU the Trainer splits its
// groups from a communicator that routes each call by its buffers: device buffers to a device
// transport (NCCL, with point-to-point staged through MPI; or MPI staged throughout), host
// buffers to MPI (comm/nccl_loader.hpp). Here a test transport plays the GPU: "device memory"
// is every live allocation of the CPU device, and the transport moves it with MPI while
// counting what it was given. So every layout checks, without a GPU, that
//   - gradients, parameters and activations take the device path, losses and norms the host;
//   - no call mixes host and device buffers (the router refuses those, so the run would fail);
//   - point-to-point never reaches the NCCL side (no tags there);
//   - the losses are the bits of the plain MPI run.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "comm/nccl_loader.hpp"
#include "device/cpu/cpu_device.hpp"
#include "dtrain/core/error.hpp"
#include "dtrain/device/device.hpp"
#include "dtrain/parallel/device_world.hpp"
#include "dtrain/parallel/param_gather.hpp"
#include "dtrain/parallel/piece_gather.hpp"
#include "dtrain/train/trainer.hpp"
#include "test_support.hpp"
#include "train_fixtures.hpp"

using namespace dtrain;
using dtrain::test::world;

namespace {

struct Counts {
  long collectives = 0;      // calls reaching a transport's collectives
  long nccl_p2p = 0;         // send/recv reaching the nccl side: must stay 0
  long staged_p2p = 0;       // send/recv reaching the mpi_staged side
  long collective_bytes = 0;
};
Counts counts;

std::size_t total(const std::size_t* counts_per_rank, int n) {
  std::size_t t = 0;
  for (int r = 0; r < n; ++r) t += counts_per_rank[r];
  return t;
}

class HostRequest final : public comm::DeviceRequest {
 public:
  explicit HostRequest(comm::RequestPtr r) : r_(std::move(r)) {}
  void wait() override { r_->wait(); }
  bool test() override { return r_->test(); }

 private:
  comm::RequestPtr r_;
};
comm::DeviceRequestPtr wrap(comm::RequestPtr r) { return std::make_unique<HostRequest>(std::move(r)); }

// A transport that moves "device" (CPU device) buffers with the host backend and counts.
class CountingTransport final : public comm::DeviceBackend {
 public:
  CountingTransport(comm::Backend& host, comm::DeviceTransport t) : host_(host), t_(t) {}
  BackendKind kind() const override {
    return t_ == comm::DeviceTransport::nccl ? BackendKind::nccl : BackendKind::mpi;
  }

  void all_reduce(const void* s, void* r, std::size_t n, DType t, ReduceOp op, void* st) override {
    collective(n, t);
    host_.all_reduce(s, r, n, t, op, st);
  }
  void reduce_scatter(const void* s, void* r, std::size_t n, DType t, ReduceOp op,
                      void* st) override {
    collective(n, t);
    host_.reduce_scatter(s, r, n, t, op, st);
  }
  void reduce_scatter_v(const void* s, void* r, const std::size_t* n, DType t, ReduceOp op,
                        void* st) override {
    collective(total(n, host_.size()), t);
    host_.reduce_scatter_v(s, r, n, t, op, st);
  }
  void all_gather(const void* s, void* r, std::size_t n, DType t, void* st) override {
    collective(n, t);
    host_.all_gather(s, r, n, t, st);
  }
  void all_gather_v(const void* s, void* r, const std::size_t* n, DType t, void* st) override {
    collective(total(n, host_.size()), t);
    host_.all_gather_v(s, r, n, t, st);
  }
  void broadcast(const void* s, void* r, std::size_t n, DType t, int root, void* st) override {
    collective(n, t);
    host_.broadcast(s, r, n, t, root, st);
  }
  void reduce(const void* s, void* r, std::size_t n, DType t, ReduceOp op, int root,
              void* st) override {
    collective(n, t);
    host_.reduce(s, r, n, t, op, root, st);
  }
  void send(const void* b, std::size_t n, DType t, int peer, int tag, void* st) override {
    p2p();
    host_.send(b, n, t, peer, tag, st);
  }
  void recv(void* b, std::size_t n, DType t, int peer, int tag, void* st) override {
    p2p();
    host_.recv(b, n, t, peer, tag, st);
  }
  void barrier(void* st) override { host_.barrier(st); }

  comm::DeviceRequestPtr iall_reduce(const void* s, void* r, std::size_t n, DType t, ReduceOp op,
                                     void* st) override {
    collective(n, t);
    return wrap(host_.iall_reduce(s, r, n, t, op, st));
  }
  comm::DeviceRequestPtr ireduce_scatter(const void* s, void* r, std::size_t n, DType t,
                                         ReduceOp op, void* st) override {
    collective(n, t);
    return wrap(host_.ireduce_scatter(s, r, n, t, op, st));
  }
  comm::DeviceRequestPtr ireduce_scatter_v(const void* s, void* r, const std::size_t* n, DType t,
                                           ReduceOp op, void* st) override {
    collective(total(n, host_.size()), t);
    return wrap(host_.ireduce_scatter_v(s, r, n, t, op, st));
  }
  comm::DeviceRequestPtr iall_gather(const void* s, void* r, std::size_t n, DType t,
                                     void* st) override {
    collective(n, t);
    return wrap(host_.iall_gather(s, r, n, t, st));
  }
  comm::DeviceRequestPtr iall_gather_v(const void* s, void* r, const std::size_t* n, DType t,
                                       void* st) override {
    collective(total(n, host_.size()), t);
    return wrap(host_.iall_gather_v(s, r, n, t, st));
  }
  comm::DeviceRequestPtr ibroadcast(const void* s, void* r, std::size_t n, DType t, int root,
                                    void* st) override {
    collective(n, t);
    return wrap(host_.ibroadcast(s, r, n, t, root, st));
  }
  comm::DeviceRequestPtr isend(const void* b, std::size_t n, DType t, int peer, int tag,
                               void* st) override {
    p2p();
    return wrap(host_.isend(b, n, t, peer, tag, st));
  }
  comm::DeviceRequestPtr irecv(void* b, std::size_t n, DType t, int peer, int tag,
                               void* st) override {
    p2p();
    return wrap(host_.irecv(b, n, t, peer, tag, st));
  }

 private:
  void collective(std::size_t n, DType t) {
    ++counts.collectives;
    counts.collective_bytes += static_cast<long>(n * dtype_size(t));
  }
  void p2p() { ++(t_ == comm::DeviceTransport::nccl ? counts.nccl_p2p : counts.staged_p2p); }

  comm::Backend& host_;
  comm::DeviceTransport t_;
};

// How the ranks' "GPUs" look to the transport choice.
enum class Gpus { one_each, shared, none_on_last_rank };

class CpuAsDevice final : public comm::DeviceTransports {
 public:
  explicit CpuAsDevice(Gpus gpus) : gpus_(gpus) {}
  bool on_device(const void* p) const override {
    return static_cast<const CpuDevice&>(cpu_device()).contains(p);
  }
  std::unique_ptr<comm::DeviceBackend> make(comm::Backend& host,
                                            comm::DeviceTransport t) const override {
    return std::make_unique<CountingTransport>(host, t);
  }
  bool nccl_gpu(std::uint8_t uuid[16]) const override {
    const int r = world().rank();
    if (gpus_ == Gpus::none_on_last_rank && r == world().size() - 1) return false;
    std::fill(uuid, uuid + 16, std::uint8_t{0});
    if (gpus_ == Gpus::one_each) uuid[0] = static_cast<std::uint8_t>(r);
    return true;
  }

 private:
  Gpus gpus_;
};

// The test transports for the life of one scope, and DTRAIN_DEVICE_COMM as given.
struct DevicePath {
  explicit DevicePath(const char* transport, Gpus gpus = Gpus::one_each) {
    comm::override_device_transports(std::make_shared<CpuAsDevice>(gpus));
    setenv("DTRAIN_DEVICE_COMM", transport, 1);
    counts = Counts{};
  }
  ~DevicePath() {
    comm::override_device_transports(nullptr);
    unsetenv("DTRAIN_DEVICE_COMM");
  }
};

train::TrainConfig base(int tp, int pp) {
  train::TrainConfig c = test::tiny_train_config();
  c.steps = 6;
  c.tp = tp;
  c.pp = pp;
  const int dp = world().size() / (tp * pp);
  c.global_batch = static_cast<long>(c.micro_batch) * dp * (pp > 1 ? 4 : 2);
  return c;
}

// The same run over plain MPI and over the device path: equal bits, and the device path
// carried the bulk data. Returns the device path's counts.
Counts expect_device_path_matches(const train::TrainConfig& cfg, const char* transport,
                                  const std::string& what) {
  const std::vector<double> plain = test::train_losses(cfg, world());
  std::vector<double> routed;
  Counts seen;
  {
    DevicePath on(transport);
    routed = test::train_losses(cfg, world());
    seen = counts;
  }
  EXPECT_EQ(routed, plain) << what;
  EXPECT_EQ(seen.nccl_p2p, 0) << what << ": point-to-point reached the nccl side";
  return seen;
}

bool multi_rank() { return world().size() > 1; }

}  // namespace

// The router itself: host buffers to MPI, device buffers to the transport, a mix refused.
TEST(DevicePath, RoutesEachCallByItsBuffers) {
  DevicePath on("nccl");
  Communicator dev = comm::device_communicator(world(), comm::DeviceTransport::nccl, "dev");
  DeviceBuffer buf(cpu_device(), 8 * sizeof(float));
  float host[8] = {1, 1, 1, 1, 1, 1, 1, 1};

  dev.all_reduce(host, host, 8, DType::f32, ReduceOp::sum);
  EXPECT_EQ(counts.collectives, 0) << "host buffers went to the device transport";
  EXPECT_EQ(host[7], static_cast<float>(world().size()));

  cpu_device().copy(buf.data(), host, sizeof host, CopyKind::host_to_device);
  dev.all_reduce(buf.data(), buf.data(), 8, DType::f32, ReduceOp::sum);
  EXPECT_EQ(counts.collectives, 1);
  EXPECT_EQ(counts.collective_bytes, static_cast<long>(sizeof host));
  EXPECT_EQ(buf.as<float>()[7], static_cast<float>(world().size() * world().size()));

  // The second half of a device block is still device memory.
  dev.broadcast(buf.as<float>() + 4, buf.as<float>() + 4, 4, DType::f32, 0);
  EXPECT_EQ(counts.collectives, 2);

  // A rank's empty share has no say, even where it points one past its block (ZeRO's
  // parameter gather hands the ranks that own nothing of a unit such a pointer).
  {
    DeviceBuffer gathered(cpu_device(), 8 * sizeof(float));
    std::vector<std::size_t> shares(static_cast<std::size_t>(world().size()), 0);
    shares[0] = 8;
    const float* mine = world().rank() == 0 ? buf.as<float>() : buf.as<float>() + 8;
    dev.all_gather_v(mine, gathered.data(), shares.data(), DType::f32);
    EXPECT_EQ(counts.collectives, 3) << "an empty share sent the gather to the host";
  }
  // Nor do a rooted call's root-only buffers off the root (broadcast's send, reduce's recv),
  // whatever they point at.
  {
    const bool root = world().rank() == 0;
    DeviceBuffer reduced(cpu_device(), 8 * sizeof(float));
    dev.broadcast(root ? buf.as<float>() : host, buf.data(), 8, DType::f32, 0);
    dev.reduce(buf.data(), root ? reduced.data() : host, 8, DType::f32, ReduceOp::sum, 0);
    EXPECT_EQ(counts.collectives, 5) << "an unused buffer decided a rooted call's route";
  }

  try {
    dev.all_reduce(host, buf.data(), 8, DType::f32, ReduceOp::sum);
    ADD_FAILURE() << "a host send buffer with a device recv buffer was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::invalid_argument);
    EXPECT_NE(std::string(e.what()).find("same side"), std::string::npos) << e.what();
  }

  // Point-to-point of device buffers goes to the staged side under nccl.
  if (multi_rank()) {
    const int right = (world().rank() + 1) % world().size();
    const int left = (world().rank() + world().size() - 1) % world().size();
    Request r = dev.irecv(buf.as<float>(), 4, DType::f32, left, 7);
    dev.send(buf.as<float>() + 4, 4, DType::f32, right, 7);
    r.wait();
    EXPECT_EQ(counts.staged_p2p, 2);
    EXPECT_EQ(counts.nccl_p2p, 0);
  }
}

// ZeRO 1/2 share updated bf16 parameters as 16-bit words: half the bytes, the same values.
TEST(DevicePath, RoundedPiecesTravelAsSixteenBitWords) {
  DevicePath on("nccl");
  Communicator dev = comm::device_communicator(world(), comm::DeviceTransport::nccl, "dev");
  const std::size_t P = static_cast<std::size_t>(world().size()), per = 1000, n = per * P;
  const std::size_t r = static_cast<std::size_t>(world().rank());
  DeviceBuffer arena(cpu_device(), n * sizeof(float));
  float* a = arena.as<float>();
  auto value = [](std::size_t i) { return static_cast<float>(i % 97) * 0.25f - 3.0f; };  // exact
  for (std::size_t i = r * per; i < (r + 1) * per; ++i) a[i] = value(i);
  a[r * per] = 1.0f + 1.0f / 4096;  // not a bf16 value: arrives rounded to 1
  const std::vector<std::size_t> shares(P, per);
  parallel::PieceGather share;
  share.all_gather_v(dev, &cpu_device(), a, {0, n}, {r * per, (r + 1) * per}, shares.data(),
                     DType::bf16);
  EXPECT_EQ(counts.collective_bytes, static_cast<long>(n * 2)) << "not 16-bit words";
  for (std::size_t i = 0; i < n; ++i) {
    ASSERT_EQ(a[i], i % per == 0 ? 1.0f : value(i)) << "element " << i;
  }
}

// ZeRO 3 gathers rounded units as 16-bit words too, and widens them into the arena also when
// poll() (called while a block computes) has seen the gather finish.
TEST(DevicePath, ZeroThreeGathersSixteenBitWordsAndWidensThem) {
  DevicePath on("nccl");
  Communicator routed = comm::device_communicator(world(), comm::DeviceTransport::nccl, "dev");
  const std::size_t P = static_cast<std::size_t>(world().size()), per = 512, unit = per * P;
  const std::size_t r = static_cast<std::size_t>(world().rank());
  DeviceBuffer arena(cpu_device(), 2 * unit * sizeof(float));
  float* a = arena.as<float>();
  auto value = [](std::size_t i) { return static_cast<float>(i % 61) * 0.5f - 7.0f; };  // exact
  for (std::size_t u = 0; u < 2; ++u) {
    for (std::size_t i = u * unit + r * per; i < u * unit + (r + 1) * per; ++i) a[i] = value(i);
  }
  parallel::ParamGather gather(routed, cpu_device(), a, {{0, unit}, {unit, 2 * unit}},
                               {std::vector<std::size_t>(P, per), std::vector<std::size_t>(P, per)});
  gather.set_wire(DType::bf16);
  counts = Counts{};
  gather.acquire(0, 1);  // unit 1 is prefetched
  for (int i = 0; i < 200; ++i) {  // as between a block's ops: the prefetch finishes here
    gather.poll();
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  gather.acquire(1, -1);
  for (std::size_t i = 0; i < 2 * unit; ++i) ASSERT_EQ(a[i], value(i)) << "element " << i;
  gather.release(0);
  gather.release(1);
  EXPECT_EQ(counts.collective_bytes, static_cast<long>(2 * unit * 2)) << "not 16-bit words";
}

TEST(DevicePath, ChoosesNcclUnlessAskedOtherwise) {
  {
    DevicePath on("auto");
    EXPECT_EQ(comm::choose_device_transport(world()), comm::DeviceTransport::nccl);
  }
  {  // every rank of this test runs on one node: a shared GPU rules NCCL out
    DevicePath on("auto", Gpus::shared);
    EXPECT_EQ(comm::choose_device_transport(world()), multi_rank()
                                                          ? comm::DeviceTransport::mpi_staged
                                                          : comm::DeviceTransport::nccl);
  }
  {
    DevicePath on("auto", Gpus::none_on_last_rank);
    EXPECT_EQ(comm::choose_device_transport(world()), comm::DeviceTransport::mpi_staged);
  }
  {
    DevicePath on("nccl", Gpus::shared);  // asked for: taken as given
    EXPECT_EQ(comm::choose_device_transport(world()), comm::DeviceTransport::nccl);
  }
  {  // asked for where a rank has no GPU: every rank refuses, naming it (the others used to
     // wait in NCCL's set-up for it)
    DevicePath on("nccl", Gpus::none_on_last_rank);
    try {
      comm::choose_device_transport(world());
      ADD_FAILURE() << "nccl was taken with a rank that has no GPU";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), Errc::unavailable);
      const std::string rank = "rank " + std::to_string(world().size() - 1) + " of this group has no NCCL or no GPU";
      EXPECT_NE(std::string(e.what()).find(rank), std::string::npos) << e.what();
    }
  }
  {  // asked differently on different ranks: every rank refuses, none waits for the others
    DevicePath on(world().rank() == 0 ? "nccl" : "mpi_staged");
    if (multi_rank()) {
      EXPECT_THROW(comm::choose_device_transport(world()), Error);
    } else {
      EXPECT_EQ(comm::choose_device_transport(world()), comm::DeviceTransport::nccl);
    }
  }
  {
    DevicePath on("mpi_staged");
    EXPECT_EQ(comm::choose_device_transport(world()), comm::DeviceTransport::mpi_staged);
  }
  {
    DevicePath on("gloo");
    EXPECT_THROW(comm::choose_device_transport(world()), Error);
  }
}

TEST(DevicePath, DataParallelEveryZeroStage) {
  for (int zero = 0; zero <= 3; ++zero) {
    train::TrainConfig cfg = base(1, 1);
    cfg.zero = zero;
    const Counts c = expect_device_path_matches(cfg, "auto", "ZeRO " + std::to_string(zero));
    if (multi_rank()) EXPECT_GT(c.collectives, 0) << "ZeRO " << zero;
  }
}

TEST(DevicePath, DeterministicExchangeIsStagedPointToPoint) {
  for (int zero : {0, 2, 3}) {
    train::TrainConfig cfg = base(1, 1);
    cfg.deterministic = true;
    cfg.zero = zero;
    const Counts c =
        expect_device_path_matches(cfg, "auto", "deterministic ZeRO " + std::to_string(zero));
    if (multi_rank()) EXPECT_GT(c.staged_p2p, 0) << "ZeRO " << zero;
  }
}

TEST(DevicePath, TensorParallelWithSequenceParallel) {
  if (world().size() % 2 != 0) GTEST_SKIP() << "needs an even number of ranks";
  train::TrainConfig cfg = base(2, 1);
  cfg.sequence_parallel = true;
  const Counts c = expect_device_path_matches(cfg, "auto", "tp 2, sequence parallel");
  EXPECT_GT(c.collectives, 0);
}

TEST(DevicePath, PipelineTiedEmbeddingsBothTransports) {
  if (world().size() % 2 != 0) GTEST_SKIP() << "needs an even number of ranks";
  train::TrainConfig cfg = base(1, 2);
  cfg.tie_embeddings = true;
  cfg.zero = world().size() > 2 ? 1 : 0;
  for (const char* transport : {"nccl", "mpi_staged"}) {
    const Counts c = expect_device_path_matches(cfg, transport, std::string("pp 2, ") + transport);
    EXPECT_GT(c.staged_p2p, 0) << transport << ": activations did not take the device path";
    EXPECT_GT(c.collectives, 0) << transport << ": the tied embedding's sum did not";
  }
}

TEST(DevicePath, MixedPrecision) {
  for (const char* precision : {"bf16", "fp16"}) {
    train::TrainConfig cfg = base(1, 1);
    cfg.precision = precision;
    cfg.zero = 1;
    const Counts c = expect_device_path_matches(cfg, "auto", precision);
    if (multi_rank()) EXPECT_GT(c.collectives, 0) << precision << ": the gradients did not take the device path";
  }
}

// --device cuda where one rank has no GPU (here: the only rank asking for one, on a machine
// without; a Trainer would refuse the differing options first): every rank fails with
// Errc::unavailable instead of some waiting for the others.
TEST(DevicePath, DeviceMissingOnOneRankFailsEveryRank) {
  if (cuda_available()) GTEST_SKIP() << "this machine has a GPU";
  try {
    parallel::agreed_device(world().rank() == 0 ? "cuda" : "cpu", world(), "--device");
    ADD_FAILURE() << "a rank without its device went on";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::unavailable) << e.what();
  }
}

// A checkpoint written through the device path at ZeRO 3 resumes through it bit for bit,
// with the arena and moments staged through host copies as on a GPU (HDF5 cannot reach
// device memory).
TEST(DevicePath, CheckpointSavedAndResumed) {
  const std::string dir = test::fresh_dir(world(), "device_path", "ckpt", world().size());
  train::TrainConfig cfg = base(1, 1);
  cfg.zero = 3;
  cfg.steps = 8;
  const std::vector<double> whole = test::train_losses(cfg, world());

  DevicePath on("auto");
  setenv("DTRAIN_TEST_CKPT_STAGE_THROUGH_HOST", "1", 1);
  cfg.save_dir = dir;
  cfg.steps = 4;
  {
    train::Trainer t(cfg, world());
    for (long s = 0; s < cfg.steps; ++s) t.train_step();
    t.save_checkpoint();
  }
  cfg.steps = 8;
  cfg.resume = "auto";
  train::Trainer t(cfg, world());
  for (long s = 4; s < cfg.steps; ++s) t.train_step();
  const std::vector<double> resumed = t.loss_history();
  ASSERT_EQ(resumed.size(), 4u);
  for (std::size_t i = 0; i < resumed.size(); ++i) EXPECT_EQ(resumed[i], whole[4 + i]) << i;
  unsetenv("DTRAIN_TEST_CKPT_STAGE_THROUGH_HOST");
  world().barrier();
  if (world().rank() == 0) std::filesystem::remove_all(dir);
}
