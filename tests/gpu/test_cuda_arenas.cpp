// Arenas on the GPU (Device::allocate_arena, discard, restore): a discarded range comes back
// zero-filled, whatever part of it is restored, while everything around it keeps its values;
// work queued before a discard still reads the old values (the chunks are unmapped only once
// it has run). With virtual memory management (the default) discard hands memory back;
// DTRAIN_CUDA_VMM=0, or a driver without it, runs the fallback, where it only zeroes. A fresh
// arena holds nothing until a range of it is restored.
#include <dlfcn.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "dtrain/core/env.hpp"
#include "dtrain/nn/gpt.hpp"
#include "emulator_probe.hpp"
#include "gpu_test.hpp"

using namespace dtrain;

namespace {

constexpr std::size_t kFloats = std::size_t{3} << 20;  // 12 MiB: several 2 MiB chunks

Device& gpu() { return select_device("cuda"); }


// Whether the driver offers virtual memory management, asked independently of the plugin:
// the emulated driver unless DTRAIN_CUDA_EMU_VMM=0; a GPU's driver by the current device's
// attribute (the plugin has loaded the driver and made its device current). Where the driver
// cannot be asked, yes, as on every GPU these tests have run on.
bool driver_has_vmm() {
  gpu();
  if (test::emulator_probe("dtrain_cuda_emu_chunk_bytes"))
    return env::get_bool("DTRAIN_CUDA_EMU_VMM", true);
  void* driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  if (!driver) return true;
  using CtxGetDevice = int (*)(int*);
  using DeviceGetAttribute = int (*)(int*, int, int);
  constexpr int kVirtualMemoryManagementSupported = 102;  // CUdevice_attribute in cuda.h
  const auto get_device = reinterpret_cast<CtxGetDevice>(dlsym(driver, "cuCtxGetDevice"));
  const auto get_attribute =
      reinterpret_cast<DeviceGetAttribute>(dlsym(driver, "cuDeviceGetAttribute"));
  int device = 0, supported = 0;
  const bool asked = get_device && get_attribute && get_device(&device) == 0 &&
                     get_attribute(&supported, kVirtualMemoryManagementSupported, device) == 0;
  dlclose(driver);
  return !asked || supported != 0;
}

// The plugin uses virtual memory management where the driver has it, unless DTRAIN_CUDA_VMM=0.
bool vmm_expected() { return env::get_bool("DTRAIN_CUDA_VMM", true) && driver_has_vmm(); }

// An arena held whole, as ParameterStore holds its arenas outside ZeRO 3.
class Arena {
 public:
  explicit Arena(std::size_t floats) : buf_(DeviceBuffer::arena(gpu(), floats * sizeof(float))) {
    gpu().restore(buf_.data(), floats * sizeof(float));
  }
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

// Bytes of [p, p + bytes) backed by host pages, where device memory is host memory (the CUDA
// emulator); -1 on a GPU. There the host cannot see what is mapped: mincore() on the address
// range the driver reserved succeeds and counts no page, mapped or not (seen on an H200).
long host_resident_bytes(const void* p, std::size_t bytes) {
  if (!test::emulator_probe("dtrain_cuda_emu_chunk_bytes")) return -1;
  const std::size_t page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  std::vector<unsigned char> in_core((bytes + page - 1) / page);
  if (mincore(const_cast<void*>(p), bytes, in_core.data()) != 0) return -1;
  long n = 0;
  for (unsigned char c : in_core) n += c & 1;
  return n * static_cast<long>(page);
}

}  // namespace

TEST(CudaArenas, DiscardHandsMemoryBackWhereTheDriverAllows) {
  EXPECT_EQ(gpu().discard_releases_memory(), vmm_expected());
}

TEST(CudaArenas, AvailableMemoryFallsByWhatAnArenaMaps) {
  gpu().synchronize();
  gpu().trim_memory(Device::Trim::all);  // no spare chunk left for the arena to take
  const std::size_t before = gpu().available_memory();
  ASSERT_GT(before, 0u);
  {
    Arena a(kFloats);
    gpu().synchronize();
    if (vmm_expected()) EXPECT_LE(gpu().available_memory() + kFloats * sizeof(float), before);
  }
}

TEST(CudaArenas, RestoredArenasAreZeroFilled) {
  Arena a(kFloats);
  expect_zeroed(a.host(kFloats), std::vector<float>(kFloats, 1.0f), 0, kFloats);
}

TEST(CudaArenas, PiecesOfAnArenaHeldFromTheStart) {
  // As a ZeRO-3 rank builds its model: only its piece is ever restored and used.
  DeviceBuffer buf = DeviceBuffer::arena(gpu(), kFloats * sizeof(float));
  float* arena = buf.as<float>();
  const std::size_t first = 3 * kFloats / 4 + 3, last = kFloats - 1;  // a quarter
  gpu().restore(arena + first, (last - first) * sizeof(float));
  gpu().fill(arena + first, 5.0f, static_cast<std::int64_t>(last - first));
  gpu().discard(arena, first * sizeof(float));  // what ZeRO 3 drops: never held here
  const long held = host_resident_bytes(arena, kFloats * sizeof(float));
  if (held >= 0 && vmm_expected()) {  // the emulator: only the piece's chunks are mapped
    EXPECT_GT(held, 0);
    EXPECT_LT(held, static_cast<long>(kFloats * sizeof(float) / 2));
  }
  std::vector<float> got(last - first);
  gpu().copy(got.data(), arena + first, got.size() * sizeof(float), CopyKind::device_to_host);
  EXPECT_EQ(got, std::vector<float>(got.size(), 5.0f));
}

TEST(CudaArenas, AModelWithDeferredWeightsHoldsNothingOfItsArenas) {
  // How a ZeRO-3 (ZeRO-2) rank builds its model: it then holds only its pieces (Trainer),
  // never the whole arenas (gradient arena), not even for a moment.
  GptConfig cfg;
  cfg.layers = 2;
  cfg.heads = 4;
  cfg.d_model = 256;
  cfg.seq_len = 16;
  cfg.vocab = 256;
  auto built = [&cfg](GptModel::Weights w) {
    return std::make_unique<GptModel>(cfg, gpu(), 1, 1, std::vector<GptStage>{GptStage{}},
                                      nullptr, false, w);
  };
  const auto held = built(GptModel::Weights::init);
  const auto deferred = built(GptModel::Weights::deferred);
  const auto grads_deferred = built(GptModel::Weights::init_grads_deferred);  // ZeRO 2
  const ParameterStore& h = held->parameters();
  const ParameterStore& d = deferred->parameters();
  const ParameterStore& g = grads_deferred->parameters();
  const long whole = host_resident_bytes(h.params(), h.bytes());
  if (whole < 0 || !vmm_expected()) return;  // a GPU: nothing the host can see
  EXPECT_GE(whole, static_cast<long>(h.bytes()) / 2) << "the held model's arena is mapped";
  EXPECT_EQ(host_resident_bytes(d.params(), d.bytes()), 0);
  EXPECT_EQ(host_resident_bytes(d.grads(), d.bytes()), 0);
  EXPECT_GE(host_resident_bytes(g.params(), g.bytes()), static_cast<long>(g.bytes()) / 2);
  EXPECT_EQ(host_resident_bytes(g.grads(), g.bytes()), 0);
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

TEST(CudaArenas, StepsReuseSpareChunksAndTrimmingGivesBackWhatNoStepTook) {
  const test::EmulatorProbe chunk_bytes = test::emulator_probe("dtrain_cuda_emu_chunk_bytes");
  const test::EmulatorProbe created = test::emulator_probe("dtrain_cuda_emu_chunks_created");
  if (!chunk_bytes || !created || !vmm_expected()) return;  // the emulator counts chunks
  const std::size_t bytes = kFloats * sizeof(float);
  const std::size_t before = chunk_bytes();
  DeviceBuffer buf = DeviceBuffer::arena(gpu(), bytes);
  EXPECT_EQ(chunk_bytes(), before) << "a fresh arena holds no memory";
  // Three "steps" of a ZeRO piece: taken back, used, dropped, then the once-a-step trim.
  std::size_t made_in_first = 0;
  for (int step = 0; step < 3; ++step) {
    const std::size_t made = created();
    gpu().restore(buf.data(), bytes);
    gpu().fill(buf.as<float>(), 1.0f, static_cast<std::int64_t>(kFloats));
    gpu().discard(buf.data(), bytes);
    gpu().synchronize();
    gpu().trim_memory(Device::Trim::unused);
    if (step == 0) made_in_first = created() - made;
    else EXPECT_EQ(created(), made) << "step " << step << " made new chunks instead of reusing";
    EXPECT_GE(chunk_bytes(), before + bytes) << "step " << step << ": the pool keeps the chunks";
  }
  EXPECT_GT(made_in_first, 0u);
  gpu().trim_memory(Device::Trim::unused);  // a "step" that took nothing: the pool goes back
  EXPECT_EQ(chunk_bytes(), before);
}

TEST(CudaArenas, TrimmingAllGivesBackEverySpareChunkAtOnce) {
  // What set-up and checkpoints do: the chunks they dropped are no step's working set.
  const test::EmulatorProbe chunk_bytes = test::emulator_probe("dtrain_cuda_emu_chunk_bytes");
  if (!chunk_bytes || !vmm_expected()) return;
  const std::size_t bytes = kFloats * sizeof(float);
  const std::size_t before = chunk_bytes();
  DeviceBuffer buf = DeviceBuffer::arena(gpu(), bytes);
  gpu().trim_memory(Device::Trim::unused);  // a step boundary: from here, nothing taken yet
  gpu().restore(buf.data(), bytes);
  gpu().discard(buf.data(), bytes);
  gpu().synchronize();
  gpu().trim_memory(Device::Trim::unused);
  EXPECT_GE(chunk_bytes(), before + bytes) << "taken since the last trim: kept";
  gpu().trim_memory(Device::Trim::all);
  EXPECT_EQ(chunk_bytes(), before);
}

TEST(CudaArenas, RestoringWhatIsStillMappedZeroesIt) {
  Arena a(kFloats);
  gpu().fill(a.get(), 3.0f, static_cast<std::int64_t>(kFloats));
  gpu().restore(a.get() + 10, 1000 * sizeof(float));  // never discarded
  std::vector<float> want(kFloats, 3.0f);
  expect_zeroed(a.host(kFloats), want, 10, 1010);
}
