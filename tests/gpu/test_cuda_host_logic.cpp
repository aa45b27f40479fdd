// The parts of the CUDA plugin that are plain C++, tested without a GPU: the caching rules of
// the device allocator, the GPU choice from the node-local rank, and the mapping of row-major
// GEMMs onto column-major (cuBLAS) calls, checked against the CPU GEMM through a reference
// column-major GEMM written from the BLAS definition.
#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <random>
#include <vector>

#include "device/cuda/allocator.hpp"
#include "device/cuda/device_choice.hpp"
#include "device/cuda/gemm_args.hpp"
#include "dtrain/core/error.hpp"
#include "dtrain/device/device.hpp"

namespace {

using dtrain::cuda::AllocatorStats;
using dtrain::cuda::CachingAllocator;
using dtrain::cuda::RawMemory;

// Host memory standing in for the device, with a capacity and counters.
class FakeMemory final : public RawMemory {
 public:
  explicit FakeMemory(std::size_t capacity) : capacity_(capacity) {}
  ~FakeMemory() override {
    for (auto& b : blocks_) std::free(b.first);
  }
  void* allocate(std::size_t bytes) override {
    ++calls;
    if (faulted) throw dtrain::Error(dtrain::Errc::internal, "illegal address (a kernel's fault)");
    if (used_ + bytes > capacity_) return nullptr;
    void* p = std::malloc(bytes);
    blocks_[p] = bytes;
    used_ += bytes;
    return p;
  }
  void release(void* ptr) noexcept override {
    ++releases;
    used_ -= blocks_.at(ptr);
    blocks_.erase(ptr);
    std::free(ptr);
  }
  void wait_idle() override {
    ++waits;
    if (faulted) throw dtrain::Error(dtrain::Errc::internal, "illegal address (a kernel's fault)");
  }
  std::size_t used() const { return used_; }
  int calls = 0, releases = 0, waits = 0;
  bool faulted = false;  // as after a kernel's illegal address: every call fails

 private:
  std::size_t capacity_, used_ = 0;
  std::map<void*, std::size_t> blocks_;
};

TEST(CudaAllocator, ReusesFreedBlocks) {
  FakeMemory raw(1 << 30);
  CachingAllocator alloc(raw);
  void* a = alloc.allocate(1000);
  EXPECT_EQ(alloc.stats().bytes_in_use, CachingAllocator::round_up(1000));
  alloc.free(a);
  EXPECT_EQ(alloc.stats().bytes_in_use, 0u);
  EXPECT_EQ(alloc.stats().bytes_cached, CachingAllocator::round_up(1000));
  for (int step = 0; step < 10; ++step) {  // a training loop: same sizes every step
    void* b = alloc.allocate(1000);
    EXPECT_EQ(b, a);
    alloc.free(b);
  }
  EXPECT_EQ(alloc.stats().raw_allocations, 1u);
  EXPECT_EQ(raw.calls, 1);
}

TEST(CudaAllocator, BestFitWithinAQuarter) {
  FakeMemory raw(1 << 30);
  CachingAllocator alloc(raw);
  void* big = alloc.allocate(1 << 20);
  void* mid = alloc.allocate(300 << 10);
  alloc.free(big);
  alloc.free(mid);
  EXPECT_EQ(alloc.allocate(260 << 10), mid) << "smallest cached block that fits";
  void* small = alloc.allocate(1 << 10);  // 1 MiB block is far too big for 1 KiB: new block
  EXPECT_NE(small, big);
  EXPECT_EQ(alloc.allocate((1 << 20) - 4096), big) << "within a quarter: reused";
  EXPECT_EQ(alloc.stats().raw_allocations, 3u);
}

TEST(CudaAllocator, EmptiesTheCacheBeforeRunningOutOfMemory) {
  FakeMemory raw(4 << 20);
  CachingAllocator alloc(raw);
  void* a = alloc.allocate(3 << 20);
  alloc.free(a);  // cached, still held from the driver
  void* b = alloc.allocate(2 << 20);  // does not fit next to the cached block, nor reuse it
  EXPECT_NE(b, nullptr);
  EXPECT_GE(raw.waits, 1) << "queued work is waited for before blocks go back";
  EXPECT_EQ(raw.releases, 1);
  EXPECT_EQ(alloc.stats().bytes_cached, 0u);
  try {
    alloc.allocate(8 << 20);
    FAIL() << "no out-of-memory error";
  } catch (const dtrain::Error& e) {
    EXPECT_EQ(e.code(), dtrain::Errc::out_of_memory);
    EXPECT_NE(std::string(e.what()).find("out of memory"), std::string::npos);
  }
  alloc.free(b);
}

// A device fault is said as itself, not as out of memory, and the cache still empties.
TEST(CudaAllocator, AFaultIsNotOutOfMemory) {
  FakeMemory raw(4 << 20);
  CachingAllocator alloc(raw);
  alloc.free(alloc.allocate(1 << 20));
  raw.faulted = true;
  try {
    alloc.allocate(2 << 20);
    FAIL() << "no error";
  } catch (const dtrain::Error& e) {
    EXPECT_EQ(e.code(), dtrain::Errc::internal) << e.what();
    EXPECT_NE(std::string(e.what()).find("illegal address"), std::string::npos);
  }
  alloc.release_cached();  // no throw
  EXPECT_EQ(alloc.stats().bytes_cached, 0u);
}

TEST(CudaAllocator, IgnoresNullAndForeignPointersAndReleasesTheCache) {
  FakeMemory raw(1 << 30);
  {
    CachingAllocator alloc(raw);
    alloc.free(nullptr);
    int not_ours = 0;
    alloc.free(&not_ours);
    void* a = alloc.allocate(0);  // a distinct, freeable block
    EXPECT_NE(a, nullptr);
    alloc.free(a);
    alloc.release_cached();
    EXPECT_EQ(raw.used(), 0u);
    void* b = alloc.allocate(5000);
    alloc.free(b);
  }
  EXPECT_EQ(raw.used(), 0u) << "the destructor gives the cache back";
}

// ---- device choice --------------------------------------------------------------------
class DeviceChoice : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* v : kVars) unsetenv(v);
  }
  void TearDown() override { SetUp(); }
  static constexpr const char* kVars[] = {"DTRAIN_CUDA_DEVICE",        "OMPI_COMM_WORLD_LOCAL_RANK",
                                          "MPI_LOCALRANKID",           "MV2_COMM_WORLD_LOCAL_RANK",
                                          "SLURM_LOCALID",             "LOCAL_RANK"};
};

namespace {
std::vector<bool> all_usable(int n) { return std::vector<bool>(static_cast<std::size_t>(n), true); }
}  // namespace

TEST_F(DeviceChoice, NodeLocalRankSpreadsRanksOverGpus) {
  using dtrain::cuda::choose_device;
  EXPECT_EQ(dtrain::cuda::local_rank_from_environment(), -1);
  EXPECT_EQ(choose_device(0, all_usable(4)), 0);
  setenv("SLURM_LOCALID", "5", 1);
  EXPECT_EQ(choose_device(0, all_usable(4)), 1);
  setenv("OMPI_COMM_WORLD_LOCAL_RANK", "2", 1);  // the MPI launcher's variable wins
  EXPECT_EQ(dtrain::cuda::local_rank_from_environment(), 2);
  EXPECT_EQ(choose_device(0, all_usable(4)), 2);
  EXPECT_EQ(choose_device(1, all_usable(4)), 3);
  EXPECT_EQ(choose_device(0, all_usable(1)), 0) << "ranks share the only GPU";
  setenv("OMPI_COMM_WORLD_LOCAL_RANK", "not-a-number", 1);  // skipped, next variable used
  EXPECT_EQ(dtrain::cuda::local_rank_from_environment(), 5);
}

TEST_F(DeviceChoice, RanksSpreadOverTheGpusTheKernelsRunOn) {
  // A node with an older GPU (ordinal 0) beside two new ones: local ranks 0, 1, 2 get 1, 2, 1.
  using dtrain::cuda::choose_device;
  const std::vector<bool> mixed = {false, true, true};
  for (const auto& [local, want] : std::vector<std::pair<const char*, int>>{{"0", 1}, {"1", 2}, {"2", 1}}) {
    setenv("OMPI_COMM_WORLD_LOCAL_RANK", local, 1);
    EXPECT_EQ(choose_device(0, mixed), want) << "local rank " << local;
  }
  setenv("DTRAIN_CUDA_DEVICE", "0", 1);  // asked for by ordinal: the device refuses it itself
  EXPECT_EQ(choose_device(0, mixed), 0);
  unsetenv("DTRAIN_CUDA_DEVICE");
  try {
    choose_device(0, {false, false});
    FAIL() << "no usable device accepted";
  } catch (const dtrain::Error& e) {
    EXPECT_EQ(e.code(), dtrain::Errc::unavailable);
    EXPECT_NE(std::string(e.what()).find("none of the 2 visible CUDA devices"), std::string::npos) << e.what();
  }
}

TEST_F(DeviceChoice, ExplicitDeviceAndErrors) {
  using dtrain::cuda::choose_device;
  setenv("OMPI_COMM_WORLD_LOCAL_RANK", "3", 1);
  setenv("DTRAIN_CUDA_DEVICE", "1", 1);
  EXPECT_EQ(choose_device(0, all_usable(2)), 1);
  setenv("DTRAIN_CUDA_DEVICE", "2", 1);
  try {
    choose_device(0, all_usable(2));
    FAIL() << "device 2 of 2 accepted";
  } catch (const dtrain::Error& e) {
    EXPECT_EQ(e.code(), dtrain::Errc::invalid_config);
    EXPECT_NE(std::string(e.what()).find("DTRAIN_CUDA_DEVICE"), std::string::npos);
  }
  setenv("DTRAIN_CUDA_DEVICE", "one", 1);
  EXPECT_THROW(choose_device(0, all_usable(2)), dtrain::Error);
  unsetenv("DTRAIN_CUDA_DEVICE");
  try {
    choose_device(0, {});
    FAIL() << "no device accepted";
  } catch (const dtrain::Error& e) {
    EXPECT_EQ(e.code(), dtrain::Errc::unavailable);
  }
}

// ---- GEMM argument mapping ---------------------------------------------------------------
// Column-major C = alpha op(A) op(B) + beta C, from the BLAS reference definition.
void reference_column_major(bool ta, bool tb, int m, int n, int k, float alpha, const float* A,
                            int lda, const float* B, int ldb, float beta, float* C, int ldc) {
  for (int j = 0; j < n; ++j) {
    for (int i = 0; i < m; ++i) {
      double s = 0;
      for (int p = 0; p < k; ++p) {
        const float a = ta ? A[p + static_cast<std::size_t>(i) * lda] : A[i + static_cast<std::size_t>(p) * lda];
        const float b = tb ? B[j + static_cast<std::size_t>(p) * ldb] : B[p + static_cast<std::size_t>(j) * ldb];
        s += static_cast<double>(a) * b;
      }
      float& c = C[i + static_cast<std::size_t>(j) * ldc];
      c = static_cast<float>(alpha * s + beta * c);
    }
  }
}

std::vector<float> random_vector(std::size_t n, unsigned seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> d(-1, 1);
  std::vector<float> v(n);
  for (float& x : v) x = d(gen);
  return v;
}

TEST(GemmMapping, RowMajorRequestsAsColumnMajorCalls) {
  const int M = 7, N = 9, K = 5;
  for (int ta = 0; ta < 2; ++ta) {
    for (int tb = 0; tb < 2; ++tb) {
      const int lda = (ta ? M : K) + 2, ldb = (tb ? K : N) + 1, ldc = N + 3;
      const auto A = random_vector(static_cast<std::size_t>(ta ? K : M) * lda, 1);
      const auto B = random_vector(static_cast<std::size_t>(tb ? N : K) * ldb, 2);
      auto want = random_vector(static_cast<std::size_t>(M) * ldc, 3);
      auto got = want;
      dtrain::cpu_device().gemm(ta, tb, M, N, K, 0.5f, A.data(), lda, B.data(), ldb, 2.0f,
                                want.data(), ldc);
      const auto g = dtrain::cuda::column_major_gemm(ta, tb, M, N, K, A.data(), lda, 0, B.data(),
                                                     ldb, 0, got.data(), ldc, 0);
      EXPECT_EQ(g.m, N);
      EXPECT_EQ(g.n, M);
      reference_column_major(g.trans_a, g.trans_b, g.m, g.n, g.k, 0.5f, g.a, g.lda, g.b, g.ldb,
                             2.0f, g.c, g.ldc);
      for (std::size_t i = 0; i < want.size(); ++i)
        ASSERT_NEAR(got[i], want[i], 1e-5) << "ta=" << ta << " tb=" << tb << " at " << i;
    }
  }
}

// The span a 16-bit copy of an operand must cover: from its first element to its last, as the
// row-major request stores it (rows - 1 full rows and one row of its columns).
TEST(GemmMapping, OperandSpansCoverWhatTheGemmReads) {
  const int M = 7, N = 9, K = 5;
  for (int ta = 0; ta < 2; ++ta) {
    for (int tb = 0; tb < 2; ++tb) {
      const int lda = (ta ? M : K) + 2, ldb = (tb ? K : N) + 1;
      float a = 0, b = 0, c = 0;
      const auto g = dtrain::cuda::column_major_gemm(ta, tb, M, N, K, &a, lda, 100, &b, ldb, 200,
                                                     &c, N, 0);
      const std::int64_t a_extent = std::int64_t{ta ? K - 1 : M - 1} * lda + (ta ? M : K);
      const std::int64_t b_extent = std::int64_t{tb ? N - 1 : K - 1} * ldb + (tb ? K : N);
      EXPECT_EQ(dtrain::cuda::b_span(g, 1), a_extent) << "ta=" << ta << " tb=" << tb;
      EXPECT_EQ(dtrain::cuda::a_span(g, 1), b_extent) << "ta=" << ta << " tb=" << tb;
      EXPECT_EQ(dtrain::cuda::b_span(g, 3), a_extent + 2 * 100);
      EXPECT_EQ(dtrain::cuda::a_span(g, 3), b_extent + 2 * 200);
    }
  }
  EXPECT_EQ(dtrain::cuda::operand_span(false, 0, 5, 5, 0, 1), 0);
}

TEST(GemmMapping, BatchStridesFollowTheirOperands) {
  float a = 0, b = 0, c = 0;
  const auto g = dtrain::cuda::column_major_gemm(false, true, 3, 4, 5, &a, 5, 111, &b, 5, 222,
                                                 &c, 4, 333);
  EXPECT_EQ(g.a, &b);
  EXPECT_EQ(g.stride_a, 222);
  EXPECT_TRUE(g.trans_a);
  EXPECT_EQ(g.b, &a);
  EXPECT_EQ(g.stride_b, 111);
  EXPECT_FALSE(g.trans_b);
  EXPECT_EQ(g.stride_c, 333);
}

}  // namespace
