// Arenas on the GPU (Device::allocate_arena, discard, restore): a discarded range comes back
// zero-filled, whatever part of it is restored, while everything around it keeps its values;
// work queued before a discard still reads the old values (the chunks are unmapped only once
// it has run). With virtual memory management (the default) discard hands memory back;
// DTRAIN_CUDA_VMM=0 runs the fallback, where it only zeroes.
#include <cstdlib>
#include <cstring>
#include <vector>

#include "gpu_test.hpp"

using namespace dtrain;

namespace {

constexpr std::size_t kFloats = std::size_t{3} << 20;  // 12 MiB: several 2 MiB chunks

Device& gpu() { return select_device("cuda"); }

bool vmm_expected() {
  const char* v = std::getenv("DTRAIN_CUDA_VMM");
  return !(v && std::strcmp(v, "0") == 0);
}

class Arena {
 public:
  explicit Arena(std::size_t floats) : buf_(DeviceBuffer::arena(gpu(), floats * sizeof(float))) {}
  float* get() { return buf_.as<float>(); }
  std::vector<float> host(std::size_t floats) {
    std::vector<float> out(floats);
    gpu().copy(out.data(), buf_.data(), floats * sizeof(float), CopyKind::device_to_host);
    return out;
  }

 private:
  DeviceBuffer buf_;
};

// Every element of got equals want, except [first, last), which is zero.
void expect_zeroed(const std::vector<float>& got, const std::vector<float>& want,
                   std::size_t first, std::size_t last) {
  std::size_t wrong = 0, first_wrong = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const float expected = i >= first && i < last ? 0.0f : want[i];
    if (std::memcmp(&got[i], &expected, sizeof(float)) != 0 && wrong++ == 0) first_wrong = i;
  }
  EXPECT_EQ(wrong, 0u) << "first wrong element " << first_wrong << " (zeroed range [" << first
                       << ", " << last << "))";
}

}  // namespace

TEST(CudaArenas, DiscardHandsMemoryBackWhereTheDriverAllows) {
  EXPECT_EQ(gpu().discard_releases_memory(), vmm_expected());
}

TEST(CudaArenas, ArenasStartZeroFilled) {
  Arena a(kFloats);
  expect_zeroed(a.host(kFloats), std::vector<float>(kFloats, 1.0f), 0, kFloats);
}

TEST(CudaArenas, DiscardedRangeComesBackZeroAndItsNeighboursKeepTheirValues) {
  const std::vector<float> values = gputest::random_floats(kFloats, 11);
  Arena a(kFloats);
  gpu().copy(a.get(), values.data(), kFloats * sizeof(float), CopyKind::host_to_device);
  // Unaligned ends: the partial chunks at either end stay mapped and keep the neighbours.
  const std::size_t first = 250'001, last = kFloats - 300'007;
  gpu().discard(a.get() + first, (last - first) * sizeof(float));
  gpu().restore(a.get() + first, (last - first) * sizeof(float));
  expect_zeroed(a.host(kFloats), values, first, last);
}

TEST(CudaArenas, PartsOfADiscardedRangeComeBackOneByOne) {
  const std::vector<float> values = gputest::random_floats(kFloats, 12);
  Arena a(kFloats);
  gpu().copy(a.get(), values.data(), kFloats * sizeof(float), CopyKind::host_to_device);
  gpu().discard(a.get(), kFloats * sizeof(float));
  // As ZeRO 2 does after its fixed-order sum: only this rank's piece is used again.
  const std::size_t first = kFloats / 3 + 17, last = 2 * kFloats / 3 + 5;
  gpu().restore(a.get() + first, (last - first) * sizeof(float));
  gpu().fill(a.get() + first, 2.0f, static_cast<std::int64_t>(last - first));
  gpu().restore(a.get(), first * sizeof(float));
  gpu().restore(a.get() + last, (kFloats - last) * sizeof(float));
  std::vector<float> want(kFloats, 0.0f);
  std::fill(want.begin() + first, want.begin() + last, 2.0f);
  expect_zeroed(a.host(kFloats), want, 0, 0);
}

TEST(CudaArenas, WorkQueuedBeforeADiscardStillSeesTheValues) {
  const std::vector<float> values = gputest::random_floats(kFloats, 13);
  Arena a(kFloats);
  gputest::OnDevice<float> copy(gpu(), kFloats);
  gpu().copy(a.get(), values.data(), kFloats * sizeof(float), CopyKind::host_to_device);
  for (int round = 0; round < 3; ++round) {  // discarded, restored and discarded again
    gpu().copy_floats(copy.get(), a.get(), static_cast<std::int64_t>(kFloats));  // queued
    gpu().discard(a.get(), kFloats * sizeof(float));
    EXPECT_EQ(copy.host(), values) << "round " << round;
    gpu().restore(a.get(), kFloats * sizeof(float));
    gpu().copy(a.get(), values.data(), kFloats * sizeof(float), CopyKind::host_to_device);
  }
}

TEST(CudaArenas, RestoringWhatIsStillMappedZeroesIt) {
  Arena a(kFloats);
  gpu().fill(a.get(), 3.0f, static_cast<std::int64_t>(kFloats));
  gpu().restore(a.get() + 10, 1000 * sizeof(float));  // never discarded
  std::vector<float> want(kFloats, 3.0f);
  expect_zeroed(a.host(kFloats), want, 10, 1010);
}
