// dt_comm_device through the C ABI: the collectives of dtrain.h on device buffers (all-reduce
// sum/max, all-gather, reduce-scatter, broadcast; also in place), host buffers on the same
// handle, a call mixing both refused, the handle made once per communicator, a byom of GPU
// tensors against one of host tensors (ZeRO 0 and 1, checkpoints across them), a grid group's
// device handle refused once its grid is gone, and a GPU model created over a device handle.
// The buffers are device memory from the core's CUDA device (the program's own GPU memory in a
// real program). Without a GPU, dt_comm_device gives DT_ERR_UNAVAILABLE on every rank and the
// program exits 77 (skipped).
//   mpiexec -n N test_capi_device_comm SCRATCH_DIR
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "dtrain.h"
#include "dtrain/device/device.hpp"

namespace {

int failures = 0, checks = 0, my_rank = 0;

void check(bool ok, const std::string& what) {
  ++checks;
  if (!ok) {
    ++failures;
    std::fprintf(stderr, "[rank %d] FAILED: %s: %s\n", my_rank, what.c_str(), dt_get_last_error(nullptr));
  }
}

void expect(dt_result_t got, dt_result_t want, const std::string& what) {
  check(got == want, what + " returned " + dt_get_error_string(got) + ", wanted " + dt_get_error_string(want));
}

// The larger of two errors, NaN if either is (std::max would keep the first against a NaN).
float worse(float a, float b) { return std::isnan(a) || std::isnan(b) ? NAN : std::max(a, b); }

// Host values in, a device buffer, host values out.
class DeviceFloats {
 public:
  DeviceFloats(dtrain::Device& dev, std::size_t n) : dev_(dev), n_(n), mem_(dev, n * sizeof(float)) {}
  float* get() { return mem_.as<float>(); }
  void set(const std::vector<float>& v) {
    dev_.copy(get(), v.data(), n_ * sizeof(float), dtrain::CopyKind::host_to_device);
  }
  std::vector<float> values() {
    std::vector<float> v(n_);
    dev_.copy(v.data(), get(), n_ * sizeof(float), dtrain::CopyKind::device_to_host);
    return v;
  }

 private:
  dtrain::Device& dev_;
  std::size_t n_;
  dtrain::DeviceBuffer mem_;
};

// Small integers, exact in every reduction: element i of rank r.
float value(int r, std::size_t i) { return static_cast<float>(r + 1) * 10.0f + static_cast<float>(i % 7); }

void collectives(dt_comm_t dc, dtrain::Device& dev, int size, const char* group) {
  const std::string g = std::string(group) + ": ";
  const std::size_t n = 1000, k = 257;
  std::vector<float> mine(n), want(n);
  for (std::size_t i = 0; i < n; ++i) {
    mine[i] = value(my_rank, i);
    want[i] = 0;
    for (int r = 0; r < size; ++r) want[i] += value(r, i);
  }
  DeviceFloats a(dev, n), b(dev, n);
  a.set(mine);
  expect(dt_all_reduce(dc, a.get(), b.get(), n, DT_F32, DT_SUM), DT_SUCCESS, g + "all_reduce sum");
  check(b.values() == want, g + "all_reduce sum values");
  expect(dt_all_reduce(dc, a.get(), a.get(), n, DT_F32, DT_MAX), DT_SUCCESS, g + "all_reduce max in place");
  std::vector<float> top(n);
  for (std::size_t i = 0; i < n; ++i) top[i] = value(size - 1, i);
  check(a.values() == top, g + "all_reduce max values");

  DeviceFloats piece(dev, k), all(dev, k * static_cast<std::size_t>(size));
  piece.set(std::vector<float>(mine.begin(), mine.begin() + static_cast<long>(k)));
  expect(dt_all_gather(dc, piece.get(), all.get(), k, DT_F32), DT_SUCCESS, g + "all_gather");
  const std::vector<float> gathered = all.values();
  bool ok = true;
  for (int r = 0; r < size; ++r)
    for (std::size_t i = 0; i < k; ++i) ok = ok && gathered[static_cast<std::size_t>(r) * k + i] == value(r, i);
  check(ok, g + "all_gather values");

  std::vector<float> full(k * static_cast<std::size_t>(size));
  for (std::size_t i = 0; i < full.size(); ++i) full[i] = value(my_rank, i);
  all.set(full);
  expect(dt_reduce_scatter(dc, all.get(), piece.get(), k, DT_F32, DT_SUM), DT_SUCCESS, g + "reduce_scatter");
  const std::vector<float> got = piece.values();
  ok = true;
  for (std::size_t i = 0; i < k; ++i) {
    float sum = 0;
    for (int r = 0; r < size; ++r) sum += value(r, static_cast<std::size_t>(my_rank) * k + i);
    ok = ok && got[i] == sum;
  }
  check(ok, g + "reduce_scatter values");

  const int root = size - 1;
  b.set(std::vector<float>(n, -1.0f));
  expect(dt_broadcast(dc, a.get(), b.get(), n, DT_F32, root), DT_SUCCESS, g + "broadcast");
  check(b.values() == top, g + "broadcast values");  // the root's a holds the maximum
  expect(dt_barrier(dc), DT_SUCCESS, g + "barrier");

  // Host buffers still go over MPI on the same handle; a call mixing both is refused.
  std::vector<float> host(n);
  expect(dt_all_reduce(dc, mine.data(), host.data(), n, DT_F32, DT_SUM), DT_SUCCESS, g + "host all_reduce");
  check(host == want, g + "host all_reduce values");
  expect(dt_all_reduce(dc, mine.data(), b.get(), n, DT_F32, DT_SUM), DT_ERR_INVALID_ARGUMENT,
         g + "host send, device recv");
}

// A byom over the device handle (the program's tensors in GPU memory) and one over the host
// communicator (host tensors) take the same steps: gradient norms and parameters agree, and a
// checkpoint of the GPU one loads into both bit for bit.
void byom_on_device(dt_comm_t world, dt_comm_t dc, dtrain::Device& dev, const std::string& dir, int zero) {
  const std::string g = "byom zero " + std::to_string(zero) + ": ";
  const std::int64_t wshape[2] = {8, 5}, bshape[1] = {5};
  const std::size_t nw = 40, nb = 5;
  std::vector<float> hw(nw), hb(nb, 0.0f), gw(nw), gb(nb);
  for (std::size_t i = 0; i < nw; ++i) hw[i] = 0.01f * static_cast<float>(i % 13) - 0.05f;
  const std::vector<float> w0 = hw;
  DeviceFloats dw(dev, nw), db(dev, nb), dgw(dev, nw), dgb(dev, nb);
  dw.set(hw);
  db.set(hb);
  dt_optimizer_config_t oc = DT_OPTIMIZER_CONFIG_INIT;
  oc.zero_stage = zero;
  oc.clip_grad = 0.5f;
  dt_byom_t on_host = nullptr, on_gpu = nullptr;
  expect(dt_byom_create(world, &oc, &on_host), DT_SUCCESS, g + "byom over the world");
  expect(dt_byom_create(dc, &oc, &on_gpu), DT_SUCCESS, g + "byom over the device handle");
  expect(dt_byom_register(on_host, "w", 2, wshape, DT_F32, hw.data(), gw.data(), 0), DT_SUCCESS, g + "register w");
  expect(dt_byom_register(on_host, "b", 1, bshape, DT_F32, hb.data(), gb.data(), DT_PARAM_NO_DECAY),
         DT_SUCCESS, g + "register b");
  expect(dt_byom_register(on_gpu, "w", 2, wshape, DT_F32, dw.get(), dgw.get(), 0), DT_SUCCESS, g + "register w");
  expect(dt_byom_register(on_gpu, "b", 1, bshape, DT_F32, db.get(), dgb.get(), DT_PARAM_NO_DECAY),
         DT_SUCCESS, g + "register b");
  bool norms_agree = true;
  for (int step = 0; step < 5; ++step) {
    for (std::size_t i = 0; i < nw; ++i) gw[i] = 0.1f * static_cast<float>((i * 7 + static_cast<std::size_t>(step + my_rank)) % 11) - 0.5f;
    for (std::size_t i = 0; i < nb; ++i) gb[i] = 0.2f * static_cast<float>(step - my_rank) + 0.1f * static_cast<float>(i);
    dgw.set(gw);
    dgb.set(gb);
    float nh = 0, ng = 0;
    expect(dt_byom_step(on_host, 1e-2f, &nh), DT_SUCCESS, g + "host step");
    expect(dt_byom_step(on_gpu, 1e-2f, &ng), DT_SUCCESS, g + "gpu step");
    norms_agree = norms_agree && std::fabs(ng - nh) <= 1e-6f * nh;
  }
  check(norms_agree, g + "gradient norms agree");
  float worst = 0;
  const std::vector<float> w = dw.values(), b = db.values();
  for (std::size_t i = 0; i < nw; ++i) worst = worse(worst, std::fabs(w[i] - hw[i]));
  for (std::size_t i = 0; i < nb; ++i) worst = worse(worst, std::fabs(b[i] - hb[i]));
  check(worst <= 1e-6f, g + "parameters agree");
  check(w != w0, g + "the steps moved the parameters");

  // The GPU byom's checkpoint, into the host byom and back into the GPU's zeroed buffers.
  expect(dt_byom_save_checkpoint(on_gpu, dir.c_str(), 0), DT_SUCCESS, g + "save from the GPU");
  expect(dt_byom_load_checkpoint(on_host, dir.c_str()), DT_SUCCESS, g + "load on the host");
  check(hw == w && hb == b, g + "the host holds the GPU's values bit for bit");
  dw.set(std::vector<float>(nw, 0.0f));
  expect(dt_byom_load_checkpoint(on_gpu, dir.c_str()), DT_SUCCESS, g + "load on the GPU");
  check(dw.values() == w, g + "the GPU buffers get them back");
  expect(dt_byom_destroy(on_gpu), DT_SUCCESS, g + "destroy");
  expect(dt_byom_destroy(on_host), DT_SUCCESS, g + "destroy");
  if (my_rank == 0) std::printf("%smax |parameter diff| GPU vs host after 5 steps %.3g\n", g.c_str(), worst);
}

// A byom of bf16 tensors over the device handle next to the same on the host, at a
// learning rate whose updates are below half a bf16 step: the masters (on the GPU) collect
// them, so every word moves; the program's words are the rounded masters; a word the program
// writes takes effect; on both alike (within a bf16 step, as AdamW differs by rounding).
void byom16_on_device(dt_comm_t world, dt_comm_t dc, dtrain::Device& dev) {
  const std::string g = "bf16 byom: ";
  const std::int64_t shape[1] = {40};
  const std::size_t n = 40;
  dtrain::Device& cpu = dtrain::cpu_device();
  std::vector<float> start(n), grad(n);
  for (std::size_t i = 0; i < n; ++i) start[i] = 0.5f + 0.01f * static_cast<float>(i);
  std::vector<std::uint16_t> hw(n), hg(n), from_gpu(n);
  cpu.convert_to_16bit(hw.data(), start.data(), static_cast<std::int64_t>(n), dtrain::DType::bf16);
  const std::vector<std::uint16_t> w0 = hw;
  dtrain::DeviceBuffer dw(dev, n * 2), dg(dev, n * 2);
  dev.copy(dw.data(), hw.data(), n * 2, dtrain::CopyKind::host_to_device);
  dt_byom_t on_host = nullptr, on_gpu = nullptr;
  expect(dt_byom_create(world, nullptr, &on_host), DT_SUCCESS, g + "byom over the world");
  expect(dt_byom_create(dc, nullptr, &on_gpu), DT_SUCCESS, g + "byom over the device handle");
  expect(dt_byom_register(on_host, "w", 1, shape, DT_BF16, hw.data(), hg.data(), 0), DT_SUCCESS, g + "register");
  expect(dt_byom_register(on_gpu, "w", 1, shape, DT_BF16, dw.data(), dg.data(), 0), DT_SUCCESS, g + "register");
  for (int step = 0; step < 41; ++step) {
    if (step == 40) {  // the program writes one value on both
      const float v = -0.25f;
      cpu.convert_to_16bit(&hw[3], &v, 1, dtrain::DType::bf16);
      dev.copy(dw.as<std::uint16_t>() + 3, &hw[3], 2, dtrain::CopyKind::host_to_device);
    }
    for (std::size_t i = 0; i < n; ++i) grad[i] = 0.1f + 0.01f * static_cast<float>(i + static_cast<std::size_t>(my_rank));
    cpu.convert_to_16bit(hg.data(), grad.data(), static_cast<std::int64_t>(n), dtrain::DType::bf16);
    dev.copy(dg.data(), hg.data(), n * 2, dtrain::CopyKind::host_to_device);
    expect(dt_byom_step(on_host, 2e-4f, nullptr), DT_SUCCESS, g + "host step");
    expect(dt_byom_step(on_gpu, 2e-4f, nullptr), DT_SUCCESS, g + "gpu step");
  }
  dev.copy(from_gpu.data(), dw.data(), n * 2, dtrain::CopyKind::device_to_host);
  std::vector<float> a(n), b(n);
  cpu.convert_from_16bit(a.data(), from_gpu.data(), static_cast<std::int64_t>(n), dtrain::DType::bf16);
  cpu.convert_from_16bit(b.data(), hw.data(), static_cast<std::int64_t>(n), dtrain::DType::bf16);
  float worst = 0;
  for (std::size_t i = 0; i < n; ++i) worst = worse(worst, std::fabs(a[i] - b[i]) / std::fabs(b[i]));
  check(worst <= 1.0f / 128, g + "GPU and host words within a bf16 step");
  bool all_moved = true;
  for (std::size_t i = 0; i < n; ++i) all_moved = all_moved && from_gpu[i] != w0[i] && hw[i] != w0[i];
  check(all_moved, g + "every word moved (the masters collected the small updates)");
  check(std::fabs(a[3] + 0.25f) < 0.05f && std::fabs(b[3] + 0.25f) < 0.05f, g + "a written word is the master");
  expect(dt_byom_destroy(on_gpu), DT_SUCCESS, g + "destroy");
  expect(dt_byom_destroy(on_host), DT_SUCCESS, g + "destroy");
  if (my_rank == 0) std::printf("%smax relative difference GPU vs host after 41 steps %.3g\n", g.c_str(), worst);
}

}  // namespace

int main(int argc, char** argv) {
  dt_context_t ctx = nullptr;
  dt_comm_t world = nullptr, dc = nullptr, again = nullptr;
  int size = 0;
  if (argc < 2) {
    std::fprintf(stderr, "usage: test_capi_device_comm SCRATCH_DIR\n");
    return 2;
  }
  if (dt_init(&argc, &argv, &ctx) != DT_SUCCESS) return 1;
  dt_context_rank(ctx, &my_rank);
  dt_context_size(ctx, &size);
  dt_context_world(ctx, &world);
  const std::string scratch = std::string(argv[1]) + "/np" + std::to_string(size);

  const dt_result_t rc = dt_comm_device(world, &dc);
  if (rc == DT_ERR_UNAVAILABLE) {
    const bool clean = dc == nullptr && std::strstr(dt_get_last_error(ctx), "no usable GPU");
    if (!clean) std::fprintf(stderr, "[rank %d] FAILED: unclean refusal: %s\n", my_rank, dt_get_last_error(ctx));
    int bad = clean ? 0 : 1, any = 0;
    dt_all_reduce(world, &bad, &any, 1, DT_I32, DT_MAX);
    dt_finalize(ctx);
    if (my_rank == 0 && !any) std::printf("capi_device_comm: no usable GPU: skipped\n");
    return any ? 1 : 77;
  }
  expect(rc, DT_SUCCESS, "dt_comm_device(world)");
  dtrain::Device& dev = dtrain::select_device("cuda");
  expect(dt_comm_device(world, &again), DT_SUCCESS, "dt_comm_device again");
  check(again == dc, "the same handle the second time");
  expect(dt_comm_device(dc, &again), DT_SUCCESS, "dt_comm_device of a device handle");
  check(again == dc, "a device handle is its own");
  collectives(dc, dev, size, "world");
  for (int zero = 0; zero <= 1; ++zero) {
    const std::string dir = scratch + "/byom_zero" + std::to_string(zero);
    if (my_rank == 0) std::filesystem::create_directories(dir);
    dt_barrier(world);
    byom_on_device(world, dc, dev, dir, zero);
  }
  byom16_on_device(world, dc, dev);

  // A grid group's device handle lives as long as the grid.
  dt_grid_t grid = nullptr;
  dt_grid_config_t gc = DT_GRID_CONFIG_INIT;
  dt_comm_t dp = nullptr, dp_dev = nullptr;
  int dp_size = 0;
  expect(dt_grid_create(ctx, &gc, &grid), DT_SUCCESS, "dt_grid_create");
  expect(dt_grid_comm(grid, DT_GROUP_DP, &dp), DT_SUCCESS, "dt_grid_comm");
  expect(dt_comm_device(dp, &dp_dev), DT_SUCCESS, "dt_comm_device(dp)");
  expect(dt_comm_size(dp_dev, &dp_size), DT_SUCCESS, "dt_comm_size");
  collectives(dp_dev, dev, dp_size, "dp");

  // A GPU model over a device handle: its steps average over the same ranks.
  dt_gpt_config_t mc = DT_GPT_CONFIG_INIT;
  mc.layers = 1;
  mc.heads = 2;
  mc.d_model = 16;
  mc.seq_len = 8;
  mc.vocab = 32;
  mc.max_batch = 1;
  mc.device = "cuda";
  dt_model_t model = nullptr;
  std::vector<std::int32_t> tokens(8), targets(8);
  for (int i = 0; i < 8; ++i) {
    tokens[static_cast<std::size_t>(i)] = (i * 5 + my_rank) % 32;
    targets[static_cast<std::size_t>(i)] = (i * 5 + my_rank + 1) % 32;
  }
  float loss = 0, norm = 0;
  expect(dt_model_create_gpt(dp_dev, &mc, nullptr, &model), DT_SUCCESS, "a GPT over a device handle");
  expect(dt_gpt_forward_backward(model, tokens.data(), targets.data(), 1, 8, &loss), DT_SUCCESS, "forward_backward");
  expect(dt_model_step(model, 1e-3f, &norm), DT_SUCCESS, "step");
  check(norm > 0, "a gradient norm");
  expect(dt_model_destroy(model), DT_SUCCESS, "dt_model_destroy");

  expect(dt_grid_destroy(grid), DT_SUCCESS, "dt_grid_destroy");
  expect(dt_barrier(dp_dev), DT_ERR_INVALID_HANDLE, "the device handle of a destroyed grid's group");

  int total = 0;
  dt_all_reduce(world, &failures, &total, 1, DT_I32, DT_SUM);
  dt_finalize(ctx);
  if (total > 0) {
    std::fprintf(stderr, "[rank %d] capi_device_comm: %d of %d checks failed here\n", my_rank, failures, checks);
    return 1;
  }
  if (my_rank == 0) std::printf("capi_device_comm: all %d checks passed\n", checks);
  return 0;
}
