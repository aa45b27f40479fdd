// The emulator's own rules: what it promises in cuda_runtime.h must hold, or a test run on
// it would prove less than it claims.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "cublas_v2.h"
#include "cuda_runtime.h"
#include "device/half_bits.hpp"
#include "replaced/async_copy.cuh"
#include "replaced/warp_mma.cuh"

namespace {

struct DeviceFloats {
  explicit DeviceFloats(std::size_t n) : n(n) { EXPECT_EQ(cudaMalloc(reinterpret_cast<void**>(&p), n * sizeof(float)), cudaSuccess); }
  ~DeviceFloats() { cudaFree(p); }
  std::vector<float> host() const {
    std::vector<float> v(n);
    EXPECT_EQ(cudaMemcpyAsync(v.data(), p, n * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
    return v;
  }
  void set(const std::vector<float>& v) {
    EXPECT_EQ(cudaMemcpyAsync(p, v.data(), n * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
  }
  std::size_t n;
  float* p = nullptr;
};

__global__ void fill_index(float* out, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = static_cast<float>(i);
}

// Each block sums its 96 inputs: partial sums in shared memory, then a shuffle reduction.
__global__ void block_sums(float* out, const float* in) {
  __shared__ float part[3];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  float v = in[blockIdx.x * blockDim.x + threadIdx.x];
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  if (lane == 0) part[warp] = v;
  __syncthreads();
  if (threadIdx.x == 0) out[blockIdx.x] = part[0] + part[1] + part[2];
}

// Half a warp waits at the block barrier, the other half at a shuffle that needs the first.
__global__ void barrier_against_shuffle(float* out) {
  float v = 1.0f;
  if (threadIdx.x < 16) __syncthreads();
  else v = __shfl_xor_sync(0xffffffffu, v, 1);
  out[threadIdx.x] = v;
}

__global__ void any_negative(int* flag, const float* x) {
  if (__syncthreads_or(x[threadIdx.x] < 0) && threadIdx.x == 0) *flag = 1;
}

// Lanes 0-15 shuffle twice among themselves after a whole-warp shuffle: each lane must get
// its own partner's value from each exchange, whatever order the lanes run in.
__global__ void shuffles_with_changing_masks(float* out) {
  const int lane = threadIdx.x;
  float v = static_cast<float>(lane);
  v += __shfl_xor_sync(0xffffffffu, v, 16);  // lane + (lane ^ 16)
  if (lane < 16) {
    v += __shfl_xor_sync(0x0000ffffu, v, 1);
    v += __shfl_xor_sync(0x0000ffffu, v, 2);
  }
  out[lane] = v;
}

// Every lane writes base + its index, then reads its neighbour's: right only after a warp
// barrier.
__global__ void neighbour_after_syncwarp(float* out, float base, int sync) {
  __shared__ float v[32];
  v[threadIdx.x] = base + static_cast<float>(threadIdx.x);
  if (sync) __syncwarp();
  out[threadIdx.x] = v[(threadIdx.x + 1) & 31];
}

// One warp: d (16 x 16, by rows) = a b + c through warp_mma.cuh, for bf16 a (16 x 16, by
// rows) and b (16 x 16), both staged in shared memory from their 16-bit encodings: b by rows
// (transposed loads) or, with b_by_columns, as b^T by rows (plain loads). The addressing is
// PTX's, written out here independently of the attention kernels: lanes 8i..8i+7 name the
// rows of 8 x 8 matrix i.
__global__ void tile_product(float* d, const std::uint16_t* a, const std::uint16_t* b,
                             const float* c, int b_by_columns, int offset) {
  constexpr int ld = 24;  // 48-byte rows: 16-byte aligned
  struct alignas(16) Tiles {
    std::uint16_t a[16 * ld + 8], b[16 * ld];  // b 16-byte aligned too
  };
  __shared__ Tiles tiles;
  std::uint16_t *sa = tiles.a, *sb = tiles.b;
  for (int i = threadIdx.x; i < 256; i += 32) {
    sa[offset + (i / 16) * ld + i % 16] = a[i];
    sb[(i / 16) * ld + i % 16] = b[i];
  }
  __syncwarp();
  const int lane = threadIdx.x, g = lane >> 2, t = lane & 3;
  std::uint32_t fa[4], fb[4];
  // a: rows 0-7, 8-15 at columns 0-7, then at 8-15
  dtrain::cuda::load_matrices(fa, sa + offset + ((lane & 7) + 8 * ((lane >> 3) & 1)) * ld + 8 * (lane >> 4));
  if (b_by_columns) {  // rows of b^T: n 0-7 at k 0-7, k 8-15, then n 8-15
    dtrain::cuda::load_matrices(fb, sb + ((lane & 7) + 8 * (lane >> 4)) * ld + 8 * ((lane >> 3) & 1));
  } else {  // rows of b: k 0-7, 8-15 at n 0-7, then at n 8-15
    dtrain::cuda::load_matrices_transposed(fb, sb + ((lane & 7) + 8 * ((lane >> 3) & 1)) * ld + 8 * (lane >> 4));
  }
  for (int n = 0; n < 2; ++n) {  // the two 8-column halves of d
    float acc[4];
    for (int e = 0; e < 4; ++e) acc[e] = c[(g + 8 * (e / 2)) * 16 + 8 * n + 2 * t + e % 2];
    dtrain::cuda::mma<__nv_bfloat16>(acc, fa, fb[2 * n], fb[2 * n + 1]);
    for (int e = 0; e < 4; ++e) d[(g + 8 * (e / 2)) * 16 + 8 * n + 2 * t + e % 2] = acc[e];
  }
}

// Each lane's registers from one plain and one transposed load of a 16 x 16 tile holding
// its own index (element (r, c) = 16 r + c): reg[lane * 8 + i], the transposed ones at i + 4.
__global__ void loaded_registers(std::uint32_t* reg) {
  struct alignas(16) Tile {
    std::uint16_t v[16 * 16];
  };
  __shared__ Tile shared_tile;
  std::uint16_t* tile = shared_tile.v;
  for (int i = threadIdx.x; i < 256; i += 32) tile[i] = static_cast<std::uint16_t>(i);
  __syncwarp();
  const int lane = threadIdx.x;
  std::uint32_t r[4], rt[4];
  const std::uint16_t* row = tile + ((lane & 7) + 8 * ((lane >> 3) & 1)) * 16 + 8 * (lane >> 4);
  dtrain::cuda::load_matrices(r, row);
  dtrain::cuda::load_matrices_transposed(rt, row);
  for (int i = 0; i < 4; ++i) {
    reg[lane * 8 + i] = r[i];
    reg[lane * 8 + 4 + i] = rt[i];
  }
}

// Half a warp multiplies: the other half never reaches the warp-wide call.
__global__ void half_warp_matrix_call(float* out) {
  float acc[4] = {};
  const std::uint32_t a[4] = {};
  if (threadIdx.x < 16) dtrain::cuda::mma<__nv_bfloat16>(acc, a, 0u, 0u);
  out[threadIdx.x] = acc[0];
}

// Each thread copies two groups of four floats into shared memory asynchronously and reads
// its slots after each step: seen[0..3] before any wait, [4..7] with one group still
// pending, [8..11] after waiting for all. With `wait` 0 it never waits.
__global__ void two_copy_groups(float* seen, const float* in, int wait) {
  struct alignas(16) Tiles {
    float f[2][4 * 32];
  };
  __shared__ Tiles tile;
  const int t = threadIdx.x;
  float* first = &tile.f[0][4 * t];
  float* second = &tile.f[1][4 * t];
  dtrain::cuda::copy_16_bytes_async(first, in + 4 * t, true);
  dtrain::cuda::commit_async_copies();
  dtrain::cuda::copy_16_bytes_async(second, in + 4 * t, false);  // zeros
  dtrain::cuda::commit_async_copies();
  seen[12 * t] = first[0];
  if (!wait) return;
  dtrain::cuda::wait_async_copies<1>();
  seen[12 * t + 4] = first[1];
  seen[12 * t + 5] = second[1];
  dtrain::cuda::wait_async_copies<0>();
  seen[12 * t + 8] = first[2];
  seen[12 * t + 9] = second[2];
  __syncthreads();
}

// Each thread reads its slot of a shared array before writing it (what a GPU leaves there is
// undefined), then writes its index.
__global__ void read_before_write(float* seen) {
  __shared__ float slots[64];
  dtrain_emu::fresh_shared(&slots, sizeof slots);  // what the emulator's build adds to lib/
  const int t = threadIdx.x;
  seen[blockIdx.x * blockDim.x + t] = slots[t];
  slots[t] = static_cast<float>(t);
}

// Block b reads its neighbour's cell, then marks its own: what it sees depends on which block
// ran first, which nothing on a GPU decides.
__global__ void read_neighbour_cell(float* seen, float* cells) {
  const unsigned b = blockIdx.x, n = gridDim.x;
  seen[b] = cells[(b + 1) % n];
  cells[b] = 1.0f;
}

struct DeviceHalves {
  explicit DeviceHalves(const std::vector<std::uint16_t>& v) {
    EXPECT_EQ(cudaMalloc(reinterpret_cast<void**>(&p), v.size() * 2), cudaSuccess);
    EXPECT_EQ(cudaMemcpyAsync(p, v.data(), v.size() * 2, cudaMemcpyHostToDevice), cudaSuccess);
  }
  ~DeviceHalves() { cudaFree(p); }
  std::uint16_t* p = nullptr;
};

TEST(CudaEmulator, KernelsSeeTheirCoordinatesAndFreshMemoryIsNaN) {
  DeviceFloats d(1000);
  EXPECT_TRUE(std::isnan(d.host()[999]));
  dtrain_emu::launch(fill_index, dim3(4), dim3(256))(d.p, 1000);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  const auto h = d.host();
  for (int i = 0; i < 1000; ++i) ASSERT_EQ(h[i], static_cast<float>(i));
}

TEST(CudaEmulator, ShufflesAndBarriersReduceLikeAGpu) {
  const int blocks = 5, threads = 96;
  std::vector<float> in(blocks * threads);
  for (std::size_t i = 0; i < in.size(); ++i) in[i] = static_cast<float>(i % 7);
  DeviceFloats d_in(in.size()), d_out(blocks);
  d_in.set(in);
  dtrain_emu::launch(block_sums, dim3(blocks), dim3(threads))(d_out.p, d_in.p);
  const auto out = d_out.host();
  for (int b = 0; b < blocks; ++b) {
    float want = 0;
    for (int t = 0; t < threads; ++t) want += in[b * threads + t];
    EXPECT_EQ(out[b], want) << "block " << b;
  }
}

TEST(CudaEmulator, ShufflesWithChangingMasks) {
  DeviceFloats d(32);
  dtrain_emu::launch(shuffles_with_changing_masks, dim3(2), dim3(32))(d.p);
  const auto out = d.host();
  for (int lane = 0; lane < 32; ++lane) {
    auto first = [](int l) { return static_cast<float>(l + (l ^ 16)); };
    float want = first(lane);
    if (lane < 16) {
      const float after1 = first(lane) + first(lane ^ 1);
      const float partner1 = first(lane ^ 2) + first(lane ^ 3);
      want = after1 + partner1;
    }
    EXPECT_EQ(out[lane], want) << "lane " << lane;
  }
}

TEST(CudaEmulator, SyncthreadsOrAgreesAcrossTheBlock) {
  std::vector<float> x(64, 1.0f);
  x[50] = -1.0f;
  DeviceFloats d_x(64);
  d_x.set(x);
  int* flag = nullptr;
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&flag), sizeof(int)), cudaSuccess);
  ASSERT_EQ(cudaMemsetAsync(flag, 0, sizeof(int)), cudaSuccess);
  dtrain_emu::launch(any_negative, dim3(1), dim3(64))(flag, d_x.p);
  int h = -1;
  ASSERT_EQ(cudaMemcpyAsync(&h, flag, sizeof h, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(h, 1);
  cudaFree(flag);
}

TEST(CudaEmulator, BadLaunchesAreRefusedAsOnAGpu) {
  DeviceFloats d(4);
  dtrain_emu::launch(fill_index, dim3(1), dim3(2048))(d.p, 4);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);  // not sticky
  dtrain_emu::launch(fill_index, dim3(1, 70000), dim3(32))(d.p, 4);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration);
}

TEST(CudaEmulator, SyncwarpIsAWarpBarrier) {
  DeviceFloats d(32);
  dtrain_emu::launch(neighbour_after_syncwarp, dim3(1), dim3(32))(d.p, 0.0f, 1);
  const auto got = d.host();
  for (int i = 0; i < 32; ++i) EXPECT_EQ(got[i], static_cast<float>((i + 1) & 31));
  // without it, lanes run one after another: a lane reads a neighbour that has not written
  dtrain_emu::launch(neighbour_after_syncwarp, dim3(1), dim3(32))(d.p, 100.0f, 0);
  const auto stale = d.host();
  int wrong = 0;
  for (int i = 0; i < 32; ++i) wrong += stale[i] != 100.0f + static_cast<float>((i + 1) & 31);
  EXPECT_GT(wrong, 0);
}

TEST(CudaEmulator, WarpMatrixProductsAreTheProductsOfTheDecodedTiles) {
  std::vector<std::uint16_t> a(256), b(256);
  std::vector<float> c(256);
  for (int i = 0; i < 256; ++i) {
    a[i] = dtrain::halfbits::to_bf16(std::sin(0.37f * i));
    b[i] = dtrain::halfbits::to_bf16(std::cos(0.11f * i) * 3.0f);
    c[i] = 0.01f * i;
  }
  DeviceHalves da(a), db(b);
  DeviceFloats dc(256), dd(256);
  dc.set(c);
  for (int by_columns = 0; by_columns < 2; ++by_columns) {
    dtrain_emu::launch(tile_product, dim3(1), dim3(32))(dd.p, da.p, db.p, dc.p, by_columns, 0);
    const auto got = dd.host();
    for (int r = 0; r < 16; ++r)
      for (int n = 0; n < 16; ++n) {
        double want = c[r * 16 + n];
        for (int k = 0; k < 16; ++k) {
          const int bk = by_columns ? n * 16 + k : k * 16 + n;  // element (k, n) of b
          want += static_cast<double>(dtrain::halfbits::from_bf16(a[r * 16 + k])) *
                  dtrain::halfbits::from_bf16(b[bk]);
        }
        ASSERT_NEAR(got[r * 16 + n], want, 1e-4 * (1 + std::fabs(want))) << r << "," << n;
      }
  }
}

// The fragment layout itself, as PTX's ISA gives it for ldmatrix: register i of lane 4g + t
// holds row g, columns 2t and 2t + 1 of matrix i (low half first); transposed, rows 2t and
// 2t + 1 of column g. Matrix i here is rows 8 (i % 2).., columns 8 (i / 2)...
TEST(CudaEmulator, MatrixLoadsGiveEachLaneItsPtxElements) {
  DeviceFloats out(32 * 8);  // 32-bit registers, read back as raw bits
  dtrain_emu::launch(loaded_registers, dim3(1), dim3(32))(reinterpret_cast<std::uint32_t*>(out.p));
  const auto got = out.host();
  for (int lane = 0; lane < 32; ++lane) {
    const int g = lane >> 2, t = lane & 3;
    for (int i = 0; i < 4; ++i) {
      const int r0 = 8 * (i % 2), c0 = 8 * (i / 2);
      auto at = [&](int r, int c) { return static_cast<std::uint32_t>(16 * (r0 + r) + c0 + c); };
      std::uint32_t plain, transposed;
      std::memcpy(&plain, &got[lane * 8 + i], 4);
      std::memcpy(&transposed, &got[lane * 8 + 4 + i], 4);
      EXPECT_EQ(plain, at(g, 2 * t) | at(g, 2 * t + 1) << 16) << lane << " " << i;
      EXPECT_EQ(transposed, at(2 * t, g) | at(2 * t + 1, g) << 16) << lane << " " << i;
    }
  }
}

TEST(CudaEmulatorDeathTest, AMisalignedMatrixRowStops) {
  std::vector<std::uint16_t> zeros(256);
  DeviceHalves da(zeros), db(zeros);
  DeviceFloats dc(256), dd(256);
  dc.set(std::vector<float>(256));
  EXPECT_DEATH(
      {
        dtrain_emu::launch(tile_product, dim3(1), dim3(32))(dd.p, da.p, db.p, dc.p, 0, 4);
        cudaDeviceSynchronize();
      },
      "not 16-byte aligned");
}

TEST(CudaEmulatorDeathTest, AWarpMatrixCallSomeLanesSkipStops) {
  DeviceFloats d(32);
  EXPECT_DEATH(
      {
        dtrain_emu::launch(half_warp_matrix_call, dim3(1), dim3(32))(d.p);
        cudaDeviceSynchronize();
      },
      "deadlock");
}

TEST(CudaEmulatorDeathTest, HostAccessToDeviceMemoryFaults) {
  DeviceFloats d(16);
  EXPECT_DEATH({ volatile float x = d.p[3]; (void)x; }, "");
}

TEST(CudaEmulatorDeathTest, AKernelGivenAHostPointerStops) {
  std::vector<float> host(16);
  EXPECT_DEATH(dtrain_emu::launch(fill_index, dim3(1), dim3(16))(host.data(), 16),
               "neither device nor pinned memory");
}

TEST(CudaEmulatorDeathTest, OverrunningAnAllocationFaults) {
  DeviceFloats d(64);  // 256 bytes: ends exactly on the guard page
  EXPECT_DEATH(
      {
        dtrain_emu::launch(fill_index, dim3(1), dim3(128))(d.p, 128);
        cudaDeviceSynchronize();
      },
      "");
}

TEST(CudaEmulatorDeathTest, ABarrierNotEveryThreadReachesIsADeadlock) {
  DeviceFloats d(64);
  EXPECT_DEATH(
      {
        dtrain_emu::launch(barrier_against_shuffle, dim3(1), dim3(32))(d.p);
        cudaDeviceSynchronize();
      },
      "deadlock");
}

TEST(CudaEmulator, AsynchronousCopiesLandWhenTheirThreadWaits) {
  std::vector<float> in(4 * 32);
  for (std::size_t i = 0; i < in.size(); ++i) in[i] = static_cast<float>(i) + 0.5f;
  DeviceFloats d_in(in.size()), seen(12 * 32);
  d_in.set(in);
  seen.set(std::vector<float>(12 * 32, -1.0f));
  dtrain_emu::launch(two_copy_groups, dim3(1), dim3(32))(seen.p, d_in.p, 1);
  const auto got = seen.host();
  for (int t = 0; t < 32; ++t) {
    const float* g = &got[12 * t];
    EXPECT_TRUE(std::isnan(g[0])) << "thread " << t << " read its copy before waiting";
    EXPECT_EQ(g[4], in[4 * t + 1]) << "thread " << t << ": the older group has landed";
    EXPECT_TRUE(std::isnan(g[5])) << "thread " << t << ": the newer group is still in flight";
    EXPECT_EQ(g[8], in[4 * t + 2]) << "thread " << t;
    EXPECT_EQ(g[9], 0.0f) << "thread " << t << ": a copy of nothing gives zeros";
  }
}

TEST(CudaEmulator, EveryBlockStartsWithNaNInItsSharedVariables) {
  DeviceFloats seen(3 * 64);
  dtrain_emu::launch(read_before_write, dim3(3), dim3(64))(seen.p);
  const auto got = seen.host();
  for (std::size_t i = 0; i < got.size(); ++i)
    EXPECT_TRUE(std::isnan(got[i])) << "block " << i / 64 << " thread " << i % 64;
}

TEST(CudaEmulator, BlocksRunInEitherOrder) {
  const int n = 8;
  DeviceFloats seen(n), cells(n);
  int launches_seeing_written = 0, launches_seeing_unwritten = 0;
  for (int launch = 0; launch < 2; ++launch) {
    cells.set(std::vector<float>(n, 0.0f));
    dtrain_emu::launch(read_neighbour_cell, dim3(n), dim3(1))(seen.p, cells.p);
    dtrain_emu::launch(fill_index, dim3(1), dim3(n))(cells.p, n);  // another kernel between
    const auto got = seen.host();
    launches_seeing_written += got[0] == 1.0f;
    launches_seeing_unwritten += got[0] == 0.0f;
  }
  EXPECT_EQ(launches_seeing_written, 1);
  EXPECT_EQ(launches_seeing_unwritten, 1);
}

TEST(CudaEmulatorDeathTest, AThreadEndingWithCopiesInFlightStops) {
  DeviceFloats d_in(4 * 32), seen(12 * 32);
  d_in.set(std::vector<float>(4 * 32, 1.0f));
  EXPECT_DEATH(
      {
        dtrain_emu::launch(two_copy_groups, dim3(1), dim3(32))(seen.p, d_in.p, 0);
        cudaDeviceSynchronize();
      },
      "never waited for");
}

TEST(CudaEmulator, PinnedResultsAreStaleUntilTheStreamIsSynchronised) {
  cudaStream_t s = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  DeviceFloats d(1);
  d.set({42.0f});
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);  // the set ran on the legacy stream
  float* pinned = nullptr;
  ASSERT_EQ(cudaMallocHost(reinterpret_cast<void**>(&pinned), sizeof(float)), cudaSuccess);
  *pinned = -1.0f;
  ASSERT_EQ(cudaMemcpyAsync(pinned, d.p, sizeof(float), cudaMemcpyDeviceToHost, s), cudaSuccess);
  EXPECT_EQ(*pinned, -1.0f);  // not yet: nothing has synchronised with s
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  EXPECT_EQ(*pinned, 42.0f);
  cudaFreeHost(pinned);
  cudaStreamDestroy(s);
}

TEST(CudaEmulator, AnEventIsNotReadyUntilTheDeviceGetsToIt) {
  cudaStream_t s = nullptr;
  cudaEvent_t e = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_EQ(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), cudaSuccess);
  EXPECT_EQ(cudaEventQuery(e), cudaSuccess);  // never recorded
  DeviceFloats d(1000);
  dtrain_emu::launch(fill_index, dim3(4), dim3(256), 0, s)(d.p, 1000);
  ASSERT_EQ(cudaEventRecord(e, s), cudaSuccess);
  dtrain_emu::launch(fill_index, dim3(1), dim3(1), 0, s)(d.p, 0);  // after the event
  EXPECT_EQ(cudaEventQuery(e), cudaErrorNotReady);
  EXPECT_EQ(cudaEventQuery(e), cudaSuccess);
  ASSERT_EQ(cudaEventSynchronize(e), cudaSuccess);
  cudaStreamSynchronize(s);
  EXPECT_EQ(d.host()[999], 999.0f);
  cudaEventDestroy(e);
  cudaStreamDestroy(s);
}

TEST(CudaEmulator, CopiesMustMatchTheirDirection) {
  DeviceFloats d(4);
  float h[4] = {};
  EXPECT_EQ(cudaMemcpyAsync(h, d.p, sizeof h, cudaMemcpyHostToDevice), cudaErrorInvalidMemcpyDirection);
  EXPECT_EQ(cudaMemcpyAsync(d.p, h, 2 * sizeof h, cudaMemcpyHostToDevice), cudaErrorInvalidValue);
  cudaPointerAttributes a{};
  ASSERT_EQ(cudaPointerGetAttributes(&a, d.p + 2), cudaSuccess);
  EXPECT_EQ(a.type, cudaMemoryTypeDevice);
  ASSERT_EQ(cudaPointerGetAttributes(&a, h), cudaSuccess);
  EXPECT_EQ(a.type, cudaMemoryTypeUnregistered);
  (void)cudaGetLastError();
}

TEST(CudaEmulator, GemmIsColumnMajorIgnoresCWhenBetaIsZeroAndChecksExtents) {
  cublasHandle_t h = nullptr;
  ASSERT_EQ(cublasCreate(&h), CUBLAS_STATUS_SUCCESS);
  // A = [1 2; 3 4] column-major {1, 3, 2, 4}; B = I; C starts NaN (fresh memory).
  DeviceFloats A(4), B(4), C(4);
  A.set({1, 3, 2, 4});
  B.set({1, 0, 0, 1});
  const float one = 1.0f, zero = 0.0f;
  ASSERT_EQ(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, 2, 2, 2, &one, A.p, CUDA_R_32F, 2, B.p,
                         CUDA_R_32F, 2, &zero, C.p, CUDA_R_32F, 2, CUBLAS_COMPUTE_32F,
                         CUBLAS_GEMM_DEFAULT),
            CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(C.host(), (std::vector<float>{1, 2, 3, 4}));  // A^T
  EXPECT_EQ(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 2, &one, A.p, CUDA_R_32F, 1, B.p,
                         CUDA_R_32F, 2, &zero, C.p, CUDA_R_32F, 2, CUBLAS_COMPUTE_32F,
                         CUBLAS_GEMM_DEFAULT),
            CUBLAS_STATUS_INVALID_VALUE);  // lda < m
  EXPECT_EQ(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, 2, 3, 2, &one, A.p, CUDA_R_32F, 2, B.p,
                         CUDA_R_32F, 2, &zero, C.p, CUDA_R_32F, 2, CUBLAS_COMPUTE_32F,
                         CUBLAS_GEMM_DEFAULT),
            CUBLAS_STATUS_EXECUTION_FAILED);  // B and C have only 2 columns
  cublasDestroy(h);
}

}  // namespace
