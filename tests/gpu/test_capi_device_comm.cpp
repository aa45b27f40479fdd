// dt_comm_device through the C ABI: the collectives of dtrain.h on device buffers (all-reduce
// sum/avg/max, all-gather, reduce-scatter, broadcast; also in place), host buffers on the same
// handle, a call mixing both refused, the handle made once per communicator, a grid group's
// device handle refused once its grid is gone, and a GPU model created over a device handle.
// The buffers are device memory from the core's CUDA device (the program's own GPU memory in a
// real program). Without a GPU, dt_comm_device gives DT_ERR_UNAVAILABLE on every rank and the
// program exits 77 (skipped).
//   mpiexec -n N test_capi_device_comm
#include <cstdio>
#include <cstring>
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

}  // namespace

int main(int argc, char** argv) {
  dt_context_t ctx = nullptr;
  dt_comm_t world = nullptr, dc = nullptr, again = nullptr;
  int size = 0;
  if (dt_init(&argc, &argv, &ctx) != DT_SUCCESS) return 1;
  dt_context_rank(ctx, &my_rank);
  dt_context_size(ctx, &size);
  dt_context_world(ctx, &world);

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
